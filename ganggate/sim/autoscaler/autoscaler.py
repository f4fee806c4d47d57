"""kubesim's cluster-autoscaler: an HTTP client of the API server that adds nodes of its node groups
for pods the scheduler marked unschedulable, serves ProvisioningRequests, and removes nodes left
unneeded (cluster-autoscaler/core/static_autoscaler.go RunOnce, every --scan-interval).

One loop, as RunOnce: (1) the simulation's nodes are the Ready nodes less what is bound to them,
plus the nodes already asked for and not yet Ready (clusterstate's upcoming nodes); (2) the pods of
ProvisioningRequests that are booked and not yet consumed take their room first (the capacity a
request booked is kept for it for the reservation time); (3) each active request is checked or
scaled up for, all or nothing for best-effort-atomic-scale-up; (4) the unschedulable pods that do
not fit are binpacked onto new nodes, group by group in the order given (the real default expander
is random; kubesim's is deterministic), pod by pod, so a gang may be half provisioned; (5) a node
of a group with nothing on it, real or simulated, for the unneeded time is deleted, never below
the group's minimum. Left out: scale-down of nodes that still run movable pods, the
scale-down-delay-after-add, expander choices, DaemonSets.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from ganggate.sim.api import autoscaling as ar
from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.autoscaler import estimator, provisioning
from ganggate.sim.autoscaler.nodegroups import NodeGroup
from ganggate.sim.client.informers import Reflector, object_key
from ganggate.sim.clock import Clock, WallClock

log = logging.getLogger(__name__)

SCAN_SECONDS = 10.0  # --scan-interval
UNNEEDED_SECONDS = 600.0  # --scale-down-unneeded-time
BACKOFF_SECONDS = 300.0  # backoff/exponential_backoff.go initialNodeGroupBackoffDuration
NOT_FOUND_MESSAGE = "Capacity is not found, CA will try to find it later."
PROVREQS = f"/apis/{ar.GROUP}/{ar.VERSION}/provisioningrequests"


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) and \
        not (node.get("spec") or {}).get("unschedulable")


def _live(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """A pending pod the scheduler tried and marked PodScheduled=False, reason Unschedulable."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulingGates") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if ar.CONSUME_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return False  # served through its ProvisioningRequest's booked capacity
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


