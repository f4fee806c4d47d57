"""Topology: nodes grouped into domains (zone, block, rack, ...) and a gang kept in few of them.

The levels are node label keys, widest first (`--topology-levels`); the nodes with the same
value of a level's label form one domain of that level, and a node without the label is a
domain of its own. A gang may ask (`scheduling.k8s.io/group-topology-required`) to be placed
in one domain of a level, or wait; or prefer (`group-topology-preferred`) few domains of a
level, never waiting for it; with levels configured and neither asked, it prefers the
narrowest domain it fits in. `place` searches the levels narrowest first (from the required
or preferred level; from the narrowest configured otherwise) and, at each level, tries the
domains that could hold the gang, least free GPU first (least waste), packing the gang with
the flat packer on that domain's nodes alone. Pure: no I/O.
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterator, Mapping, Sequence

from ganggate.contract import GangSpec
from ganggate.core.capacity import Capacity
from ganggate.core.explain import plural
from ganggate.core.outcome import Unfit
from ganggate.core.pods import PodInfo
from ganggate.core.resources import GPU, format_amount, gpus

# How many domains of one level are tried, least waste first, before the next level.
DOMAIN_TRIES = 2
Planner = Callable[[Sequence[PodInfo], Capacity, int], "dict[str, str] | Unfit"]


def level_name(level: str) -> str:
    """How a message names a level: its label key's name part ('example.com/rack' -> 'rack')."""
    name = level.rsplit("/", 1)[-1]
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


def gang_request(pods: Sequence[PodInfo]) -> tuple[str | None, str | None]:
    """The gang's (required, preferred) level, as its first pod's spec says (pods that
    disagree put the gang in conflict, core.gangs, and are not placed; a malformed
    annotation makes no spec: absent)."""
    if not pods:
        return None, None
    spec = pods[0].gang
    if not isinstance(spec, GangSpec):
        return None, None
    return spec.topology_required, spec.topology_preferred


def search_levels(levels: Sequence[str], required: str | None, preferred: str | None) -> list[str]:
    """The levels to try to fit the gang in one domain of, narrowest first."""
    start = required or preferred
    if start is None:
        return list(reversed(levels))
    if start not in levels:
        return [start] if required else [start, *reversed(levels)]
    at = list(levels).index(start)
    if required:  # any one domain of the level or of a narrower one is one domain of it
        return list(reversed(levels[at:]))
    return list(reversed(levels[: at + 1]))


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
    if level in levels:
        depth = list(levels).index(level) + 1
        values_of = _label_values(capacity)
    else:
        depth, values_of = 1, {n: (_labels(capacity, n).get(level),) for n in (capacity.nodes if names is None else names)}
    groups: dict[object, list[str]] = {}
    for name in capacity.nodes if names is None else names:
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
    return sum(max(gpus(capacity.free[n]), 0) for n in nodes if eligible is None or n in eligible)


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
        self.gpus = {name: max(gpus(free), 0) for name, free in capacity.free.items()}  # negative: none
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


def _eligible(pods: Sequence[PodInfo], capacity: Capacity) -> set[str] | None:
    """The nodes the gang's pods may use; None when that is every node."""
    indexes = [capacity.index(p) for p in {p.constraint_key: p for p in pods}.values()]
    if all(len(index.members) == len(capacity.nodes) for index in indexes):
        return None
    found: set[str] = set()
    for index in indexes:
        found |= index.members
    return found


def _threshold(pods: Sequence[PodInfo], need: int) -> tuple[int, int]:
    """What a domain needs to be worth a try: (per, amount): room for `need` pods of the
    smallest GPU request when every pod asks for GPUs, else (0, the GPUs of `need` pods)."""
    amounts = [gpus(p.request) for p in pods]
    if min(amounts) > 0:
        return min(amounts), need
    return 0, sum(sorted(amounts)[:need])


