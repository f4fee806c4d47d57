"""The default scheduler's preemption (PostFilter DefaultPreemption) over the cache, without I/O.

Follows pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go and
pkg/scheduler/framework/preemption/preemption.go:
- PodEligibleToPreemptOthers: a pod with preemptionPolicy Never never preempts ("not eligible
  due to preemptionPolicy=Never."); a pod already nominated to a node where a lower-priority
  pod is still terminating because of a preemption waits for it ("not eligible due to a
  terminating pod on the nominated node.");
- candidates: every node the node-level filters accept (the others are
  UnschedulableAndUnresolvable: "Preemption is not helpful for scheduling"); the real plugin
  samples max(10% of the nodes, 100) from a random offset, kubesim looks at them all;
- SelectVictimsOnNode: remove every pod of lower priority, check the pod fits, then reprieve
  the removed pods most important first (MoreImportantPod: higher priority, then earlier
  start), those whose PodDisruptionBudget would be violated first
  (filterPodsWithPDBViolation: the budget's disruptionsAllowed, less the matching pods before
  it, below 0; a pod already in the budget's disruptedPods does not count; an empty selector
  matches nothing here), keeping each that still lets the pod fit;
- pickOneNodeForPreemption: fewest PDB violations, then the lowest highest-victim priority,
  the smallest sum of victim priorities, the fewest victims, the latest start among the
  highest-priority victims, then the first node (in the cache's node order, where the real
  one takes a map's random order).
Nominated pods of equal or higher priority count on their nominated node while filtering
(the scheduler adds them to the cache around a cycle; framework addNominatedPods).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ganggate.sim.helpers import disruption
from ganggate.sim.helpers.podrequests import PODS
from ganggate.sim.scheduler.cache import ClusterCache, PodEntry

NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"  # v1.PodReasonPreemptionByScheduler
MAX_INT32 = 2**31 - 1
_NOT_STARTED = "9999-12-31T23:59:59Z"  # GetPodStartTime: a pod without a startTime started "now"


@dataclass
class Candidate:
    """A node where preemption would let the pod fit, and what it would cost."""

    node: str
    slot: int
    victims: list[str] = field(default_factory=list)  # pod keys, most important first
    violations: int = 0


@dataclass(frozen=True)
class Outcome:
    """What PostFilter decided: a node and its victims, or why not."""

    node: str | None
    victims: tuple[str, ...] = ()
    message: str = ""


def terminating_by_preemption(pod: Mapping | None) -> bool:
    """podTerminatingByPreemption: being deleted, with DisruptionTarget reason PreemptionByScheduler."""
    if not pod or not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == PREEMPTION_BY_SCHEDULER
               for c in (pod.get("status") or {}).get("conditions") or [])


def start_time(pod: Mapping | None) -> str:
    """GetPodStartTime (RFC 3339 strings in UTC compare as times)."""
    return ((pod or {}).get("status") or {}).get("startTime") or _NOT_STARTED


def fits(cache: ClusterCache, slot: int, request: Mapping[str, int], removed: Iterable[PodEntry]) -> bool:
    """NodeResourcesFit on the node with `removed` taken off it."""
    removed = list(removed)
    if cache.pod_count[slot] - len(removed) + 1 > cache.pod_limit[slot]:
        return False
    for name, amount in request.items():
        if name == PODS or amount <= 0:
            continue
        row = cache.resources.get(name)
        if row is None:
            return False
        free = int(cache.allocatable[row, slot] - cache.requested[row, slot]) + sum(e.request.get(name, 0) for e in removed)
        if free < amount:
            return False
    return True


def pdb_violations(keys: list[str], pods: Mapping[str, Mapping], pdbs: Sequence[Mapping]) -> set[str]:
    """filterPodsWithPDBViolation: the keys whose eviction would take a budget below zero, in order."""
    allowed = [int((p.get("status") or {}).get("disruptionsAllowed") or 0) for p in pdbs]
    violating = set()
    for key in keys:
        pod = pods.get(key) or {}
        meta = pod.get("metadata") or {}
        if not meta.get("labels"):
            continue
        for index, pdb in enumerate(pdbs):
            if not disruption.guards(pdb, pod):
                continue
            if meta.get("name") in ((pdb.get("status") or {}).get("disruptedPods") or {}):
                continue
            allowed[index] -= 1
            if allowed[index] < 0:
                violating.add(key)
    return violating


def select_victims_on_node(cache: ClusterCache, slot: int, request: Mapping[str, int], priority: int,
                           pods: Mapping[str, Mapping], pdbs: Sequence[Mapping]) -> Candidate | None:
    """SelectVictimsOnNode: the fewest, least important pods whose removal lets the pod fit."""
    node = cache.names[slot]
    if node is None:  # (ok_slots name nodes the cache holds)
        return None
    lower = [key for key in cache.pods_by_node.get(node, ()) if cache.pods[key].priority < priority]
    if not lower or not fits(cache, slot, request, (cache.pods[k] for k in lower)):
        return None
    lower.sort(key=lambda k: (-cache.pods[k].priority, start_time(pods.get(k)), k))  # MoreImportantPod
    violating = pdb_violations(lower, pods, pdbs)
    removed = {k: cache.pods[k] for k in lower}
    candidate = Candidate(node, slot)
    for key in [k for k in lower if k in violating] + [k for k in lower if k not in violating]:
        entry = removed.pop(key)
        if fits(cache, slot, request, removed.values()):
            continue  # reprieved
        removed[key] = entry
        candidate.victims.append(key)
        if key in violating:
            candidate.violations += 1
    candidate.victims.sort(key=lambda k: (-cache.pods[k].priority, start_time(pods.get(k)), k))
    return candidate if candidate.victims else None


def pick_one_node(cache: ClusterCache, candidates: list[Candidate], pods: Mapping[str, Mapping]) -> Candidate:
    """pickOneNodeForPreemption."""
    def highest(c: Candidate) -> int:
        return cache.pods[c.victims[0]].priority

    def latest_start(c: Candidate) -> str:
        top = highest(c)
        return min(start_time(pods.get(k)) for k in c.victims if cache.pods[k].priority == top)

    steps: list[Callable[[Candidate], int]] = [
        lambda c: c.violations,
        highest,
        lambda c: sum(cache.pods[k].priority + MAX_INT32 + 1 for k in c.victims),
        lambda c: len(c.victims),
    ]
    remaining = candidates
    for step in steps:
        best = min(step(c) for c in remaining)
        remaining = [c for c in remaining if step(c) == best]
        if len(remaining) == 1:
            return remaining[0]
    latest = max(latest_start(c) for c in remaining)
    return [c for c in remaining if latest_start(c) == latest][0]


def preempt(cache: ClusterCache, pod: Mapping, request: Mapping[str, int], ok_slots: Iterable[int],
            pods: Mapping[str, Mapping], pdbs: Sequence[Mapping]) -> Outcome:
    """PostFilter: choose a node and victims for a pod that fits nowhere, or say why not."""
    spec = pod.get("spec") or {}
    given = spec.get("priority")
    priority: int = given if isinstance(given, int) else 0
    if spec.get("preemptionPolicy") == "Never":
        return Outcome(None, message=NEVER)
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    if nominated:
        for key in cache.pods_by_node.get(nominated, ()):
            if cache.pods[key].priority < priority and terminating_by_preemption(pods.get(key)):
                return Outcome(None, message=TERMINATING)
    if not cache.priority_counts or min(cache.priority_counts) >= priority:
        return Outcome(None, message=NO_VICTIMS)  # no pod anywhere is of lower priority
    candidates = [c for slot in ok_slots
                  if (c := select_victims_on_node(cache, int(slot), request, priority, pods, pdbs)) is not None]
    if not candidates:
        return Outcome(None, message=NO_VICTIMS)
    chosen = pick_one_node(cache, candidates, pods)
    return Outcome(chosen.node, tuple(chosen.victims))
