"""kubesim's kubelet stand-in: runs every bound pod for all nodes, over HTTP.

A pod bound to an existing node and still Pending becomes Running `start_seconds` later
(phase, startTime, conditions Initialized/ContainersReady/Ready, a running state per
container), and, when it carries `kubesim.io/run-seconds`, Succeeded that many simulated
seconds after it started (containers terminated with exit code 0, reason Completed; Ready
False, reason PodCompleted), which frees its resources for the scheduler. With
`kubesim.io/fail-after-seconds` its containers fail that long after the start instead
(`kubesim.io/fail-reason`, default Error, `kubesim.io/fail-exit-code`, default 1, 137 for
OOMKilled): phase Failed under restartPolicy Never, else restarted in place once.

A pod being deleted (metadata.deletionTimestamp) is killed when its deletionGracePeriodSeconds
have passed on this kubelet's clock (at once if it never started): containers terminated with
exit code 137, reason Error, phase Failed (kubelet_pods.go getPhase for a terminal pod), unless
it finished meanwhile; then the kubelet deletes it with grace 0 and a uid precondition, as the
status manager does once a pod is terminal and being deleted (status_manager.go canBeDeleted).

Time is read from a ganggate.sim.clock Clock, so a replay can drive it with ManualClock. Status
is written like the status manager does: a strategic merge patch of the status subresource.
Pods on nodes that do not exist stay Pending until the node appears. On a node whose Ready
condition is Unknown (its kubelet stopped reporting) nothing is written until it is back.
Images are not pulled, probes not run; a failed container is restarted once at most.

GPU sharing: before a pod starts, the gpushare device plugin stand-in (ganggate/sim/kubelet/deviceplugin.py)
admits its `aliyun.com/gpu-mem` on the card its annotation names, or refuses it; a refused pod
fails at admission as a failed device plugin Allocate makes it fail (pkg/kubelet/cm/admission/
errors.go: reason UnexpectedAdmissionError, "Allocate failed due to ..., which is unexpected";
pkg/kubelet/kubelet.go rejectPod: phase Failed, a Warning Event). An admitted sharing pod gets
`ALIYUN_COM_GPU_MEM_ASSIGNED: "true"` and a new assume time, as the plugin's Allocate patches it
(gpushare-device-plugin pkg/gpu/nvidia/podutils.go updatePodAnnotations).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from ganggate.sim.apimachinery.timestamps import now_rfc3339  # (the replay reads it here too)
from ganggate.sim.client.informers import Reflector, object_key
from ganggate.sim.clock import Clock, WallClock
from ganggate.sim.kubelet import claims
from ganggate.sim.kubelet.deviceplugin import ASSIGNED, ASSUME_TIME, REJECT_REASON, CardLedger, shared_amount
from ganggate.sim.kubelet.status import (  # re-exported: the replay and tests use them
    fail_after_seconds,
    failed_status,
    killed_status,
    rejected_status,
    restarted_status,
    run_seconds,
    running_status,
    succeeded_status,
)

log = logging.getLogger(__name__)

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
TERMINAL = ("Succeeded", "Failed")


def _phase(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _reachable(node: Mapping) -> bool:
    """False when the node's Ready condition is Unknown: its kubelet is not reporting (a node without
    a Ready condition counts as up)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") != "Unknown"
    return True


