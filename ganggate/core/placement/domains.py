"""Topology domains: nodes grouped by their labels at a level, and each domain's free GPUs.

A level is a node label key (`--topology-levels`, widest first); the nodes with the same value
of a level's label (and of the wider levels' labels) form one domain of that level, and a node
without one of those labels is a domain of its own. For a decision round (a Capacity) this
module groups the nodes once, names the domains ('example.com/rack=r3 in example.com/block=b1')
and keeps each domain's free GPUs in order as the round takes capacity, so that the domains
that could hold a gang are a bisect. Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ganggate.core.placement.capacity import Capacity


def level_name(level: str) -> str:
    """How a message names a level: its label key's name part, singular, so that a sentence
    reads 'in one rack' ('example.com/rack' and 'example.com/racks' -> 'rack')."""
    name = level.rsplit("/", 1)[-1].rsplit(".", 1)[-1]  # nvidia.com/gpu.clique -> clique
    if name == "hostname":
        return "node"
    if name.endswith("ies") and len(name) > 4:
        return name[:-3] + "y"
    if name.endswith(("ches", "shes", "xes", "sses")):
        return name[:-2]
    if name.endswith("s") and not name.endswith(("ss", "us", "is")) and len(name) > 3:
        return name[:-1]
    return name


def domain_of(node: Mapping[str, Any], level: str, levels: Sequence[str] = ()) -> str:
    """The node's domain at a level, named by its label value and, for a configured level,
    those of the wider levels ('example.com/rack=r3 in example.com/block=b1': racks of two
    blocks are two domains even when their labels agree); a node without one of those
    labels is a domain of its own ('node gpu-7')."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    path = list(levels[: list(levels).index(level) + 1]) if level in levels else [level]
    values = [labels.get(key) for key in path]
    if any(value is None for value in values):
        return f"node {metadata.get('name', '')}"
    return " in ".join(f"{key}={value}" for key, value in reversed(list(zip(path, values, strict=True))))


def domains(capacity: Capacity, level: str) -> dict[str, list[str]]:
    """The nodes grouped by their domain at a level (cached for the round)."""
    cache = capacity.topology_cache
    if level in cache:
        return cache[level]
    nodes, levels = capacity.nodes, capacity.topology_levels
    groups = {domain_of(nodes[members[0]], level, levels): members
              for members in _by_label_values(capacity, level).values()}
    cache[level] = groups
    return groups


def one_node_each(capacity: Capacity, level: str) -> bool:
    """Whether no two nodes share a domain of the level (hostname: the packer's own business),
    known at the first two nodes that share one (cached for the round)."""
    key = f"{level}\x00one each"
    found = capacity.topology_free.get(key)
    if not isinstance(found, bool):
        found = capacity.topology_free[key] = _one_node_each(capacity, level)
    return found


def _one_node_each(capacity: Capacity, level: str) -> bool:
    if level in capacity.topology_cache:
        return len(capacity.topology_cache[level]) == len(capacity.nodes)
    levels = capacity.topology_levels
    if level in levels:
        depth = list(levels).index(level) + 1
        values: Iterable[tuple[Any, ...]] = _label_values(capacity).values()
        if depth < len(levels):
            values = (v[:depth] for v in values)
    else:
        values = ((_labels(capacity, n).get(level),) for n in capacity.nodes)
    seen: set[tuple[Any, ...]] = set()
    for value in values:
        if None in value:
            continue  # a node missing a label is a domain of its own
        if value in seen:
            return False
        seen.add(value)
    return True


def _by_label_values(capacity: Capacity, level: str) -> dict[object, list[str]]:
    """The nodes grouped by their values of the level's label and the wider levels' (a node
    missing one by its name): domain_of's grouping, before the groups are named."""
    levels = capacity.topology_levels
    if level in levels:
        depth = list(levels).index(level) + 1
        values_of = _label_values(capacity)
    else:
        depth, values_of = 1, {n: (_labels(capacity, n).get(level),) for n in capacity.nodes}
    groups: dict[object, list[str]] = {}
    for name in capacity.nodes:
        values = values_of[name][:depth]
        groups.setdefault(name if None in values else values, []).append(name)
    return groups


