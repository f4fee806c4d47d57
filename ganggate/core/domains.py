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
from typing import Iterator, Mapping, Sequence

from ganggate.core.capacity import Capacity


def level_name(level: str) -> str:
    """How a message names a level: its label key's name part ('example.com/rack' -> 'rack')."""
    name = level.rsplit("/", 1)[-1].rsplit(".", 1)[-1]  # nvidia.com/gpu.clique -> clique
    return "node" if name == "hostname" else name


def domain_of(node: Mapping, level: str, levels: Sequence[str] = ()) -> str:
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
    return " in ".join(f"{key}={value}" for key, value in reversed(list(zip(path, values))))


def domains(capacity: Capacity, level: str, names: Sequence[str] | None = None) -> dict[str, list[str]]:
    """The nodes (all, or the given ones) grouped by their domain at a level."""
    cache = capacity.topology_cache
    if names is None and level in cache:
        return cache[level]
    nodes, levels = capacity.nodes, capacity.topology_levels
    groups = {domain_of(nodes[members[0]], level, levels): members
              for members in _by_label_values(capacity, level, names).values()}
    if names is None:
        cache[level] = groups
    return groups


def domain_count(capacity: Capacity, level: str) -> int:
    """How many domains the level has (without naming them: hostname has one per node)."""
    if level in capacity.topology_cache:
        return len(capacity.topology_cache[level])
    key = f"{level}\x00count"
    found = capacity.topology_free.get(key)
    if not isinstance(found, int):
        found = capacity.topology_free[key] = len(_by_label_values(capacity, level, None))
    return found


def _by_label_values(capacity: Capacity, level: str, names: Sequence[str] | None) -> dict[object, list[str]]:
    """The nodes grouped by their values of the level's label and the wider levels' (a node
    missing one by its name): domain_of's grouping, before the groups are named."""
    levels = capacity.topology_levels
    chosen = capacity.nodes if names is None else names
    if level in levels:
        depth = list(levels).index(level) + 1
        values_of = _label_values(capacity)
    else:
        depth, values_of = 1, {n: (_labels(capacity, n).get(level),) for n in chosen}
    groups: dict[object, list[str]] = {}
    for name in chosen:
        values = values_of[name][:depth]
        groups.setdefault(name if None in values else values, []).append(name)
    return groups


def _labels(capacity: Capacity, name: str) -> Mapping[str, str]:
    return (capacity.nodes[name].get("metadata") or {}).get("labels") or {}


def _label_values(capacity: Capacity) -> dict[str, tuple]:
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
    `FreeGpus` moves a node's share when the round takes capacity from it."""

    def __init__(self, tracker: "FreeGpus", level: str, per: int = 0) -> None:
        capacity = tracker.capacity
        self.per = per
        self.groups = domains(capacity, level)
        self.domain_of_node = _domain_of_node(capacity, level)
        node_gpus = tracker.gpus
        if per:
            self.free = {d: sum(node_gpus[n] // per for n in names) for d, names in self.groups.items()}
        else:
            self.free = {d: sum(node_gpus[n] for n in names) for d, names in self.groups.items()}
        self.order = sorted((f, d) for d, f in self.free.items())

    def move(self, moved: Sequence[tuple[str, int, int]]) -> None:
        """Nodes' free GPUs went from `before` to `after` (node, before, after): their
        domains' shares follow, each domain moved once."""
        per, of_node, deltas = self.per, self.domain_of_node, {}
        for node, before, after in moved:
            delta = (after // per - before // per) if per else after - before
            if delta:
                domain = of_node[node]
                deltas[domain] = deltas.get(domain, 0) + delta
        for domain, delta in deltas.items():
            if delta:
                old = self.free[domain]
                del self.order[bisect.bisect_left(self.order, (old, domain))]
                self.free[domain] = old + delta
                bisect.insort(self.order, (old + delta, domain))

    def at_least(self, amount: int) -> Iterator[tuple[int, str]]:
        """(free, domain) of the domains with at least `amount` free GPUs, least first."""
        return iter(self.order[bisect.bisect_left(self.order, (amount, "")):])

    def largest(self) -> tuple[int, str]:
        """(free, domain) of the largest free domain (the first by name among equals)."""
        top = self.order[-1][0]
        return self.order[bisect.bisect_left(self.order, (top, ""))]


class FreeGpus:
    """Each node's free GPUs as last seen, and the round's DomainFree views of them; caught up
    from Capacity.changed when a view is asked for, so a take costs topology nothing (a pod
    tried in a domain and given back moves no domain at all)."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self.seen = len(capacity.changed)
        self.gpus = {name: max(level, 0) for name, level in capacity.level.items()}  # negative: none
        self.views: dict[tuple[str, int], DomainFree] = {}

    def view(self, level: str, per: int) -> DomainFree:
        self.catch_up()
        found = self.views.get((level, per))
        if found is None:
            found = self.views[(level, per)] = DomainFree(self, level, per)
        return found

    def catch_up(self) -> None:
        changed = self.capacity.changed
        if self.seen == len(changed):
            return
        latest = dict(changed[self.seen:])  # each node's last free GPU
        self.seen = len(changed)
        known = self.gpus
        moved = [(node, known[node], max(after, 0)) for node, after in latest.items() if max(after, 0) != known[node]]
        for node, _, after in moved:
            known[node] = after
        for view in self.views.values():
            view.move(moved)


def domain_free(capacity: Capacity, level: str, per: int = 0) -> DomainFree:
    """The level's DomainFree for this round, up to date with the round's takes."""
    tracker = capacity.topology_free.get("\x00free")
    if not isinstance(tracker, FreeGpus):
        tracker = capacity.topology_free["\x00free"] = FreeGpus(capacity)
    return tracker.view(level, per)


def placement_domain(capacity: Capacity, placement: Mapping[str, str | None]) -> str | None:
    """The narrowest configured domain that holds the whole placement ('example.com/rack=r3'),
    or None when there are no levels or it spans the widest."""
    nodes = sorted({n for n in placement.values() if n is not None and n in capacity.nodes})
    if not nodes:
        return None
    levels = capacity.topology_levels
    for level in reversed(levels):
        if level in capacity.topology_cache:  # the round's map; else this placement's nodes only
            of_node = _domain_of_node(capacity, level)
            found = {of_node[n] for n in nodes}
        else:
            first = domain_of(capacity.nodes[nodes[0]], level, levels)
            found = {first} if all(domain_of(capacity.nodes[n], level, levels) == first for n in nodes[1:]) else set()
        if len(found) == 1:
            return found.pop()
    return None


def _domain_of_node(capacity: Capacity, level: str) -> dict[str, str]:
    """node -> its domain at the level (cached for the round)."""
    key = f"{level}\x00nodes"
    found = capacity.topology_free.get(key)
    if not isinstance(found, dict):
        found = capacity.topology_free[key] = {n: d for d, names in domains(capacity, level).items() for n in names}
    return found
