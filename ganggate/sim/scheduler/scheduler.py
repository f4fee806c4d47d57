"""kubesim's default scheduler: an HTTP client of the API server, like kube-scheduler.

The async shell around the pure parts: it watches nodes and pods (ganggate.sim.client.informers),
keeps the cache (ganggate.sim.scheduler.cache) and the queue (ganggate.sim.scheduler.queue) in step, runs one
scheduling cycle at a time (ganggate.sim.scheduler.schedule_one) and binds in the background through the
binding subresource, as pkg/scheduler/schedule_one.go does (the scheduling cycle assumes the
pod, the binding cycle runs concurrently). A pod that fits nowhere gets PodScheduled=False,
reason Unschedulable and the FitError message, written only when it changed
(pkg/scheduler/schedule_one.go handleSchedulingFailure / updatePod); then PostFilter preemption
(ganggate.sim.scheduler.preemption) may nominate a node and delete victims, or, finding none,
clear the pod's nomination (ganggate.sim.scheduler.eventhandlers). Informer events move the
unschedulable pods their QueueingHints say they may help (ganggate.sim.scheduler.hints), as
pkg/scheduler/eventhandlers.go does; the gates of ganggate/sim/componentbase/featuregate.py
(SchedulerPopFromBackoffQ, SchedulerQueueingHints, and the release of --scheduler-emulated-version)
decide which.
Why this module is long: the cycle, nomination and the three writes (bind, status, preemption) share its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from ganggate.sim.apimachinery.quantity import QuantityError
from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.client.informers import Reflector, object_key
from ganggate.sim.componentbase.featuregate import FeatureGates
from ganggate.sim.helpers.podrequests import scheduling_requests
from ganggate.sim.scheduler import dynamicresources, eventhandlers, gangscheduling, hints, preemption
from ganggate.sim.scheduler.cache import ClusterCache, PodEntry
from ganggate.sim.scheduler.nominator import Nominator
from ganggate.sim.scheduler.plugins import pod_priority
from ganggate.sim.scheduler.queue import (
    LEFTOVER_FLUSH_INTERVAL,
    MAX_IN_UNSCHEDULABLE_SECONDS,
    QueuedPod,
    SchedulingQueue,
)
from ganggate.sim.scheduler.schedule_one import Algorithm, Decision

log = logging.getLogger(__name__)

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
TERMINAL_PHASES = ("Succeeded", "Failed")




def pod_scheduled_condition(pod: Mapping) -> Mapping | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition
    return None


def node_name_of(pod: Mapping) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


@dataclass(frozen=True)
class _Nominated(Decision):
    """No node now; preemption nominated one (the pod waits for its victims to go), or decided
    what becomes of the pod's nomination (eventhandlers.KEEP or CLEAR)."""

    nominated: str | None = None
    nomination: str = "keep"


def needs_unschedulable_update(pod: Mapping, message: str) -> bool:
    """False when the pod already carries exactly this Unschedulable condition."""
    condition = pod_scheduled_condition(pod)
    return not (
        condition is not None
        and condition.get("status") == "False"
        and condition.get("reason") == "Unschedulable"
        and condition.get("message") == message
    )