def _labels(capacity: Capacity, name: str) -> Mapping[str, str]:
    return (capacity.nodes[name].get("metadata") or {}).get("labels") or {}


def _label_values(capacity: Capacity) -> dict[str, tuple[Any, ...]]:
    """node -> its values of the configured levels' labels, widest first (read once a round)."""
    found = capacity.topology_free.get("\x00labels")
    if not isinstance(found, dict):
        levels = capacity.topology_levels
        found = capacity.topology_free["\x00labels"] = {
            name: tuple(map(_labels(capacity, name).get, levels)) for name in capacity.nodes}
    return found


def free_gpus(capacity: Capacity, nodes: Sequence[str], eligible: set[str] | None) -> int:
    """The free GPUs of the eligible nodes (None: all) among these."""
    level = capacity.level  # gpus(free[n]), kept by the capacity
    return sum(max(level[n], 0) for n in nodes if eligible is None or n in eligible)


def room(free_gpu: int, per: int) -> int:
    """A node's free GPUs (per=0), or how many pods of `per` GPUs they hold."""
    return max(free_gpu, 0) // per if per else max(free_gpu, 0)


class DomainFree:
    """The free GPUs of each domain of one level over all nodes (or, per > 0, the pods of
    `per` GPUs they hold), kept in order, so the domains that could hold a gang are a bisect.
    `LevelFree` moves a domain's share when the round took capacity from its nodes."""

    def __init__(self, groups: Mapping[str, Sequence[str]], node_gpus: Mapping[str, int], per: int = 0) -> None:
        self.per = per
        self.groups = groups
        of_node = node_gpus.__getitem__
        if per:
            self.free = {d: sum(g // per for g in map(of_node, names)) for d, names in groups.items()}
        else:
            self.free = {d: sum(map(of_node, names)) for d, names in groups.items()}
        self.order = sorted((f, d) for d, f in self.free.items())
        self.seen = 0  # how many of its LevelFree's moves it follows already

    def move(self, moved: Sequence[tuple[str, int, int]]) -> None:
        """Nodes' free GPUs went from `before` to `after` (domain, before, after): their
        domains' shares follow, each domain moved once."""
        per = self.per
        deltas: dict[str, int] = {}
        for domain, before, after in moved:
            delta = (after // per - before // per) if per else after - before
            if delta:
                deltas[domain] = deltas.get(domain, 0) + delta
        free, order = self.free, self.order
        for domain, delta in deltas.items():
            if delta:
                old = free[domain]
                del order[bisect.bisect_left(order, (old, domain))]
                free[domain] = old + delta
                bisect.insort(order, (old + delta, domain))

    def at_least(self, amount: int) -> Iterator[tuple[int, str]]:
        """(free, domain) of the domains with at least `amount` free GPUs, least first."""
        return iter(self.order[bisect.bisect_left(self.order, (amount, "")):])

    def largest(self) -> tuple[int, str]:
        """(free, domain) of the largest free domain (the first by name among equals)."""
        top = self.order[-1][0]
        return self.order[bisect.bisect_left(self.order, (top, ""))]


class LevelFree:
    """Each node's free GPUs as last seen and one level's DomainFree views (one per pod size
    asked for), caught up from Capacity.changed only when a view of the level is asked for:
    a take costs topology nothing, a node taken from several times (or tried in a domain and
    given back) between two asks moves once, and each change is looked at once per level.
    A view follows the level's moves when it is asked for itself: a view asked now and then
    moves a domain once for the many changes in it since."""

    def __init__(self, capacity: Capacity, level: str) -> None:
        self.capacity = capacity
        self.seen = len(capacity.changed)
        self.groups = domains(capacity, level)
        self.domain_of_node = domain_of_node(capacity, level)
        self.gpus = {name: max(level, 0) for name, level in capacity.level.items()}  # negative: none
        self.moved: list[tuple[str, int, int]] = []  # (domain, before, after) of each node that moved
        self.views: dict[int, DomainFree] = {}

    def view(self, per: int) -> DomainFree:
        if per == 1:
            per = 0  # pods of one GPU each: as many as the free GPUs, the same view
        self.catch_up()
        moved = self.moved
        found = self.views.get(per)
        if found is None:
            found = self.views[per] = DomainFree(self.groups, self.gpus, per)
        elif found.seen < len(moved):
            found.move(moved[found.seen:])
        found.seen = len(moved)
        return found

    def catch_up(self) -> None:
        changed = self.capacity.changed
        if self.seen == len(changed):
            return
        latest = dict(changed[self.seen:])  # each node's last free GPU
        self.seen = len(changed)
        known, of_node, moved = self.gpus, self.domain_of_node, self.moved
        for node, after in latest.items():
            after = max(after, 0)
            before = known[node]
            if after != before:
                known[node] = after
                moved.append((of_node[node], before, after))


def domain_free(capacity: Capacity, level: str, per: int = 0) -> DomainFree:
    """The level's DomainFree for this round, up to date with the round's takes. For one round's
    Capacity only: it catches up from Capacity.changed, which set_free does not add to and
    start_round/rewind clear (IncrementalRounds, which keeps a Capacity, falls back with topology)."""
    key = f"{level}\x00free"
    tracker = capacity.topology_free.get(key)
    if not isinstance(tracker, LevelFree):
        tracker = capacity.topology_free[key] = LevelFree(capacity, level)
    return tracker.view(per)


def placement_domain(capacity: Capacity, placement: Mapping[str, str | None]) -> str | None:
    """The narrowest configured domain that holds the whole placement ('example.com/rack=r3'),
    or None when there are no levels or it spans the widest."""
    all_nodes, levels = capacity.nodes, capacity.topology_levels
    nodes = {n for n in placement.values() if n is not None and n in all_nodes}
    if not nodes or not levels:
        return None
    first = nodes.pop()
    if not nodes:  # one node is one domain at every level: the narrowest's
        return domain_of(all_nodes[first], levels[-1], levels)
    # Nodes share a domain of a level when they agree on the label values down to it and
    # none is missing one (a node without one is a domain of its own): domain_of's grouping,
    # so any of them names it.
    values_of = _label_values(capacity)
    mine, others = values_of[first], {values_of[n] for n in nodes}
    for depth in range(len(levels), 0, -1):
        common = mine[:depth]
        if None not in common and all(values[:depth] == common for values in others):
            level = levels[depth - 1]
            if level in capacity.topology_cache:  # the round's map names it already
                return domain_of_node(capacity, level)[first]
            return domain_of(all_nodes[first], level, levels)
    return None


def domain_of_node(capacity: Capacity, level: str) -> dict[str, str]:
    """node -> its domain at the level (cached for the round)."""
    key = f"{level}\x00nodes"
    found = capacity.topology_free.get(key)
    if not isinstance(found, dict):
        found = capacity.topology_free[key] = {n: d for d, names in domains(capacity, level).items() for n in names}
    return found


def children_of(capacity: Capacity, parent: str, child: str) -> dict[str, list[str]]:
    """Each domain of level `parent` -> the domains of the narrower level `child` inside it
    (cached for the round)."""
    key = f"{parent}\x00{child}\x00children"
    found = capacity.topology_free.get(key)
    if not isinstance(found, dict):
        of_node = domain_of_node(capacity, parent)
        children: dict[str, list[str]] = {}
        for domain, names in domains(capacity, child).items():
            children.setdefault(of_node[names[0]], []).append(domain)
        capacity.topology_free[key] = found = children
    return found
