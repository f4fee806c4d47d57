"""The count-only policy (policy="count") and the checks it and the benchmarks compare against.

`count_only_fits` is the seed's GPU-count check; `totals_only_fits` sums each resource over
the cluster. Both ignore that a pod must fit on one node; kept to measure the planner by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ganggate.core.fit.resources import GPU, Resources, add_into, fits, format_amount, gpus, total
from ganggate.core.placement.explain import plural
from ganggate.core.policy.ordering import release_candidates, release_in_flight
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang
from ganggate.core.state.outcome import Decision, Waiting


def count_only_fits(requests: Sequence[Mapping[str, int]], free: Mapping[str, Mapping[str, int]]) -> bool:
    """The seed's check: sum over nodes of floor(free GPUs / GPUs per pod) >= pods.

    Blind to CPU, memory, selectors and taints; kept as a baseline (policy="count")."""
    per_pod = max((gpus(r) for r in requests), default=0)
    if per_pod <= 0:
        return True
    room = sum(max(gpus(f), 0) // per_pod for f in free.values())
    return room >= len(requests)


def totals_only_fits(requests: Sequence[Mapping[str, int]], free: Mapping[str, Mapping[str, int]]) -> bool:
    """Sum of free per resource >= sum of requests: blind to pods being indivisible."""
    need = total(requests)
    have: Resources = {}
    for f in free.values():
        add_into(have, {k: v for k, v in f.items() if v > 0})
    return fits(need, have)


def decide_count(state: ClusterState, gangs: list[Gang]) -> tuple[list[Decision], list[Waiting]]:
    """policy="count": the seed's check on Ready, uncordoned nodes, with no promises and no
    pinning. Within the round the GPUs counted for a released gang are taken (first fit)."""
    free: dict[str, Resources] = {}
    for name, node in state.nodes.items():
        if node.ready and not node.cordoned:
            room = dict(node.allocatable)
            add_into(room, node.used, -1)
            free[name] = {GPU: gpus(room)}
    decisions: list[Decision] = []
    waiting: list[Waiting] = []
    for gang in gangs:
        pods = release_candidates(gang)
        if not pods or release_in_flight(gang, state.promises):
            continue
        requests = [p.request for p in pods]
        if not count_only_fits(requests, free):
            if gang.state != "started":
                per_pod = max(gpus(r) for r in requests)
                pods_room = sum(max(f[GPU], 0) // per_pod for f in free.values()) if per_pod else 0
                waiting.append(
                    Waiting(
                        gang.key,
                        "GangUnschedulable",
                        f"count check: {len(pods)} pods of {format_amount(GPU, per_pod)} GPU, "
                        f"free GPUs have room for {plural(pods_room, 'pod')}",
                        "room",
                    )
                )
            continue
        for request in sorted(requests, key=lambda r: -gpus(r)):
            want = gpus(request)
            if want <= 0:
                continue
            for f in free.values():
                if f[GPU] >= want:
                    f[GPU] -= want
                    break
        decisions.append(
            Decision(
                gang.key,
                {p.key: None for p in pods},
                f"count check: {len(pods)} pod(s)",
                gang.state == "partial",
            )
        )
    return decisions, waiting