class Scheduler:
    """Binds pending pods of `scheduler_name` to nodes, one scheduling cycle at a time."""

    def __init__(
        self,
        base_url: str,
        *,
        scheduler_name: str = "default-scheduler",
        seed: int = 0,
        percentage_of_nodes_to_score: int = 0,
        pod_initial_backoff_seconds: float = 1.0,
        pod_max_backoff_seconds: float = 10.0,
        unschedulable_flush_seconds: float = MAX_IN_UNSCHEDULABLE_SECONDS,
        max_in_flight: int = 64,
        feature_gates: FeatureGates | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # kube-scheduler's --feature-gates (ganggate/sim/componentbase/featuregate.py; 1.35 defaults when None)
        self.feature_gates = feature_gates or FeatureGates()
        self.scheduler_name = scheduler_name
        self.cache = ClusterCache()
        self.algorithm = Algorithm(self.cache, seed=seed, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
        self.dra = dynamicresources.plugin(self.feature_gates)  # DynamicResources (None when its gate is off)
        self.algorithm.dra = self.dra
        major, minor = self.feature_gates.version.split(".")[:2]
        self.release = (int(major), int(minor))
        self.queueing_hints = self.feature_gates.enabled("SchedulerQueueingHints")
        self.queue = SchedulingQueue(
            initial_backoff_seconds=pod_initial_backoff_seconds,
            max_backoff_seconds=pod_max_backoff_seconds,
            max_unschedulable_seconds=unschedulable_flush_seconds,
            pop_from_backoff=self.feature_gates.enabled("SchedulerPopFromBackoffQ"),
            queueing_hints=self.queueing_hints,
            release=self.release,
        )
        self.max_in_flight = max_in_flight
        self._wake = asyncio.Event()
        self._written: dict[str, str] = {}  # pod key -> Unschedulable message last written
        self._in_flight: dict[str, QueuedPod] = {}
        self._tasks: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None
        self._pods: Reflector | None = None
        self._pdbs: Reflector | None = None
        self.nominated = Nominator()  # pending pod key -> its room on status.nominatedNodeName
        self.preemptions = 0
        self._held = False
        self.scheduled = 0
        self.failed_attempts = 0
        # KEP-4671 PodGroup gangs (ganggate/sim/scheduler/gangscheduling.py), when the gates are on
        self.gangs = gangscheduling.GangScheduling(self) if gangscheduling.enabled(self.feature_gates) else None

    # -- for drivers (the replay): is there anything left to do? ---------------------------

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    @property
    def pods_resource_version(self) -> int:
        """The last pod resourceVersion this scheduler has seen (0 before its first list)."""
        rv = self._pods.resource_version if self._pods is not None else ""
        return int(rv) if rv.isdigit() else 0

    @property
    def busy(self) -> bool:
        """True while a pod waits in activeQ or backoffQ, or a bind or status write is in flight."""
        return bool(self.queue.active_count() or self.queue.backoff_count() or self._in_flight or self._tasks)

    @property
    def synced(self) -> bool:
        """True once the first list of pods has been applied."""
        return self._pods is not None and self._pods.synced.is_set()

    def hold(self) -> None:
        """Take no pod from the queue until `resume` (a driver lets one instant's changes land
        first, so that a replay does not depend on the order events arrive in)."""
        self._held = True

    def resume(self) -> None:
        """Undo `hold` and schedule what is queued."""
        self._held = False
        self._wake.set()

    # -- informer handlers ---------------------------------------------------------------

    def _move(self, event: hints.ClusterEvent, old: Mapping | None, new: Mapping | None,
              pre_check: Callable[[Mapping], bool] | None = None) -> None:
        """MoveAllToActiveOrBackoffQueue, and wake the loop when a pod moved."""
        if self.queue.unschedulable and self.queue.move(event, old, new, pre_check):
            self._wake.set()

    def _on_dra_change(self, resource: str, kind: str, obj: Mapping, old: Mapping | None) -> None:
        """A DeviceClass, ResourceSlice or ResourceClaim changed: move the pods DynamicResources
        rejected, as its EventsToRegister asks (hints.py)."""
        self._move(hints.dra_event(resource, kind), old, None if kind == "DELETED" else obj)

    def _node_pre_check(self, node: Mapping) -> Callable[[Mapping], bool] | None:
        """preCheckForNode: None with QueueingHints, else the fit check against this node."""
        name = str((node.get("metadata") or {}).get("name") or "")
        slot = self.cache.index.get(name)
        if self.queueing_hints or slot is None:
            return None
        return eventhandlers.node_pre_check(node, self.cache.free(name), int(self.cache.pod_count[slot]),
                                            int(self.cache.pod_limit[slot]))

    def on_node(self, kind: str, node: dict, old: dict | None) -> None:
        if kind == "DELETED":
            self.cache.remove_node(node["metadata"]["name"])
            self._move(hints.NODE_DELETE, node, None)
            return
        self.cache.set_node(node)
        if old is None or kind == "ADDED":
            self._move(hints.NODE_ADD, None, node, self._node_pre_check(node))
            return
        for event in hints.node_change_events(old, node):  # updateNodeInCache
            self._move(event, old, node, self._node_pre_check(node))

    def _nominated_pod_gone(self, old: Mapping) -> None:
        """A nomination was removed or changed, or a nominated pod deleted: the pods of lower or
        equal priority it kept out may fit now (EventAssignedPodDelete; since 1.33)."""
        if self.release >= (1, 33):
            self._move(hints.ASSIGNED_POD_DELETE, old, None,
                       eventhandlers.lower_or_equal_priority(pod_priority(old)))

    def _requests_of(self, pod: Mapping, old: Mapping | None, known: Mapping | None) -> dict | None:
        """The pod's request and non-zero request, recomputed only when its spec changed."""
        if known and old is not None and old.get("spec") == pod.get("spec"):
            return dict(known)
        try:
            request, nonzero = scheduling_requests(pod)
        except QuantityError:
            return None
        return {"request": request, "nonzero": nonzero}

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        key = object_key(pod)
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in TERMINAL_PHASES or node_name_of(pod):
            self.nominated.pop(key, None)  # the nominator forgets bound and deleted pods
        if kind == "DELETED" or phase in TERMINAL_PHASES:
            was_queued = key in self.queue
            self.queue.delete(key)
            self._written.pop(key, None)
            removed = self.cache.remove_pod(key)
            if removed is not None:  # deleteAssignedPodFromCache, or an assumed pod's deletion
                gone = pod if node_name_of(pod) else dict(pod, spec=dict(spec, nodeName=removed.node))
                self._move(hints.ASSIGNED_POD_DELETE, gone, None)
            elif was_queued and eventhandlers.nominated_node(pod):
                self._nominated_pod_gone(pod)  # deletePodFromSchedulingQueue
            return
        node = spec.get("nodeName")
        entry = self.cache.pods.get(key)
        if node:
            # An assigned pod, whoever bound it: it counts on its node (confirming an assumed one).
            self.queue.delete(key)
            self._written.pop(key, None)
            if entry is not None and entry.node == node and (entry.assumed or (old is not None and old.get("spec") == spec)):
                entry.assumed = False  # binding only sets nodeName: the assumed request stands
                return
            info = self._requests_of(pod, None, None)
            if info is not None:
                request, nonzero = info["request"], info["nonzero"]
                self.cache.add_pod(key, PodEntry(node, request, nonzero[0], nonzero[1], priority=pod_priority(pod)))
                if entry is not None and old is not None and entry.request != request and hints.pod_scaled_down(old, pod):
                    # AssignedPodUpdate with UpdatePodScaleDown: a resize may have made room
                    self._move(hints.ClusterEvent(hints.ASSIGNED_POD, hints.UPDATE_POD_SCALE_DOWN), old, pod)
            return
        if entry is not None and entry.assumed:
            return  # our bind is in flight (cache.IsAssumedPod): not a pending pod any more
        if spec.get("schedulerName", "default-scheduler") != self.scheduler_name or (pod.get("metadata") or {}).get(
            "deletionTimestamp"
        ):
            self.queue.delete(key)
            return
        queued = self.queue.pods.get(key)
        info = self._requests_of(pod, old, queued.extra if queued else None)
        if info is None:
            self.queue.delete(key)
            return
        if self.gangs is not None and self.gangs.hold(key, pod, info):
            return  # PreEnqueue: its PodGroup is missing or short of minCount
        self.queue.update(key, pod, **info)
        if not (kind == "ADDED" and (pod.get("spec") or {}).get("schedulingGates")):
            self._nominate(key, pod, info, old)  # moveToActiveQ nominates no gated pod on Add
        if old is not None and eventhandlers.has_nominated_node_name_changed(old, pod):
            self._nominated_pod_gone(old)  # updatePodInSchedulingQueue
        self._wake.set()

    # -- the scheduling loop -------------------------------------------------------------

    def _nominate(self, key: str, pod: Mapping, info: Mapping, old: Mapping | None = None) -> None:
        """Follow status.nominatedNodeName of a pending pod (nominator.go UpdateNominatedPod: a
        nomination the scheduler made is kept while neither the old nor the new pod shows one,
        the status patch not seen yet)."""
        node = (pod.get("status") or {}).get("nominatedNodeName")
        if not node:
            kept = self.nominated.get(key)
            if kept is not None and old is not None and not eventhandlers.nominated_node(old):
                node = kept.node
            else:
                self.nominated.pop(key, None)
                return
        request, nonzero = info["request"], info["nonzero"]
        self.nominated[key] = PodEntry(node, request, nonzero[0], nonzero[1], priority=pod_priority(pod))

    def schedule_one(self, queued: QueuedPod) -> str | None:
        """One scheduling cycle (no I/O): the node the pod is assumed onto, or None."""
        request, nonzero = queued.extra["request"], queued.extra["nonzero"]
        # The other nominated pods of at least this priority hold their room (addNominatedPods).
        applied = self.nominated.hold(self.cache, queued.key, queued.priority) if self.nominated else []
        try:
            decision = self._decide(queued, request, nonzero)
        finally:
            self.nominated.release(self.cache, applied)
        if decision.node is None:
            self.failed_attempts += 1
            self.queue.unschedulable_failed(queued, decision.rejected_by)
            nominated_node = getattr(decision, "nominated", None)
            latest = (self._pods.store.get(queued.key) if self._pods else None) or queued.pod
            clear = False
            if not nominated_node and getattr(decision, "nomination", eventhandlers.KEEP) == eventhandlers.CLEAR:
                self.nominated.pop(queued.key, None)  # AddNominatedPod(ModeOverride, "")
                clear = bool(eventhandlers.nominated_node(latest))  # updatePod: nnnNeedsUpdate
            # What we wrote last is newer than what the watch may have shown us yet.
            last = self._written.get(queued.key)
            if nominated_node or clear or ((last != decision.message) if last is not None
                                           else needs_unschedulable_update(queued.pod, decision.message)):
                self._written[queued.key] = decision.message
                self._spawn(self._mark_unschedulable(latest, decision.message, nominated_node, clear))
            return None
        self.algorithm.assume(queued.key, decision.node, request, nonzero, queued.priority)
        dynamicresources.reserve(self.dra, self.algorithm, queued.key, queued.pod, decision.node)
        # An assumed pod is no longer nominated: it counts once, as assumed, not also as
        # nominated to its node (schedule_one.go assume: "if "assumed" is a nominated pod, we
        # should remove it from internal cache": SchedulingQueue.DeleteNominatedPodIfExists).
        self.nominated.pop(queued.key, None)
        self.queue.delete(queued.key)
        self._in_flight[queued.key] = queued
        return decision.node

    def _decide(self, queued: QueuedPod, request: Mapping, nonzero: tuple[int, int]) -> Decision:
        """Filter and score; the nominated node first (evaluateNominatedNode); PostFilter preemption."""
        nominated = self.nominated.get(queued.key)
        if nominated is not None and nominated.node in self.cache.index:
            fits, _ = self.algorithm.feasible_mask(queued.pod, request)
            if fits[self.cache.index[nominated.node]]:
                return Decision(nominated.node, feasible=1)
        decision = self.algorithm.schedule(queued.pod, request, nonzero)
        if decision.node is not None:
            return decision
        if self.cache.num_nodes == 0:
            return _Nominated(None, decision.message, nomination=eventhandlers.nomination_after_failure(True, None))
        pods = self._pods.store if self._pods else {}
        pdbs = list(self._pdbs.store.values()) if self._pdbs else []
        ok = self.cache.static_verdict(queued.pod).ok
        # Preempt reads the latest pod from the informer (Evaluator.Preempt: PodLister.Get).
        preemptor = pods.get(queued.key) or queued.pod
        outcome = preemption.preempt(self.cache, preemptor, request, ok.nonzero()[0], pods, pdbs)
        if outcome.node is None:
            return _Nominated(None, decision.message, rejected_by=decision.rejected_by,
                              nomination=eventhandlers.nomination_after_failure(False, outcome.message))
        self.preemptions += 1
        self.nominated[queued.key] = PodEntry(outcome.node, dict(request), nonzero[0], nonzero[1], priority=queued.priority)
        cleared = [k for k, e in self.nominated.items() if e.node == outcome.node and e.priority < queued.priority]
        for key in cleared:
            self.nominated.pop(key, None)
        self._spawn(self._preempt(queued.pod, outcome.victims, cleared))
        return _Nominated(None, decision.message, rejected_by=decision.rejected_by, nominated=outcome.node)

    async def _preempt(self, preemptor: Mapping, victims: tuple[str, ...], cleared: list[str]) -> None:
        """prepareCandidate: DisruptionTarget on each victim, delete it (gracefully); clear the
        nomination of lower-priority pods nominated to the node."""
        scheduler_name = (preemptor.get("spec") or {}).get("schedulerName", self.scheduler_name)
        condition = {"type": "DisruptionTarget", "status": "True", "reason": preemption.PREEMPTION_BY_SCHEDULER,
                     "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
                     "lastTransitionTime": now_rfc3339()}
        for key in victims:
            namespace, name = key.split("/", 1)
            url = f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}"
            try:
                async with self._http.patch(f"{url}/status", json={"status": {"conditions": [condition]}},
                                               headers={"Content-Type": STRATEGIC_MERGE_PATCH}) as response:
                    await response.read()
                async with self._http.delete(url) as response:
                    await response.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.debug("preempting %s: %s", key, exc)
        for key in cleared:
            namespace, name = key.split("/", 1)
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                async with self._http.patch(
                    f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}/status",
                    json={"status": {"nominatedNodeName": None}}, headers={"Content-Type": STRATEGIC_MERGE_PATCH},
                ) as response:
                    await response.read()

    async def _loop(self, bind_slots: asyncio.Semaphore) -> None:
        cycles = 0
        last_leftover_flush = time.monotonic()
        while True:
            self.queue.flush_backoff()
            if time.monotonic() - last_leftover_flush >= LEFTOVER_FLUSH_INTERVAL:  # Run: wait.Until(.., 30 s)
                last_leftover_flush = time.monotonic()
                self.queue.flush_unschedulable_leftover()
            queued = None if self._held else self.queue.pop()
            if queued is None:
                self._wake.clear()
                wakeup = self.queue.next_wakeup()
                timeout = 1.0 if wakeup is None else max(0.0, min(1.0, wakeup - time.monotonic()))
                # Not asyncio.wait_for: on Python 3.11 it can swallow a cancellation that comes as
                # the event is set (CPython gh-86296), and stopping the simulator would hang.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                continue
            if self.gangs is not None and self.gangs.owns(queued.pod):
                await self.gangs.cycle(queued, bind_slots)  # the whole PodGroup in one cycle
                continue
            try:
                node = self.schedule_one(queued)
            except Exception:  # one odd pod must not stop the scheduler: back off and go on
                log.exception("scheduling %s failed", queued.key)
                self.queue.error_failed(queued)
                continue
            if node is not None:
                await bind_slots.acquire()
                self._spawn(self._bind(queued, node, bind_slots))
            cycles += 1
            if cycles % 16 == 0:
                await asyncio.sleep(0)  # let the watches deliver

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, queued: QueuedPod, node: str, bind_slots: asyncio.Semaphore) -> None:
        """The binding cycle: POST the Binding; on failure forget the assumption and retry."""
        metadata = queued.pod.get("metadata") or {}
        namespace, name = metadata.get("namespace", "default"), metadata["name"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": metadata.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        status = 0
        try:
            if not await dynamicresources.pre_bind(self.dra, self._http, self.base_url, queued.pod):
                raise aiohttp.ClientError("DynamicResources PreBind failed")
            async with self._http.post(
                f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}/binding", json=body
            ) as response:
                status = response.status
                await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.debug("bind %s/%s -> %s: %s", namespace, name, node, exc)
        finally:
            bind_slots.release()
            self._in_flight.pop(queued.key, None)
        if 200 <= status < 300:
            self.scheduled += 1
            return
        # cache.ForgetPod, then handleSchedulingFailure: back to the queue unless it is gone.
        dynamicresources.unreserve(self.dra, queued.key)
        entry = self.cache.pods.get(queued.key)
        if entry is not None and entry.assumed:
            self.cache.remove_pod(queued.key)
            # handleBindingCycleError: forgetting the assumed pod is an AssignedPodDelete.
            spec = dict(queued.pod.get("spec") or {}, nodeName=node)
            self._move(hints.ASSIGNED_POD_DELETE, dict(queued.pod, spec=spec), None)
        if status in (404, 409):
            return  # deleted, or bound already: the watch tells us
        latest = self._pods.store.get(queued.key) if self._pods else None
        if latest is not None and not (latest.get("spec") or {}).get("nodeName"):
            queued.pod = latest
            self.queue.pods[queued.key] = queued
            self.queue.error_failed(queued)
            self._wake.set()

    async def _mark_unschedulable(self, pod: Mapping, message: str, nominated: str | None = None,
                                  clear: bool = False) -> None:
        """PodScheduled=False/Unschedulable with the FitError message (strategic merge on type), and
        status.nominatedNodeName set when preemption chose a node, or cleared when it found none
        (updatePod with the nominating info)."""
        metadata = pod.get("metadata") or {}
        namespace, name = metadata.get("namespace", "default"), metadata["name"]
        patch: dict[str, Any] = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": now_rfc3339(),
                    }
                ]
            }
        }
        if nominated:
            patch["status"]["nominatedNodeName"] = nominated
        elif clear:
            patch["status"]["nominatedNodeName"] = None
        try:
            async with self._http.patch(
                f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}/status",
                json=patch,
                headers={"Content-Type": STRATEGIC_MERGE_PATCH},
            ) as response:
                await response.read()
                if response.status >= 300:
                    self._written.pop(object_key(pod), None)  # try again on the next failure
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.debug("status of %s/%s: %s", namespace, name, exc)
            self._written.pop(object_key(pod), None)

    async def run(self) -> None:
        """Watch, schedule and bind until cancelled."""
        connector = aiohttp.TCPConnector(limit=self.max_in_flight + 8)
        timeout = aiohttp.ClientTimeout(total=30)
        bind_slots = asyncio.Semaphore(self.max_in_flight)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            self._session = session
            nodes = Reflector(session, self.base_url, "/api/v1/nodes", self.on_node)
            self._pods = Reflector(session, self.base_url, "/api/v1/pods", self.on_pod)
            # The PDB lister DefaultPreemption reads (no handler: budgets only steer the choice of victims).
            self._pdbs = Reflector(session, self.base_url, "/apis/policy/v1/poddisruptionbudgets", lambda *_: None)
            watchers = [asyncio.ensure_future(nodes.run()), asyncio.ensure_future(self._pods.run()),
                        asyncio.ensure_future(self._pdbs.run()),
                        *dynamicresources.watch(self.dra, session, self.base_url, self._on_dra_change)]
            if self.gangs is not None:
                watchers.append(asyncio.ensure_future(self.gangs.start(session).run()))
            loop_task: asyncio.Future | None = None
            try:
                await nodes.synced.wait()
                await self._pods.synced.wait()
                loop_task = asyncio.ensure_future(self._loop(bind_slots))
                await asyncio.gather(loop_task, *watchers)
            finally:
                for task in [*watchers, *([loop_task] if loop_task else []), *self._tasks]:
                    task.cancel()
                await asyncio.gather(*watchers, *([loop_task] if loop_task else []), *self._tasks, return_exceptions=True)