def _candidates(
    capacity: Capacity, level: str, threshold: tuple[int, int], eligible: set[str] | None, tries: int
) -> list[tuple[str, list[str]]]:
    """The domains (and their nodes) that could hold the gang (see _threshold), least room first
    (least waste; at most `tries` of them)."""
    per, amount = threshold
    if eligible is None:
        free = domain_free(capacity, level, per)
        found = []
        for _, domain in free.at_least(amount):
            found.append((domain, free.groups[domain]))
            if len(found) >= tries:
                break
        return found
    candidates = []
    for domain, names in domains(capacity, level).items():
        found_room = sum(room(gpus(capacity.free[n]), per) for n in names if n in eligible)
        if found_room >= amount and any(n in eligible for n in names):
            candidates.append((found_room, domain, names))
    candidates.sort(key=lambda c: (c[0], c[1]))
    return [(domain, names) for _, domain, names in candidates[:tries]]


def _demand(pods: Sequence[PodInfo], need: int) -> int:
    """The fewest GPUs `need` of the pods ask for."""
    return sum(sorted(gpus(p.request) for p in pods)[:need])


def place(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner) -> dict[str, str] | Unfit:
    """Place the gang in one domain of the narrowest level it fits, or (unless required)
    anywhere as the flat packer would; takes the placement from `capacity` like plan_gang."""
    required, preferred = gang_request(pods)
    levels = search_levels(capacity.topology_levels, required, preferred)
    if not levels or len(pods) <= 1:
        return flat(pods, capacity, need)
    eligible = _eligible(pods, capacity)
    threshold = _threshold(pods, need)
    for level in levels:
        if level != required and domain_count(capacity, level) == len(capacity.nodes):
            continue  # one node per domain (hostname): few nodes is the packer's own business
        # Every domain of the required level that could hold the gang is tried (a gang must
        # not wait while one would do); a few, least waste first, of the narrower levels.
        tries = len(capacity.nodes) if level == required else DOMAIN_TRIES
        for domain, names in _candidates(capacity, level, threshold, eligible, tries):
            result = _plan_within(pods, capacity, need, f"{level}\x00{domain}", names, flat)
            if not isinstance(result, Unfit):
                return result
    per, amount = threshold
    if required is not None and per and len({p.constraint_key for p in pods}) == 1:
        if capacity.index(pods[0]).room_for(per) >= amount:  # room across domains: the level is why
            return Unfit(required_message(pods, capacity, need, required, eligible))
    result = flat(pods, capacity, need)
    if required is None or isinstance(result, Unfit):
        return result  # soft: anywhere; hard and not even anywhere: the flat packer's reason
    for key, node in result.items():
        capacity.take(node, _request(pods, key), -1)
    return Unfit(required_message(pods, capacity, need, required, eligible))


def _request(pods: Sequence[PodInfo], key: str) -> Mapping[str, int]:
    return next(p.request for p in pods if p.key == key)


def _plan_within(
    pods: Sequence[PodInfo], capacity: Capacity, need: int, domain: str, names: Sequence[str], flat: Planner
) -> dict[str, str] | Unfit:
    """The flat packer on the domain's nodes alone (Capacity.scope); a placement is taken."""
    capacity.scope = (domain, frozenset(names))
    try:
        return flat(pods, capacity, need)
    finally:
        capacity.scope = None


def required_message(
    pods: Sequence[PodInfo], capacity: Capacity, need: int, level: str, eligible: set[str] | None
) -> str:
    """Why a gang that must sit in one domain of a level waits: what it needs, what the
    largest free domain has ('needs 32 GPUs in one rack; the largest free rack has 24')."""
    noun = level_name(level)
    groups = domains(capacity, level)
    demand = _demand(pods, need)
    if demand > 0:
        if eligible is None:
            largest = domain_free(capacity, level).largest()
        else:
            largest = max(sorted((free_gpus(capacity, names, eligible), d) for d, names in groups.items()),
                          key=lambda found: found[0])  # the first by name among equals
        return (
            f"needs {format_amount(GPU, demand)} GPUs in one {noun}; the largest free {noun} "
            f"({largest[1]}) has {format_amount(GPU, largest[0])}"
        )
    return f"needs {plural(need, 'pod')} in one {noun}; no {noun} has room for them all"


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
