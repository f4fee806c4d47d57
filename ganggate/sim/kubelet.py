"""kubesim's kubelet stand-in: runs every bound pod for all nodes, over HTTP.

A pod bound to an existing node and still Pending becomes Running `start_seconds` later
(phase, startTime, conditions Initialized/ContainersReady/Ready, a running state per
container), and, when it carries `kubesim.io/run-seconds`, Succeeded that many simulated
seconds after it started (containers terminated with exit code 0, reason Completed; Ready
False, reason PodCompleted), which frees its resources for the scheduler. Time is read from
a ganggate.sim.clock Clock, so a replay can drive it with ManualClock. Status is written like the
kubelet's status manager does (pkg/kubelet/status/status_manager.go): a strategic merge
patch of the status subresource; conditions follow pkg/kubelet/status/generate.go.
Pods on nodes that do not exist stay Pending until the node appears; deleted pods are
forgotten. Images are not pulled, probes not run, restarts never happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Mapping

import aiohttp

from ganggate.sim.clock import Clock, WallClock
from ganggate.sim.sched_informer import Reflector, object_key

log = logging.getLogger(__name__)

RUN_SECONDS_ANNOTATION = "kubesim.io/run-seconds"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_seconds(pod: Mapping) -> float | None:
    """The pod's `kubesim.io/run-seconds` (a decimal number >= 0), or None (runs forever)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
    if raw is None:
        return None
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        log.warning("ignoring %s=%r on %s: not a number", RUN_SECONDS_ANNOTATION, raw, object_key(pod))
        return None
    if not value.is_finite() or value < 0:
        return None
    return float(value)


def _condition(kind: str, status: bool, when: str, reason: str | None = None) -> dict:
    condition = {"type": kind, "status": "True" if status else "False", "lastProbeTime": None, "lastTransitionTime": when}
    if reason:
        condition["reason"] = reason
    return condition


def running_status(pod: Mapping, when: str) -> dict:
    """The status patch of a pod whose containers all started (phase Running, Ready)."""
    spec = pod.get("spec") or {}
    containers = [
        {
            "name": c.get("name"),
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"kubesim://{object_key(pod)}/{c.get('name')}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": when}},
        }
        for c in spec.get("containers") or []
    ]
    init = []
    for c in spec.get("initContainers") or []:
        sidecar = c.get("restartPolicy") == "Always"  # KEP-753: keeps running alongside
        state = {"running": {"startedAt": when}} if sidecar else {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": when, "finishedAt": when}
        }
        init.append(
            {
                "name": c.get("name"),
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"kubesim://{object_key(pod)}/{c.get('name')}",
                "ready": sidecar,
                "started": sidecar,
                "restartCount": 0,
                "state": state,
            }
        )
    status = {
        "phase": "Running",
        "startTime": when,
        "conditions": [
            _condition("PodReadyToStartContainers", True, when),
            _condition("Initialized", True, when),
            _condition("ContainersReady", True, when),
            _condition("Ready", True, when),
        ],
        "containerStatuses": containers,
    }
    if init:
        status["initContainerStatuses"] = init
    return {"status": status}


def succeeded_status(pod: Mapping, when: str) -> dict:
    """The status patch of a pod whose containers all exited 0 (phase Succeeded)."""
    spec = pod.get("spec") or {}
    started = (pod.get("status") or {}).get("startTime") or when

    def terminated(c: Mapping) -> dict:
        return {
            "name": c.get("name"),
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"kubesim://{object_key(pod)}/{c.get('name')}",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": when}},
        }

    status = {
        "phase": "Succeeded",
        "conditions": [
            _condition("PodReadyToStartContainers", False, when),
            _condition("ContainersReady", False, when, "PodCompleted"),
            _condition("Ready", False, when, "PodCompleted"),
        ],
        "containerStatuses": [terminated(c) for c in spec.get("containers") or []],
    }
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [terminated(c) for c in spec["initContainers"]]
    return {"status": status}