class Kubelet:
    """Starts, finishes, fails and kills the pods bound to the simulator's nodes."""

    def __init__(self, base_url: str, *, start_seconds: float = 0.0, clock: Clock | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.start_seconds = start_seconds
        self.clock: Clock = clock if clock is not None else WallClock()
        self._nodes: dict[str, asyncio.Event] = {}  # node name -> set while the node is reachable
        self._waiting: dict[str, set[str]] = {}  # node name -> keys of pods bound to it, node absent
        self._running: dict[str, asyncio.Task] = {}  # pod key -> its start task
        self._started_at: dict[str, float] = {}  # pod key -> clock time its containers started
        self._armed: dict[str, tuple] = {}  # pod key -> (run, fail) seconds its timer was set for
        self._timers: dict[str, asyncio.Task] = {}  # pod key -> task ending the run (finish or fail)
        self._failed_once: set[str] = set()
        self._terminating: dict[str, tuple[asyncio.Task, float, int]] = {}  # key -> (task, noticed, grace)
        self._deleting: dict[str, asyncio.Task] = {}  # key -> the final delete
        self._pods: Reflector | None = None
        self._node_objects: dict[str, dict] = {}  # node name -> the latest Node seen
        self.cards = CardLedger()  # the device plugins' view: pods admitted per node and card
        self._session: aiohttp.ClientSession | None = None

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    @property
    def pods_resource_version(self) -> int:
        """The last pod resourceVersion this kubelet has seen (0 before its first list)."""
        rv = self._pods.resource_version if self._pods is not None else ""
        return int(rv) if rv.isdigit() else 0

    # -- informer handlers ---------------------------------------------------------------

    def on_node(self, kind: str, node: dict, old: dict | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._nodes.pop(name, asyncio.Event()).clear()
            self._node_objects.pop(name, None)
            return
        self._node_objects[name] = node
        up = self._nodes.setdefault(name, asyncio.Event())
        if _reachable(node):
            up.set()
        else:
            up.clear()
        for key in self._waiting.pop(name, set()):
            pod = self._pods.store.get(key) if self._pods else None
            if pod is not None:
                self.on_pod("MODIFIED", pod, None)

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        key = object_key(pod)
        if kind == "DELETED":
            self._forget(key)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        phase = _phase(pod)
        if not node:
            return
        if node not in self._nodes:
            self._waiting.setdefault(node, set()).add(key)
            return
        deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        if phase in TERMINAL:
            self.cards.release(key)
            if deleting and key not in self._deleting:
                self._deleting[key] = asyncio.ensure_future(self._final_delete(key))
            return
        if deleting:
            self._terminate_later(key, pod)
            return
        if phase == "Pending":
            if key not in self._running:
                self._running[key] = asyncio.ensure_future(self._start(key))
        elif phase == "Running":
            # Not started here (a restarted kubelet sees it running already); a pod this kubelet
            # is starting shows Running in the watch before its own status write has returned,
            # and that write records the start and arms the timer.
            starting = self._running.get(key)
            if key not in self._started_at and (starting is None or starting.done()):
                self._started_at[key] = self.clock.now()
                self.cards.admit(key, pod, self._node_objects[node])  # its devices are allocated already
            self._arm(key, pod)

    def _forget(self, key: str) -> None:
        tasks = [self._running.pop(key, None), self._timers.pop(key, None), self._deleting.pop(key, None)]
        terminating = self._terminating.pop(key, None)
        for task in tasks + [terminating[0] if terminating else None]:
            if task is not None:
                task.cancel()
        self._started_at.pop(key, None)
        self._armed.pop(key, None)
        self._failed_once.discard(key)
        self.cards.release(key)
        for keys in self._waiting.values():
            keys.discard(key)

    # -- the pod's life ------------------------------------------------------------------

    async def _start(self, key: str) -> None:
        await self.clock.sleep_until(self.clock.now() + self.start_seconds)
        start = self.clock.now()
        if not await claims.wait_prepared(self._http, self.base_url,  # DRA: claims allocated and reserved
                                          lambda: self._pods.store.get(key) if self._pods else None, asyncio.sleep):
            return
        if not await self._allocate_devices(key):
            return

        def build(pod: Mapping, when: str) -> dict | None:
            if _phase(pod) != "Pending" or (pod.get("metadata") or {}).get("deletionTimestamp"):
                return None  # no containers are started for a pod being deleted
            return running_status(pod, when)

        if await self._patch_status(key, build):
            self._started_at.setdefault(key, start)
            pod = self._pods.store.get(key) if self._pods else None
            if pod is not None and _phase(pod) == "Running":
                self._arm(key, pod)

    async def _allocate_devices(self, key: str) -> bool:
        """Admit the pod's shared GPU memory on its card (the device plugin's Allocate); False when refused,
        after failing the pod as the kubelet does. Decided without awaiting, so admissions do not interleave."""
        pod = self._pods.store.get(key) if self._pods else None
        if pod is None or _phase(pod) != "Pending" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return True  # _start's own checks apply
        node = self._node_objects.get((pod.get("spec") or {}).get("nodeName") or "")
        if node is None:
            return True
        refusal = self.cards.admit(key, pod, node)
        if refusal is not None:
            message = f"Allocate failed due to {refusal}, which is unexpected"
            log.info("kubelet rejects %s: %s", key, message)
            await self._patch_status(key, _unless_terminal(lambda _pod, _when: rejected_status(REJECT_REASON, message)))
            await self._event(pod, REJECT_REASON, message)
            return False
        if shared_amount(pod) > 0:
            await self._patch_metadata(key, {"metadata": {"annotations": {
                ASSIGNED: "true", ASSUME_TIME: str(time.time_ns())}}})
        return True

    async def _patch_metadata(self, key: str, patch: dict) -> None:
        async def send(session: aiohttp.ClientSession, pod: Mapping) -> int:
            meta = pod["metadata"]
            url = f"{self.base_url}/api/v1/namespaces/{meta.get('namespace', 'default')}/pods/{meta['name']}"
            async with session.patch(url, json=patch, headers={"Content-Type": "application/merge-patch+json"}) as response:
                await response.read()
                return response.status

        await self._with_retries(key, send)

    async def _event(self, pod: Mapping, reason: str, message: str) -> None:
        """A Warning Event about the pod from the kubelet (best effort, as the event recorder is)."""
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace", "default")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": meta.get("name"),
                               "uid": meta.get("uid")},
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": "kubelet", "host": (pod.get("spec") or {}).get("nodeName")},
            "firstTimestamp": now_rfc3339(), "lastTimestamp": now_rfc3339(), "count": 1,
        }
        if self._session is None:
            return
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
            async with self._session.post(f"{self.base_url}/api/v1/namespaces/{namespace}/events", json=event) as response:
                await response.read()

    def _arm(self, key: str, pod: Mapping) -> None:
        """(Re)set the timer that ends the run: finish at run-seconds, or fail at fail-after-seconds."""
        if key not in self._started_at:
            return  # our own running status is on its way; armed once written
        signature = (run_seconds(pod), None if key in self._failed_once else fail_after_seconds(pod))
        if self._armed.get(key) == signature:
            return
        self._armed[key] = signature
        previous = self._timers.pop(key, None)
        if previous is not None and previous is not asyncio.current_task():
            previous.cancel()
        if signature != (None, None):
            self._timers[key] = asyncio.ensure_future(self._run_out(key, *signature))

    async def _run_out(self, key: str, run: float | None, fail: float | None) -> None:
        start = self._started_at[key]
        if fail is not None and (run is None or fail < run):
            await self.clock.sleep_until(start + fail)
            pod = self._pods.store.get(key) if self._pods else None
            if pod is None:
                return
            if (pod.get("spec") or {}).get("restartPolicy", "Always") == "Never":
                await self._patch_status(key, _unless_terminal(failed_status))
                return
            self._failed_once.add(key)
            if await self._patch_status(key, _unless_terminal(restarted_status)):
                pod = self._pods.store.get(key) if self._pods else None
                if pod is not None:
                    self._arm(key, pod)
            return
        assert run is not None
        await self.clock.sleep_until(start + run)
        await self._patch_status(key, _unless_terminal(succeeded_status))

    # -- deletion ------------------------------------------------------------------------

    def _terminate_later(self, key: str, pod: Mapping) -> None:
        """Kill the pod once its grace period has passed on our clock (a shorter one replaces it)."""
        grace = int((pod.get("metadata") or {}).get("deletionGracePeriodSeconds") or 0)
        if _phase(pod) == "Pending":
            grace = 0  # nothing started: nothing to wait for
            starting = self._running.pop(key, None)
            if starting is not None:
                starting.cancel()
        current = self._terminating.get(key)
        if current is not None and current[2] <= grace:
            return
        noticed = current[1] if current is not None else self.clock.now()
        if current is not None:
            current[0].cancel()
        task = asyncio.ensure_future(self._terminate(key, noticed + grace))
        self._terminating[key] = (task, noticed, grace)

    async def _terminate(self, key: str, deadline: float) -> None:
        await self.clock.sleep_until(deadline)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if await self._patch_status(key, _unless_terminal(killed_status)) and key not in self._deleting:
            self._deleting[key] = asyncio.ensure_future(self._final_delete(key))

    async def _final_delete(self, key: str) -> None:
        """The status manager's delete of a terminal pod being deleted: grace 0, uid precondition."""
        async def send(session: aiohttp.ClientSession, pod: Mapping) -> int:
            meta = pod["metadata"]
            url = f"{self.base_url}/api/v1/namespaces/{meta.get('namespace', 'default')}/pods/{meta['name']}"
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta.get("uid")}}
            async with session.delete(url, json=body) as response:
                await response.read()
                return 200 if response.status in (404, 409) else response.status

        await self._with_retries(key, send)

    # -- writing -------------------------------------------------------------------------

    async def _patch_status(self, key: str, build: Callable[[Mapping, str], dict | None]) -> bool:
        """Write a status built from the latest pod, retrying API errors while the pod exists."""
        async def send(session: aiohttp.ClientSession, pod: Mapping) -> int:
            # Stamped on the kubelet's own clock, as the kubelet's status manager stamps
            # status.startTime (metav1.Now() in pkg/kubelet/status/status_manager.go
            # updateStatusInternal): on a replay's simulated clock a pod started then, and its
            # activeDeadlineSeconds (pkg/kubelet/active_deadline.go) counts from it.
            patch = build(pod, now_rfc3339(self.clock.epoch()))
            if patch is None:
                return 204
            metadata = pod["metadata"]
            url = f"{self.base_url}/api/v1/namespaces/{metadata.get('namespace', 'default')}/pods/{metadata['name']}/status"
            async with session.patch(url, json=patch, headers={"Content-Type": STRATEGIC_MERGE_PATCH}) as response:
                await response.read()
                return response.status

        return await self._with_retries(key, send) == 200

    async def _with_retries(self, key: str, send: Callable[[aiohttp.ClientSession, Mapping], Any]) -> int:
        """Send a request about the pod once its node is reachable; retry errors while the pod exists.
        Returns the status (404 once the pod is gone)."""
        delay = 0.05
        while True:
            pod = self._pods.store.get(key) if self._pods else None
            if pod is None or self._session is None:
                return 404
            up = self._nodes.get((pod.get("spec") or {}).get("nodeName") or "")
            if up is not None and not up.is_set():
                await up.wait()  # cancelled with the rest of the pod's tasks if it goes
                continue
            try:
                status = await send(self._session, pod)
                if status < 300 or status == 404:
                    return status
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.debug("kubelet request for %s: %s", key, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _tasks(self) -> list[asyncio.Task]:
        return [*self._running.values(), *self._timers.values(), *self._deleting.values(),
                *(t for t, _, _ in self._terminating.values())]

    async def run(self) -> None:
        """Watch nodes and pods and run the bound pods until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32), timeout=timeout) as session:
            self._session = session
            nodes = Reflector(session, self.base_url, "/api/v1/nodes", self.on_node)
            # Only pods bound to a node: a kubelet lists and watches the pods of its own node
            # (pkg/kubelet/config/apiserver.go NewSourceApiserver: fieldSelector spec.nodeName=<node>);
            # this one kubelet runs every node, so it watches what all of theirs do together.
            self._pods = Reflector(session, self.base_url, "/api/v1/pods", self.on_pod, field_selector="spec.nodeName!=")
            node_task = asyncio.ensure_future(nodes.run())
            pod_task: asyncio.Future | None = None
            try:
                await nodes.synced.wait()  # know the nodes before judging the pods
                pod_task = asyncio.ensure_future(self._pods.run())
                await asyncio.gather(node_task, pod_task)
            finally:
                tasks = [node_task, *([pod_task] if pod_task else []), *self._tasks()]
                for task in tasks:
                    task.cancel()
                with contextlib.suppress(Exception):
                    await asyncio.gather(*tasks, return_exceptions=True)


def _unless_terminal(build: Callable[[Mapping, str], dict]) -> Callable[[Mapping, str], dict | None]:
    """Pods are not allowed to transition out of terminal phases (generateAPIPodStatus)."""
    def guarded(pod: Mapping, when: str) -> dict | None:
        return None if _phase(pod) in TERMINAL else build(pod, when)

    return guarded
