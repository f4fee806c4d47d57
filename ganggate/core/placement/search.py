"""A bounded exact search for a small gang of several shapes that greedy packing missed.

Best fit is not complete for gangs of several shapes: it can put the GPU-heavy pods where the
CPU-heavy ones had to go, and then find no room for the rest although a placement exists
(tests/test_planner_properties.py keeps such cases). When the greedy tries of
`packing.plan_flat` fail, `search` tries every way of spreading the gang's pods, shape by
shape, over the few nodes that have room for any of them, within a fixed budget of steps, so
that a gang that fits is not told it waits. It runs only where it is cheap: a gang of at most
`MAX_PODS` pods, at most `MAX_NODES` nodes with room, no GPU-card shares (their cards are the
card policy's). Pure: it reads the capacity and takes nothing unless it finds a placement.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from ganggate.core.fit.resources import Resources, add_into, copies_fitting
from ganggate.core.placement.capacity import Capacity
from ganggate.core.state.pods import PodInfo

#: Gangs larger than this are left to the greedy tries (the search grows with the pods).
MAX_PODS = 16
#: Nodes with room for some pod of the gang: beyond this many the greedy tries rarely miss
#: (a miss needs a nearly full cluster) and the search would grow with the nodes.
MAX_NODES = 12
#: Placement steps (a count of pods of one shape on one node) tried before giving up: a few
#: milliseconds, paid only by a gang the greedy tries left waiting.
MAX_STEPS = 2000


def _with_room(pod: PodInfo, capacity: Capacity) -> list[str] | None:
    """The nodes with room for the pod, by name; None when more than MAX_NODES might have (read
    off the index's GPU buckets first, so that a large cluster costs a few bucket sizes, not a
    pass over its nodes)."""
    index = capacity.index(pod)
    levels = index.levels[bisect.bisect_left(index.levels, pod.gpu):]
    if sum(len(index.buckets[level]) for level in levels) > MAX_NODES:
        return None
    return sorted(name for level in levels for _, _, name in index.buckets[level]
                  if copies_fitting(pod.request, capacity.free[name]) > 0)


class _OutOfSteps(Exception):
    """The search used its budget."""


def search(pods: Sequence[PodInfo], capacity: Capacity, need: int) -> dict[str, str] | None:
    """A placement of all `pods` (pod key -> node), taken from `capacity`; None when there is
    none, the gang is out of the search's scope, or the budget ran out."""
    if need != len(pods) or len(pods) > MAX_PODS or capacity.cards or any(p.shared_gpu for p in pods):
        return None
    groups: dict[tuple[Any, ...], list[PodInfo]] = {}
    for pod in sorted(pods, key=lambda p: (-p.gpu, p.key)):
        groups.setdefault((pod.constraint_key, tuple(sorted(pod.request.items()))), []).append(pod)
    shapes = list(groups.values())
    allowed: list[list[str]] = []
    for group in shapes:
        names = _with_room(group[0], capacity)
        if not names:  # none (a shape fits nowhere) or too many nodes to search
            return None
        allowed.append(names)
    nodes = set().union(*allowed)
    if len(nodes) > MAX_NODES:
        return None
    free: dict[str, Resources] = {name: dict(capacity.free[name]) for name in nodes}
    counts: list[list[tuple[str, int]]] = [[] for _ in shapes]
    steps = 0

    def spread(shape: int, at: int, left: int) -> bool:
        """Put `left` pods of shapes[shape] on allowed[shape][at:], then the shapes after it."""
        nonlocal steps
        if left == 0:
            return shape + 1 == len(shapes) or spread(shape + 1, 0, len(shapes[shape + 1]))
        names = allowed[shape]
        if at == len(names):
            return False
        steps += 1
        if steps > MAX_STEPS:
            raise _OutOfSteps
        node, request = names[at], shapes[shape][0].request
        for copies in range(min(left, copies_fitting(request, free[node])), -1, -1):
            if copies:
                add_into(free[node], request, -copies)
                counts[shape].append((node, copies))
            if spread(shape, at + 1, left - copies):
                return True
            if copies:
                add_into(free[node], request, copies)
                counts[shape].pop()
        return False

    try:
        if not spread(0, 0, len(shapes[0])):
            return None
    except _OutOfSteps:
        return None
    placement: dict[str, str] = {}
    for group, spots in zip(shapes, counts, strict=True):
        remaining = iter(group)
        for node, copies in spots:
            capacity.take(node, group[0].request, copies)
            for _ in range(copies):
                placement[next(remaining).key] = node
    return placement
