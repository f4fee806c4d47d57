"""kubesim's node lifecycle stand-ins: condition taints, taint eviction and pod GC of lost nodes, over HTTP.

Three controllers of kube-controller-manager, in one API client:
- node taints (pkg/controller/nodelifecycle/node_lifecycle_controller.go, doNoScheduleTaintingPass
  and doNoExecuteTaintingPass): a node whose Ready condition is False gets
  `node.kubernetes.io/not-ready` with effects NoSchedule and NoExecute, Unknown gets
  `node.kubernetes.io/unreachable` with both; Ready True removes them. The NoExecute taints carry
  `timeAdded`. kubesim does not time heartbeats: a node is NotReady/Unknown when its condition
  says so (Simulator.set_node_ready).
- taint eviction (pkg/controller/tainteviction/taint_eviction.go): a pod bound to a node with
  NoExecute taints it does not all tolerate is deleted at once; one tolerating them all with
  tolerationSeconds is deleted after the smallest of them, counted on the clock from when the
  manager saw it (processPodOnNode); removing the taints cancels. Before the delete (default
  grace) the pod gets the DisruptionTarget condition, reason DeletionByTaintManager
  (addConditionAndDeletePod).
- pod GC of orphans (pkg/controller/podgc/gc_controller.go gcOrphaned): a pod bound to a node
  that no longer exists (checked with a live GET) is marked Failed with DisruptionTarget reason
  DeletionByPodGC and deleted with grace 0, after the 40 s quarantine (quarantineTime) on the clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.client.informers import ReflectorLike, SharedInformers, object_key, reflector_for, run_synced
from ganggate.sim.clock import Clock, WallClock
from ganggate.sim.helpers import taints as tainting

log = logging.getLogger(__name__)

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
CONDITION_TAINTS = {"False": NOT_READY, "Unknown": UNREACHABLE}
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
TAINT_MANAGER_MESSAGE = "Taint manager: deleting due to NoExecute taint"
POD_GC_MESSAGE = "PodGC: node no longer exists"
QUARANTINE_SECONDS = 40.0  # podgc gc_controller.go quarantineTime: a node missing from the informer may be late


def ready_status(node: Mapping) -> str:
    """The status of the node's Ready condition ("Unknown" when it has none)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return "Unknown"


def desired_taints(node: Mapping, now: str) -> list[dict] | None:
    """The node's taints with the condition taints its Ready status calls for, or None if unchanged."""
    current = tainting.node_taints(node)
    key = CONDITION_TAINTS.get(ready_status(node))
    wanted = {(key, "NoSchedule"), (key, "NoExecute")} if key else set()
    managed = {NOT_READY, UNREACHABLE}
    kept = [t for t in current if t.get("key") not in managed or (t.get("key"), t.get("effect")) in wanted]
    have = {(t.get("key"), t.get("effect")) for t in kept}
    added: list[dict[str, Any]] = [dict({"key": k, "effect": e}, **({"timeAdded": now} if e == "NoExecute" else {}))
             for k, e in sorted(wanted - have)]
    result: list[dict[str, Any]] = [dict(t) for t in kept] + added
    return None if result == current else result


def eviction_delay(pod: Mapping, node_taints: list[Mapping]) -> float | None:
    """Seconds until the taint manager deletes the pod: 0 for an untolerated NoExecute taint, the
    smallest tolerationSeconds of the tolerations used (getMinTolerationTime), None for never."""
    no_execute = [t for t in node_taints if t.get("effect") == "NoExecute"]
    if not no_execute:
        return None
    tolerations = tainting.pod_tolerations(pod)
    used: list[Mapping] = []
    for taint in no_execute:
        matching = [t for t in tolerations if tainting.tolerates(t, taint)]
        if not matching:
            return 0.0
        used.extend(matching)
    seconds = [int(s) for t in used if (s := t.get("tolerationSeconds")) is not None]
    if not seconds:
        return None
    return float(max(0, min(seconds)))


def disruption_condition(reason: str, message: str, when: str) -> dict:
    """The DisruptionTarget pod condition (KEP-3329)."""
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
            "lastProbeTime": None, "lastTransitionTime": when}


