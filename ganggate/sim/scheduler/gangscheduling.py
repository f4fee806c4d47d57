"""kube-scheduler's GangScheduling plugin and PodGroup scheduling cycle (KEP-4671), for pods that
name a PodGroup (spec.schedulingGroup.podGroupName) whose policy is `gang`, as 1.37 does it
(pkg/scheduler/framework/plugins/gangscheduling, pkg/scheduler/schedule_one_podgroup.go):

- PreEnqueue: a pod waits outside the queue until its PodGroup exists and at least `minCount`
  live pods name it (a pod still behind a scheduling gate waits in the queue's gated set first).
- The PodGroup cycle: when one member is popped, every queued member is taken, sorted by name,
  and placed one after the other on the assumed cache; if the placed ones and the members
  already bound reach `minCount`, all placed ones are bound, otherwise none is (their
  assumptions are forgotten, each is marked Unschedulable and parked until the cluster changes).
- The PodGroup's `PodGroupInitiallyScheduled` condition: True (reason Scheduled) once the group is
  placed, a terminal state never written again; False (reason Unschedulable) while it is not.

On when the scheduler's GenericWorkload gate is on, as in 1.37, where the GangScheduling gate
(1.35's alpha, off) was merged into GenericWorkload (kubernetes/kubernetes#139520, KEP-4671
"Feature gates merge in v1.37"); `GangScheduling=false` set explicitly turns the plugin off, as a
1.36 scheduler without that gate or a 1.37 scheduler profile without the plugin would be. A basic-policy PodGroup's pods are scheduled
one by one as any pod. kubesim's plugin does not preempt for a group (WorkloadAwarePreemption,
a separate 1.36 alpha gate, is not modelled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from ganggate.sim.api import scheduling as api
from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.client.informers import Reflector, object_key

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")
MERGE_PATCH = "application/merge-patch+json"


def enabled(gates: Any) -> bool:
    """Whether a scheduler with these gates gang-schedules PodGroups (see the module docstring)."""
    return gates.enabled(api.GENERIC_WORKLOAD) and gates.overrides.get(api.GANG_SCHEDULING, True)


def group_key(pod: Mapping) -> tuple[str, str] | None:
    name = api.pod_group_name(pod)
    return None if name is None else ((pod.get("metadata") or {}).get("namespace") or "default", name)


def live(pod: Mapping) -> bool:
    return ((pod.get("status") or {}).get("phase") not in TERMINAL
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


def condition_patch(podgroup: Mapping, condition: dict) -> dict | None:
    """The merge patch that sets `condition` on the PodGroup's status (the whole list, since a
    merge patch replaces lists), or None when nothing would change or the group is already
    InitiallyScheduled (a terminal state)."""
    conditions = list((podgroup.get("status") or {}).get("conditions") or [])
    current = next((c for c in conditions if c.get("type") == condition["type"]), None)
    if current is not None and current.get("status") == "True" and condition["type"] == api.INITIALLY_SCHEDULED:
        return None
    if current is not None and all(current.get(k) == condition.get(k) for k in ("status", "reason", "message")):
        return None
    if current is not None and current.get("status") == condition["status"]:
        condition = dict(condition, lastTransitionTime=current.get("lastTransitionTime"))
    rest = [c for c in conditions if c.get("type") != condition["type"]]
    return {"status": {"conditions": rest + [condition]}}


class GangScheduling:
    """The plugin's state: the PodGroups seen, and the pods PreEnqueue holds back."""

    def __init__(self, scheduler: Any) -> None:  # the ganggate.sim.scheduler.scheduler.Scheduler it serves
        self.scheduler = scheduler
        self.podgroups: dict[tuple[str, str], dict] = {}
        self.waiting: dict[str, tuple[dict, dict]] = {}  # pod key -> (pod, its request info)
        self.reflector: Reflector | None = None

    # -- PreEnqueue ---------------------------------------------------------------------------

    def min_count(self, group: tuple[str, str]) -> int | None:
        podgroup = self.podgroups.get(group)
        return None if podgroup is None else api.gang_min_count(podgroup)

    def members(self, group: tuple[str, str]) -> list[dict]:
        """The live pods that name the group (from the scheduler's pod informer)."""
        store = self.scheduler._pods.store if self.scheduler._pods is not None else {}
        return [pod for pod in store.values() if live(pod) and group_key(pod) == group]

    def hold(self, key: str, pod: dict, info: dict) -> bool:
        """PreEnqueue for a pending, ungated pod: True when it must wait outside the queue."""
        group = group_key(pod)
        if group is None or (pod.get("spec") or {}).get("schedulingGates"):
            return False
        if group not in self.podgroups:
            self._wait(key, pod, info)
            return True
        needed = self.min_count(group)
        if needed is None:
            return False  # a basic policy: scheduled as any pod
        if len(self.members(group)) < needed:
            self._wait(key, pod, info)
            return True
        self.waiting.pop(key, None)
        self._admit(group, besides=key)
        return False

    def _wait(self, key: str, pod: dict, info: dict) -> None:
        self.waiting[key] = (pod, info)
        self.scheduler.queue.delete(key)

    def _admit(self, group: tuple[str, str], besides: str = "") -> None:
        """Let the group's waiting pods into the queue (the quorum is there)."""
        store = self.scheduler._pods.store if self.scheduler._pods is not None else {}
        for key in [k for k, (pod, _) in self.waiting.items() if group_key(pod) == group and k != besides]:
            pod, info = self.waiting.pop(key)
            latest = store.get(key)
            if latest is None or not live(latest) or (latest.get("spec") or {}).get("nodeName"):
                continue
            self.scheduler.queue.update(key, latest, **info)
        self.scheduler._wake.set()

    def on_podgroup(self, kind: str, podgroup: dict, old: dict | None) -> None:
        group = ((podgroup.get("metadata") or {}).get("namespace") or "default",
                 (podgroup.get("metadata") or {}).get("name") or "")
        if kind == "DELETED":
            self.podgroups.pop(group, None)
            return
        self.podgroups[group] = podgroup
        needed = self.min_count(group)
        if needed is None or len(self.members(group)) >= needed:
            self._admit(group)

    # -- the PodGroup cycle ----------------------------------------------------------------------

    def owns(self, pod: Mapping) -> bool:
        """True for a pod whose PodGroup has a gang policy: it is scheduled in a PodGroup cycle."""
        group = group_key(pod)
        return group is not None and self.min_count(group) is not None

    async def cycle(self, popped: Any, bind_slots: asyncio.Semaphore) -> None:
        """Place the popped pod's whole group in one cycle, or none of it."""
        try:
            await self._cycle(popped, bind_slots)
        except Exception:  # one odd group must not stop the scheduler: back off and go on
            log.exception("scheduling pod group of %s failed", popped.key)
            self.scheduler.queue.error_failed(popped)

    async def _cycle(self, popped: Any, bind_slots: asyncio.Semaphore) -> None:
        scheduler = self.scheduler
        group = group_key(popped.pod)
        if group is None:  # (the scheduler hands this cycle only pods of a group)
            raise ValueError(f"pod {popped.key} is in no pod group")
        needed = self.min_count(group) or 1
        queue = scheduler.queue
        queued = [q for k, q in list(queue.pods.items())
                  if group_key(q.pod) == group and k not in queue.gated and not (q.pod.get("spec") or {}).get("nodeName")]
        if popped.key not in {q.key for q in queued}:
            queued.append(popped)
        queued.sort(key=lambda q: q.key)
        bound = sum(1 for pod in self.members(group) if (pod.get("spec") or {}).get("nodeName")
                    and object_key(pod) not in {q.key for q in queued})
        placed: list[tuple[Any, str]] = []
        first_failure = ""
        for member in queued:
            request, nonzero = member.extra["request"], member.extra["nonzero"]
            decision = scheduler.algorithm.schedule(member.pod, request, nonzero)
            if decision.node is None:
                first_failure = first_failure or decision.message
                continue
            scheduler.algorithm.assume(member.key, decision.node, request, nonzero, member.priority)
            placed.append((member, decision.node))
        if bound + len(placed) >= needed:
            for member, node in placed:
                scheduler.nominated.pop(member.key, None)
                queue.delete(member.key)
                scheduler._in_flight[member.key] = member
                await bind_slots.acquire()
                scheduler._spawn(scheduler._bind(member, node, bind_slots))
            for member in queued:
                if member.key in queue.pods:
                    queue.unschedulable_failed(member)  # beyond minCount and placed nowhere
            self._spawn_condition(group, "True", api.REASON_SCHEDULED, "")
            return
        for member, _ in placed:
            scheduler.cache.remove_pod(member.key)  # ForgetPod: none of the group binds
        message = (f"pod group {group[1]!r} needs {needed} pods placed together, {bound + len(placed)} can be"
                   + (f"; {first_failure}" if first_failure else ""))
        scheduler.failed_attempts += 1
        for member in queued:
            queue.unschedulable_failed(member)
            if scheduler._written.get(member.key) != message:
                scheduler._written[member.key] = message
                scheduler._spawn(scheduler._mark_unschedulable(member.pod, message))
        self._spawn_condition(group, "False", api.REASON_UNSCHEDULABLE, message)

    # -- the PodGroup's status ---------------------------------------------------------------------

    def _spawn_condition(self, group: tuple[str, str], status: str, reason: str, message: str) -> None:
        condition = {"type": api.INITIALLY_SCHEDULED, "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": now_rfc3339()}
        self.scheduler._spawn(self._write_condition(group, condition))

    async def _write_condition(self, group: tuple[str, str], condition: dict) -> None:
        podgroup = self.podgroups.get(group)
        patch = condition_patch(podgroup, condition) if podgroup is not None else None
        if patch is None:
            return
        namespace, name = group
        url = f"{self.scheduler.base_url}/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/podgroups/{name}/status"
        try:
            async with self.scheduler._session.patch(url, json=patch, headers={"Content-Type": MERGE_PATCH}) as response:
                body = await response.json(content_type=None)
                if response.status < 300 and isinstance(body, dict):
                    self.podgroups[group] = body  # what we wrote, before the watch shows it
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            log.debug("PodGroup %s/%s status: %s", namespace, name, exc)

    def start(self, session: aiohttp.ClientSession) -> Reflector:
        """The PodGroup informer (the plugin's lister)."""
        self.reflector = Reflector(session, self.scheduler.base_url, api.PODGROUPS_PATH, self.on_podgroup)
        return self.reflector