class Autoscaler:
    """The node groups' autoscaler; `scale_ups`, `scale_downs` and `stockouts` count what it did."""

    def __init__(self, base_url: str, *, node_groups: list[NodeGroup], clock: Clock | None = None,
                 scan_seconds: float = SCAN_SECONDS, unneeded_seconds: float = UNNEEDED_SECONDS,
                 reservation_seconds: float = ar.RESERVATION_SECONDS, seed: int = 0) -> None:
        self.base_url = base_url.rstrip("/")
        self.groups = {group.name: group for group in node_groups}
        self.clock: Clock = clock or WallClock()
        self.scan_seconds = scan_seconds
        self.unneeded_seconds = unneeded_seconds
        self.reservation_seconds = reservation_seconds
        self._random = random.Random(seed)
        self._session: aiohttp.ClientSession | None = None
        self._reflectors: dict[str, Reflector] = {}
        self._upcoming: dict[str, str] = {}  # node name -> group, asked for and not yet Ready
        self._backoff_until: dict[str, float] = {}
        self._unneeded_since: dict[str, float] = {}
        self._next_index: dict[str, int] = {name: 0 for name in self.groups}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._working = 0  # scans and node registrations in flight (a replay waits for none)
        self.scale_ups = 0
        self.scale_downs = 0
        self.stockouts = 0
        self.ready = asyncio.Event()

    # ---- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            paths = {"nodes": "/api/v1/nodes", "pods": "/api/v1/pods", "provreqs": PROVREQS, "templates": "/api/v1/podtemplates"}
            self._reflectors = {k: Reflector(session, self.base_url, p, lambda *_: None) for k, p in paths.items()}
            watches = [asyncio.ensure_future(r.run()) for r in self._reflectors.values()]
            try:
                for reflector in self._reflectors.values():
                    await reflector.synced.wait()
                self.ready.set()
                while True:
                    self._working += 1
                    try:
                        await self.scan()
                    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                        log.debug("autoscaler: %s; next loop", exc)
                    finally:
                        self._working -= 1
                    await self.clock.sleep_until(self.clock.now() + self.scan_seconds)
            finally:
                for task in [*watches, *self._tasks]:
                    task.cancel()
                await asyncio.gather(*watches, *self._tasks, return_exceptions=True)

    @property
    def idle(self) -> bool:
        """Listed, and neither scanning nor registering a node: waiting on the clock only."""
        return self.ready.is_set() and self._working == 0

    def _store(self, name: str) -> dict[str, dict]:
        return self._reflectors[name].store if name in self._reflectors else {}

    async def scan(self) -> None:
        """One RunOnce over what the informers hold now."""
        nodes = self._store("nodes")
        pods = list(self._store("pods").values())
        for name in [n for n in self._upcoming if n in nodes]:
            del self._upcoming[name]
        bound: dict[str, list[Mapping[str, Any]]] = {}
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and _live(pod):
                bound.setdefault(node_name, []).append(pod)
        slots = [estimator.slot_of(node, bound.get(name.split("/")[-1], [])) for name, node in nodes.items() if _ready(node)]
        slots += [estimator.slot_of(self.groups[group].node(name)) for name, group in self._upcoming.items()]
        await self._provisioning_requests(pods, slots)
        await self._scale_up([pod for pod in pods if unschedulable(pod)], slots)
        await self._scale_down(nodes, bound, slots)

    # ---- ProvisioningRequests -----------------------------------------------------------------
    async def _provisioning_requests(self, pods: Sequence[Mapping[str, Any]], slots: list[estimator.Slot]) -> None:
        requests: list[Mapping[str, Any]] = sorted(self._store("provreqs").values(),
                          key=lambda r: ((r.get("metadata") or {}).get("creationTimestamp") or "", object_key(r)))
        templates = self._store("templates")
        consumers: dict[str, int] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = (meta.get("annotations") or {}).get(ar.CONSUME_ANNOTATION)
            if name and _live(pod):
                key = f"{meta.get('namespace')}/{name}"
                consumers[key] = consumers.get(key, 0) + 1
        now_epoch = self.clock.epoch()
        for request in requests:  # booked capacity first, as the fake pods CA injects
            if (request.get("spec") or {}).get("provisioningClassName") not in ar.CLASSES:
                continue
            if provisioning.is_booked(request):
                if provisioning.booking_expired(request, now_epoch, self.reservation_seconds):
                    await self._set(request, ar.BOOKING_EXPIRED, True, ar.BOOKING_EXPIRED_REASON, ar.BOOKING_EXPIRED_MSG)
                    continue
                booked = provisioning.pods_of(request, templates) or []
                estimator.place(booked[consumers.get(object_key(request), 0):], slots)
        for request in requests:
            cls = (request.get("spec") or {}).get("provisioningClassName")
            if cls not in ar.CLASSES or not provisioning.is_active(request) or provisioning.is_booked(request):
                continue
            if provisioning.condition(request, ar.ACCEPTED) is None:
                request = await self._set(request, ar.ACCEPTED, True, ar.ACCEPTED_REASON, ar.ACCEPTED_MSG)
            if provisioning.expired(request, now_epoch):
                await self._set(request, ar.FAILED, True, ar.EXPIRED_REASON, ar.EXPIRED_MSG)
                continue
            wanted = provisioning.pods_of(request, templates)
            if wanted is None:
                continue  # a PodTemplate it names is not there (yet)
            trial = [estimator.Slot(s.node, dict(s.free)) for s in slots]
            left = estimator.place(wanted, trial)
            if not left:
                slots[:] = trial
                await self._set(request, ar.PROVISIONED, True, ar.CAPACITY_FOUND, ar.CAPACITY_FOUND_MSG)
            elif cls == ar.BEST_EFFORT_ATOMIC and self._atomic_scale_up(left, slots, trial):
                await self._set(request, ar.PROVISIONED, True, ar.CAPACITY_PROVISIONED, ar.CAPACITY_PROVISIONED_MSG)
            else:
                await self._set(request, ar.PROVISIONED, False, ar.CAPACITY_NOT_FOUND, NOT_FOUND_MESSAGE)

    def _atomic_scale_up(self, left: list[Mapping[str, Any]], slots: list[estimator.Slot],
                         trial: list[estimator.Slot]) -> bool:
        """ScaleUp with allOrNothing: one group takes every pod left, or nothing is asked for."""
        for group in self._available_groups():
            count, rest = estimator.estimate(left, group.node(group.node_name(0)), self._room(group))
            if count and not rest:
                new = self._ask(group, count)
                trial += [estimator.slot_of(group.node(name)) for name in new]
                estimator.place(left, trial)
                slots[:] = trial
                return True
        return False

    async def _set(self, request: Mapping[str, Any], kind: str, status: bool, reason: str,
                   message: str) -> Mapping[str, Any]:
        """Write one condition through the status subresource; the request as stored afterwards."""
        conditions = provisioning.with_condition(request, kind, status, reason, message, now_rfc3339(self.clock.epoch()))
        if conditions is None or self._session is None:
            return request
        meta = request.get("metadata") or {}
        url = (f"{self.base_url}/apis/{ar.GROUP}/{ar.VERSION}/namespaces/{meta.get('namespace')}"
               f"/provisioningrequests/{meta.get('name')}/status")
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": conditions}}
        async with self._session.patch(url, json=body, headers={"Content-Type": "application/merge-patch+json"}) as response:
            stored = await response.json(content_type=None)
            if response.status == 200:
                log.info("autoscaler: ProvisioningRequest %s/%s %s=%s (%s)", meta.get("namespace"), meta.get("name"),
                         kind, status, reason)
                return stored
            if response.status not in (404, 409):
                raise aiohttp.ClientError(f"PATCH {url}: {response.status}")
            return request

    # ---- scale-up -----------------------------------------------------------------------------
    def _available_groups(self) -> list[NodeGroup]:
        now = self.clock.now()
        return [g for g in self.groups.values() if self._backoff_until.get(g.name, 0.0) <= now and self._room(g) > 0]

    def _size(self, group: NodeGroup) -> int:
        nodes = self._store("nodes").values()
        existing = sum(1 for n in nodes if ((n.get("metadata") or {}).get("labels") or {}).get(ar.NODE_GROUP_LABEL) == group.name)
        return existing + sum(1 for g in self._upcoming.values() if g == group.name)

    def _room(self, group: NodeGroup) -> int:
        return max(0, group.max_size - self._size(group))

    async def _scale_up(self, pending: list[Mapping[str, Any]], slots: list[estimator.Slot]) -> None:
        left = estimator.place(pending, slots)  # these wait for room that is there or on its way
        for group in self._available_groups():
            if not left:
                return
            count, left = estimator.estimate(left, group.node(group.node_name(0)), self._room(group))
            if count:
                self._ask(group, count)

    def _ask(self, group: NodeGroup, count: int) -> list[str]:
        """IncreaseSize: the machines are asked for now; each node registers after the group's delay,
        unless the provider is out of stock, which backs the group off."""
        names = []
        existing = set(self._store("nodes"))
        for _ in range(count):
            while True:
                name = group.node_name(self._next_index[group.name])
                self._next_index[group.name] += 1
                if name not in existing and name not in self._upcoming:
                    break
            names.append(name)
            self._upcoming[name] = group.name
            stockout = self._random.random() < group.failure_rate
            task = asyncio.ensure_future(self._provision(group, name, stockout))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self.scale_ups += count
        log.info("autoscaler: scale-up: node group %s +%d (%s)", group.name, count, ", ".join(names))
        return names

    async def _provision(self, group: NodeGroup, name: str, stockout: bool) -> None:
        await self.clock.sleep_until(self.clock.now() + group.delay_seconds)
        self._working += 1
        try:
            await self._register(group, name, stockout)
        finally:
            self._working -= 1

    async def _register(self, group: NodeGroup, name: str, stockout: bool) -> None:
        if stockout:
            self._upcoming.pop(name, None)
            self.stockouts += 1
            self._backoff_until[group.name] = self.clock.now() + BACKOFF_SECONDS
            log.warning("autoscaler: node group %s could not provide %s (out of stock); backing off", group.name, name)
            return
        assert self._session is not None
        async with self._session.post(f"{self.base_url}/api/v1/nodes", json=group.node(name)) as response:
            await response.read()
            if response.status not in (200, 201, 409):
                log.warning("autoscaler: creating node %s: HTTP %s", name, response.status)
                self._upcoming.pop(name, None)

    # ---- scale-down ---------------------------------------------------------------------------
    async def _scale_down(self, nodes: Mapping[str, Mapping[str, Any]], bound: Mapping[str, list],
                          slots: list[estimator.Slot]) -> None:
        now = self.clock.now()
        used = {slot.name for slot in slots if slot.placed}
        for node in list(nodes.values()):
            name = str((node.get("metadata") or {}).get("name") or "")
            group = self.groups.get(((node.get("metadata") or {}).get("labels") or {}).get(ar.NODE_GROUP_LABEL, ""))
            if group is None or bound.get(name) or name in used:
                self._unneeded_since.pop(name, None)
                continue
            since = self._unneeded_since.setdefault(name, now)
            if now - since >= self.unneeded_seconds and self._size(group) > group.min_size:
                await self._delete(name)

    async def _delete(self, name: str) -> None:
        assert self._session is not None
        async with self._session.delete(f"{self.base_url}/api/v1/nodes/{name}") as response:
            await response.read()
            if response.status in (200, 404):
                self._unneeded_since.pop(name, None)
                self._reflectors["nodes"].store.pop(name, None)
                self.scale_downs += 1
                log.info("autoscaler: scale-down: node %s removed (unneeded)", name)