class Kubelet:
    """Starts and finishes the pods bound to the simulator's nodes."""

    def __init__(self, base_url: str, *, start_seconds: float = 0.0, clock: Clock | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.start_seconds = start_seconds
        self.clock: Clock = clock if clock is not None else WallClock()
        self._nodes: set[str] = set()
        self._waiting: dict[str, set[str]] = {}  # node name -> keys of pods bound to it, node absent
        self._running: dict[str, asyncio.Task] = {}  # pod key -> its lifecycle task
        self._pods: Reflector | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def pods_resource_version(self) -> int:
        """The last pod resourceVersion this kubelet has seen (0 before its first list)."""
        rv = self._pods.resource_version if self._pods is not None else ""
        return int(rv) if rv.isdigit() else 0

    # -- informer handlers ---------------------------------------------------------------

    def on_node(self, kind: str, node: dict, old: dict | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._nodes.discard(name)
            return
        self._nodes.add(name)
        for key in self._waiting.pop(name, set()):
            pod = self._pods.store.get(key) if self._pods else None
            if pod is not None:
                self.on_pod("MODIFIED", pod, None)

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        key = object_key(pod)
        if kind == "DELETED":
            task = self._running.pop(key, None)
            if task is not None:
                task.cancel()
            for keys in self._waiting.values():
                keys.discard(key)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if not node or key in self._running or phase in ("Succeeded", "Failed"):
            return
        if node not in self._nodes:
            self._waiting.setdefault(node, set()).add(key)
            return
        if phase == "Pending":
            self._start(key, self._lifecycle(key, started=False))
        elif phase == "Running" and run_seconds(pod) is not None:
            # Seen running already (a restarted kubelet): its run counts from now.
            self._start(key, self._lifecycle(key, started=True))

    def _start(self, key: str, coro) -> None:
        """Run the pod's lifecycle; the task stays recorded (so it starts once) until DELETED."""
        self._running[key] = asyncio.ensure_future(coro)

    # -- the pod's life ------------------------------------------------------------------

    async def _lifecycle(self, key: str, *, started: bool) -> None:
        if not started:
            await self.clock.sleep_until(self.clock.now() + self.start_seconds)
            start = self.clock.now()
            if not await self._patch_status(key, running_status):
                return
        else:
            start = self.clock.now()
        pod = self._pods.store.get(key) if self._pods else None
        seconds = run_seconds(pod) if pod is not None else None
        if seconds is None:
            return
        await self.clock.sleep_until(start + seconds)
        await self._patch_status(key, succeeded_status)

    async def _patch_status(self, key: str, build) -> bool:
        """Write a status built from the latest pod, retrying API errors while the pod exists."""
        delay = 0.05
        while True:
            pod = self._pods.store.get(key) if self._pods else None
            if pod is None:
                return False
            metadata = pod["metadata"]
            url = f"{self.base_url}/api/v1/namespaces/{metadata.get('namespace', 'default')}/pods/{metadata['name']}/status"
            try:
                async with self._session.patch(
                    url, json=build(pod, now_rfc3339()), headers={"Content-Type": STRATEGIC_MERGE_PATCH}
                ) as response:
                    await response.read()
                    if response.status < 300:
                        return True
                    if response.status == 404:
                        return False
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                log.debug("status of %s: %s", key, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def run(self) -> None:
        """Watch nodes and pods and run the bound pods until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32), timeout=timeout) as session:
            self._session = session
            nodes = Reflector(session, self.base_url, "/api/v1/nodes", self.on_node)
            self._pods = Reflector(session, self.base_url, "/api/v1/pods", self.on_pod)
            node_task = asyncio.ensure_future(nodes.run())
            pod_task: asyncio.Future | None = None
            try:
                await nodes.synced.wait()  # know the nodes before judging the pods
                pod_task = asyncio.ensure_future(self._pods.run())
                await asyncio.gather(node_task, pod_task)
            finally:
                tasks = [node_task, *([pod_task] if pod_task else []), *self._running.values()]
                for task in tasks:
                    task.cancel()
                with contextlib.suppress(Exception):
                    await asyncio.gather(*tasks, return_exceptions=True)