class NodeLifecycleController:
    """Taints nodes by their Ready condition, evicts pods from NoExecute-tainted nodes, collects orphans."""

    def __init__(self, base_url: str, *, clock: Clock | None = None, retry_seconds: float = 0.2,
                 shared: SharedInformers | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared = shared  # the process's shared informers (Components), or None: watches of its own
        self.clock: Clock = clock if clock is not None else WallClock()
        self.retry_seconds = retry_seconds
        self._session: aiohttp.ClientSession | None = None
        self._nodes: ReflectorLike | None = None
        self._pods: ReflectorLike | None = None
        self._node_work: asyncio.Queue[str] = asyncio.Queue()
        self._evictions: dict[str, tuple[asyncio.Task, float, float]] = {}  # pod key -> (task, start, delay)
        self._orphans: dict[str, asyncio.Task] = {}
        self._by_node: dict[str, set[str]] = {}  # node name -> keys of the pods bound to it
        self.evicted = 0
        self.collected = 0
        self.ready = asyncio.Event()
        """Set once the nodes and the pods have been listed."""

    # -- informer handlers ---------------------------------------------------------------

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    def on_node(self, kind: str, node: dict, old: dict | None) -> None:
        name = node["metadata"]["name"]
        if kind != "DELETED":
            self._node_work.put_nowait(name)
        for key in list(self._by_node.get(name, ())):
            pod = self._pods.store.get(key) if self._pods else None
            if pod is not None:
                self.on_pod("MODIFIED", pod, None)

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        key = object_key(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            if kind == "DELETED":
                self._by_node.get(node_name, set()).discard(key)
            else:
                self._by_node.setdefault(node_name, set()).add(key)
        if kind == "DELETED" or not node_name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._cancel(key)
            orphan = self._orphans.pop(key, None)
            if orphan is not None and kind == "DELETED":
                orphan.cancel()
            return
        node = self._nodes.store.get(node_name) if self._nodes else None
        if node is None:
            if self._nodes is not None and self._nodes.synced.is_set() and key not in self._orphans:
                self._orphans[key] = asyncio.ensure_future(self._collect(key, node_name))
            return
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._cancel(key)  # being deleted already: nothing to evict
            return
        delay = eviction_delay(pod, tainting.node_taints(node))
        if delay is None:
            self._cancel(key)
            return
        current = self._evictions.get(key)
        start = current[1] if current is not None else self.clock.now()
        if current is not None:
            if current[2] == delay:
                return
            current[0].cancel()
        self._evictions[key] = (asyncio.ensure_future(self._evict(key, start + delay)), start, delay)

    def _cancel(self, key: str) -> None:
        current = self._evictions.pop(key, None)
        if current is not None:
            current[0].cancel()

    # -- actions -------------------------------------------------------------------------

    async def _taint(self, name: str) -> None:
        node = self._nodes.store.get(name) if self._nodes else None
        if node is None:
            return
        wanted = desired_taints(node, now_rfc3339())
        if wanted is None:
            return
        patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                 "spec": {"taints": wanted}}  # taints are replaced whole; stale rv is 409, retried
        async with self._http.patch(f"{self.base_url}/api/v1/nodes/{name}", json=patch,
                                       headers={"Content-Type": STRATEGIC_MERGE_PATCH}) as response:
            await response.read()
            if response.status >= 300 and response.status not in (404, 409):
                raise aiohttp.ClientError(f"tainting node {name}: {response.status}")

    async def _evict(self, key: str, when: float) -> None:
        await self.clock.sleep_until(when)
        pod = self._pods.store.get(key) if self._pods else None
        if pod is None:
            return
        if await self._delete(pod, "DeletionByTaintManager", TAINT_MANAGER_MESSAGE, grace=None):
            self.evicted += 1
        self._evictions.pop(key, None)

    async def _collect(self, key: str, node_name: str) -> None:
        """gcOrphaned: after the quarantine, confirm the node is gone, then mark the pod Failed and force-delete it."""
        await self.clock.sleep_until(self.clock.now() + QUARANTINE_SECONDS)
        while True:
            try:
                async with self._http.get(f"{self.base_url}/api/v1/nodes/{node_name}") as response:
                    await response.read()
                    if response.status == 200:
                        self._orphans.pop(key, None)
                        return
                    gone = response.status == 404
                pod = self._pods.store.get(key) if self._pods else None
                if pod is None:
                    return
                if gone and await self._delete(pod, "DeletionByPodGC", POD_GC_MESSAGE, grace=0, fail=True):
                    self.collected += 1
                    return
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.debug("pod gc %s: %s", key, exc)
            await asyncio.sleep(self.retry_seconds)

    async def _delete(self, pod: Mapping, reason: str, message: str, grace: int | None, fail: bool = False) -> bool:
        """Add the DisruptionTarget condition through pods/status, then delete (uid precondition)."""
        meta = pod["metadata"]
        path = f"{self.base_url}/api/v1/namespaces/{meta.get('namespace', 'default')}/pods/{meta['name']}"
        when = now_rfc3339()
        status: dict[str, Any] = {"conditions": [disruption_condition(reason, message, when)]}
        if fail and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            status["phase"] = "Failed"
        delay = self.retry_seconds
        while True:
            try:
                async with self._http.patch(path + "/status", json={"status": status},
                                               headers={"Content-Type": STRATEGIC_MERGE_PATCH}) as response:
                    await response.read()
                    if response.status == 404:
                        return False
                    ok = response.status < 300
                if ok:
                    body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                                            "preconditions": {"uid": meta.get("uid")}}
                    if grace is not None:
                        body["gracePeriodSeconds"] = grace
                    async with self._http.delete(path, json=body) as response:
                        await response.read()
                        if response.status < 300:
                            return True
                        if response.status in (404, 409):
                            return False
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.debug("deleting %s: %s", meta.get("name"), exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _work(self) -> None:
        while True:
            name = await self._node_work.get()
            try:
                await self._taint(name)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.debug("node lifecycle %s: %s; retrying", name, exc)
                await asyncio.sleep(self.retry_seconds)
                self._node_work.put_nowait(name)

    async def run(self) -> None:
        """Watch nodes and pods until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            self._nodes = reflector_for(session, self.base_url, "/api/v1/nodes", self.on_node, self.shared)
            self._pods = reflector_for(session, self.base_url, "/api/v1/pods", self.on_pod, self.shared)
            # Know the nodes before judging the pods; the pending evictions and pod GCs go with it.
            await run_synced(self._nodes, self._pods, self._work, self.ready, also_cancel=lambda: [
                *(t for t, _, _ in self._evictions.values()), *self._orphans.values()])
