"""Who goes first in a round, and what a gang that has waited too long holds back.

Gangs go by priority (higher first) and age (older first); a gang that does not fit does not
block the ones behind it (backfill) until it has waited longer than the starvation limit,
and then the capacity it needs on the nodes its plan would use is held back (`hold_back`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ganggate.core.placement.capacity import Capacity
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang
from ganggate.core.placement.packing import largest_first
from ganggate.core.state.pods import PodInfo
from ganggate.core.fit.resources import add_into, fits
from ganggate.core.placement.domains import domains, free_gpus
from ganggate.core.placement.topology import gang_request, placed_domains


def round_key(gang: Gang) -> tuple:
    """Higher priority first, then older, then by key (a stable order across rounds)."""
    return (-gang.priority, gang.created, gang.key)


def round_order(gangs: Iterable[Gang]) -> list[Gang]:
    """The gangs by round_key."""
    return sorted(gangs, key=round_key)


def release_candidates(gang: Gang) -> list[PodInfo]:
    """The gated pods a decision for the gang may release (at most pod_num when waiting)."""
    gated = gang.gated_pods()
    if gang.state == "waiting" and gang.spec is not None:
        return gated[: gang.spec.pod_num]
    return list(gated)  # (a copy: gated_pods is the gang's own, kept between rounds)


def hold_back(pods: Sequence[PodInfo], capacity: Capacity, need: int, state: ClusterState) -> int:
    """Hold capacity for a starving gang; returns the number of nodes held (0: none held,
    -1: none, because the gang would not fit even on emptied nodes).

    Documented simplification: plan the gang on the capacity the nodes would have if their
    running pods finished (free + used), filling the nodes with the most free GPU now first
    (they need the fewest pods to finish), and take the gang's whole request on those nodes
    from this round's capacity. Later gangs may only use the rest; free capacity on the
    chosen nodes goes negative until enough running pods there finish. Nothing is held if
    the gang would not fit even then. A gang that requires one domain of a topology level
    holds its room inside one domain: the one with the most free GPU where it would fit, or
    the one its released members are in.
    """
    required, _ = gang_request(pods)
    placed = placed_domains(pods, capacity, required) if required is not None else None
    if required is None or (len(pods) <= 1 and placed is None):
        return _hold(pods, capacity, need, state, None)
    if placed is not None:  # the rest of a gang with members placed: in their domain
        return _hold(pods, capacity, need, state, set(placed))
    eligible: set[str] | None = capacity.index(largest_first(pods)[0]).members
    groups = sorted(domains(capacity, required).items(), key=lambda g: (-free_gpus(capacity, g[1], eligible), g[0]))
    for _, names in groups:
        held = _hold(pods, capacity, need, state, set(names))
        if held != -1:
            return held
    return -1


def _hold(pods: Sequence[PodInfo], capacity: Capacity, need: int, state: ClusterState, within: set[str] | None) -> int:
    """hold_back on the given nodes only (None: all)."""
    order = largest_first(pods)
    index = capacity.index(order[0])
    if any(p.constraint_key != order[0].constraint_key for p in order):
        return 0  # several constraints: keep it simple, no hold
    plan: list[tuple[str, PodInfo]] = []
    remaining = order
    # Visit nodes by most free GPU first, straight from the index (no pass over all nodes
    # unless the gang would not fit even then).
    smallest = min(p.gpu for p in order)
    for level in reversed(index.levels):
        for _, _, name in list(index.buckets.get(level, ())):
            if len(plan) >= need or not remaining:
                break
            if within is not None and name not in within:
                continue
            if level + capacity.used_gpus(name, state) < smallest:
                continue  # not even the smallest pod would fit here once it empties
            room = dict(capacity.free[name])
            add_into(room, state.nodes[name].used)
            left = []
            for pod in remaining:
                if len(plan) < need and fits(pod.request, room):
                    add_into(room, pod.request, -1)
                    plan.append((name, pod))
                else:
                    left.append(pod)
            remaining = left
        if len(plan) >= need or not remaining:
            break
    if len(plan) < need:
        return -1
    for name, pod in plan:
        capacity.take(name, pod.request)
    return len({name for name, _ in plan})
