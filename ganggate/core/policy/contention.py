"""The race between ungating and binding: keep a gang out of room a pending pod may take first.

Releasing into room that a pending pod could take first would leave a gang partly bound: the
default scheduler places already-ungated pods (ordinary ones, or another scheduler's) as
soon as it can, and a pinned gang pod whose room was taken stays Pending. So a plan may not
use a node where some such pod fits now but would not fit once the gang is there (see
`place_uncontested`); the gang goes elsewhere, or waits, naming the pods it waits for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ganggate.core.fit.resources import Resources, add, add_into, fits
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.explain import contested_message
from ganggate.core.placement.packing import plan_gang
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo

# How many times a plan is redone around contested nodes before the gang waits instead.
CONTEST_RETRIES = 3
Rivals = list[tuple[PodInfo, list[str]]]


def find_rivals(state: ClusterState) -> Rivals:
    """Pods a scheduler may bind at any moment that hold no room of their own, grouped by
    shape (constraint and request): one representative and the keys of all of them."""
    groups: dict[tuple[Any, ...], tuple[PodInfo, list[str]]] = {}
    for key, pod in state.pending.items():
        promise = state.promises.get(key)
        if promise is not None and promise.node is not None:
            continue  # a pinned, released pod: its room is already promised
        shape = (pod.constraint_key, tuple(sorted(pod.request.items())))
        group = groups.setdefault(shape, (pod, []))
        group[1].append(key)
    return list(groups.values())


def contested_nodes(
    placement: Mapping[str, str], pods: Mapping[str, PodInfo], capacity: Capacity, rivals: Rivals
) -> dict[str, list[str]]:
    """Nodes of a placement (already taken from `capacity`) where a rival fits now but
    would not once the gang is there, with the rivals' keys."""
    demand: dict[str, Resources] = {}
    for key, node in placement.items():
        add_into(demand.setdefault(node, {}), pods[key].request)
    contested: dict[str, list[str]] = {}
    for node, amount in demand.items():
        after = capacity.free[node]
        before = add(after, amount)
        for rival, keys in rivals:
            if node in capacity.index(rival).members and fits(rival.request, before) and not fits(rival.request, after):
                contested.setdefault(node, []).extend(keys)
    return contested


def place_uncontested(
    pods: Sequence[PodInfo], capacity: Capacity, need: int, rivals: Rivals
) -> tuple[dict[str, str] | Unfit, dict[str, list[str]]]:
    """plan_gang, redone with contested nodes closed to the gang; returns the placement (or
    Unfit) and every contested node met on the way, with the pods that contest it."""
    if not rivals:  # no pod may bind first: the plan stands
        return plan_gang(pods, capacity, need), {}
    by_key = {p.key: p for p in pods}
    closed: dict[str, Resources] = {}
    seen: dict[str, list[str]] = {}
    try:
        for _ in range(CONTEST_RETRIES + 1):
            result = plan_gang(pods, capacity, need)
            if isinstance(result, Unfit):
                return result, seen
            contested = contested_nodes(result, by_key, capacity, rivals)
            if not contested:
                return result, seen
            seen.update(contested)
            for key, node in result.items():
                capacity.take(node, by_key[key].request, -1)
            for node in contested:
                closed[node] = {k: v for k, v in capacity.free[node].items() if v > 0}
                capacity.take(node, closed[node])
        return Unfit(contested_message(seen)), seen
    finally:
        for node, amount in closed.items():
            capacity.take(node, amount, -1)
