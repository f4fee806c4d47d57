"""Topology: a gang kept in few domains (zone, block, rack, ...; `ganggate.core.placement.domains`).

A gang may ask (`scheduling.k8s.io/group-topology-required`) to be placed
in one domain of a level, or wait; or prefer (`group-topology-preferred`) few domains of a
level, never waiting for it; with levels configured and neither asked, it prefers the
narrowest domain it fits in. `place` searches the levels narrowest first (from the required
or preferred level; from the narrowest configured otherwise) and, at each level, tries the
domains that could hold the gang, least free GPU first (least waste), packing the gang with
the flat packer on that domain's nodes alone. More pods of a gang that has members released
already (a started gang's extras, the rest of a release cut short) go into those members'
domain: only there at the required level; there first otherwise. Pure: no I/O.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ganggate.contract import GangSpec
from ganggate.core.placement.capacity import Capacity
from ganggate.core.state.cluster import ClusterState
from ganggate.core.placement.domains import (
    domain_free,
    domain_of,
    domains,
    free_gpus,
    level_name,
    one_node_each,
    room,
)
from ganggate.core.placement.explain import plural
from ganggate.core.state.gangs import Gang
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo
from ganggate.core.fit.resources import GPU, format_amount

# How many domains of one level are tried, least waste first, before the next level.
DOMAIN_TRIES = 2
Planner = Callable[[Sequence[PodInfo], Capacity, int], "dict[str, str] | Unfit"]


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
    amounts = [p.gpu for p in pods]
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
        found_room = sum(room(capacity.level[n], per) for n in names if n in eligible)
        if found_room >= amount and any(n in eligible for n in names):
            candidates.append((found_room, domain, names))
    candidates.sort(key=lambda c: (c[0], c[1]))
    return [(domain, names) for _, domain, names in candidates[:tries]]


def _demand(pods: Sequence[PodInfo], need: int) -> int:
    """The fewest GPUs `need` of the pods ask for."""
    return sum(sorted(p.gpu for p in pods)[:need])


def place(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner) -> dict[str, str] | Unfit:
    """Place the gang in one domain of the narrowest level it fits, or (unless required)
    anywhere as the flat packer would; takes the placement from `capacity` like plan_gang."""
    required, preferred = gang_request(pods)
    levels = search_levels(capacity.topology_levels, required, preferred)
    if not levels:
        return flat(pods, capacity, need)
    placed = _placed_members(pods, capacity)
    if placed:
        return _place_near(pods, capacity, need, flat, placed, levels, required)
    if len(pods) <= 1:
        return flat(pods, capacity, need)
    eligible = _eligible(pods, capacity)
    threshold = _threshold(pods, need)
    for level in levels:
        if level != required and one_node_each(capacity, level):
            continue  # one node per domain (hostname): few nodes is the packer's own business
        # Every domain of the required level that could hold the gang is tried (a gang must
        # not wait while one would do); a few, least waste first, of the narrower levels.
        tries = len(capacity.nodes) if level == required else DOMAIN_TRIES
        for domain, names in _candidates(capacity, level, threshold, eligible, tries):
            result = _plan_within(pods, capacity, need, f"{level}\x00{domain}", names, flat)
            if not isinstance(result, Unfit):
                return result
    per = threshold[0]
    if required is not None and per and _fits_across(pods, capacity, need):  # the level is why
        return Unfit(required_message(pods, capacity, need, required, eligible))
    result = flat(pods, capacity, need)
    if required is None or isinstance(result, Unfit):
        return result  # soft: anywhere; hard and not even anywhere: the flat packer's reason
    for key, node in result.items():
        capacity.take(node, _request(pods, key), -1)
    return Unfit(required_message(pods, capacity, need, required, eligible))


def _fits_across(pods: Sequence[PodInfo], capacity: Capacity, need: int) -> bool:
    """Whether `need` of the pods surely fit across the nodes, so the flat packer would place
    them and the level alone is why they wait. Only for one shape (one request, one
    constraint) of whole GPUs and no GPU cards: then a node holds as many as its scarcest
    resource allows (GPU room alone, NodeIndex.room_for, overcounts where cpu, memory or
    pods bind, and for mixed sizes); counted fullest nodes first, until enough."""
    first = pods[0]
    request = first.request
    if capacity.cards or first.gpu <= 0 or any(p.request != request or p.constraint_key != first.constraint_key for p in pods):
        return False
    index, free = capacity.index(first), capacity.free
    asked = [(name, amount) for name, amount in request.items() if amount > 0]
    found = 0
    for lv in reversed(index.levels):
        if lv < first.gpu:
            break
        for _, _, node in index.buckets[lv]:
            have = free[node]
            found += min(have.get(name, 0) // amount for name, amount in asked)
            if found >= need:
                return True
    return False


def released_nodes(gang: Gang, state: ClusterState) -> frozenset[str]:
    """The nodes of the gang's released members: bound to, promised, or named by their
    decision (a release cut short, then a restart): where its extras and the rest of a cut-short
    release should go near."""
    found = set()
    for pod in gang.released_pods():
        promise = state.promises.get(pod.key)
        node = pod.node_name or (promise.node if promise is not None else None)
        if node is None and isinstance(pod.decision, dict) and isinstance(pod.decision.get("node"), str):
            node = pod.decision["node"]
        if node:
            found.add(node)
    return frozenset(found)


def _placed_members(pods: Sequence[PodInfo], capacity: Capacity) -> frozenset[str]:
    """The nodes (of this round's) where the gang of these pods already has released members."""
    spec = pods[0].gang if pods else None
    if not isinstance(spec, GangSpec):
        return frozenset()
    found = capacity.topology_placed.get((pods[0].namespace, spec.name), frozenset())
    return frozenset(n for n in found if n in capacity.nodes)


def placed_domains(pods: Sequence[PodInfo], capacity: Capacity, level: str) -> list[str] | None:
    """The nodes of the level's domain(s) where the gang of these pods has released members,
    or None when it has none."""
    placed = _placed_members(pods, capacity)
    if not placed:
        return None
    return _near(placed, capacity, level)[1]


def _near(placed: frozenset[str], capacity: Capacity, level: str) -> tuple[list[str], list[str]]:
    """The level's domains of these nodes, by name, and those domains' nodes."""
    around = sorted({domain_of(capacity.nodes[n], level, capacity.topology_levels) for n in placed})
    groups = domains(capacity, level)
    return around, [n for domain in around for n in groups.get(domain, ())]


def _place_near(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner, placed: frozenset[str],
                levels: Sequence[str], required: str | None) -> dict[str, str] | Unfit:
    """More pods of a gang that has members placed already: in the domain(s) of those members,
    narrowest level first; at the required level, there or nowhere; else anywhere at last."""
    for level in levels:
        around, names = _near(placed, capacity, level)
        result = _plan_within(pods, capacity, need, f"{level}\x00{'|'.join(around)}", names, flat)
        if not isinstance(result, Unfit):
            return result
        if level == required:  # there or nowhere
            return Unfit(near_message(pods, capacity, need, level, around, names))
    return flat(pods, capacity, need)


def near_message(pods: Sequence[PodInfo], capacity: Capacity, need: int, level: str, around: Sequence[str],
                 names: Sequence[str]) -> str:
    """Why more pods of a gang wait for room beside its released members: 'needs 8 GPUs in
    its rack (example.com/rack=a), where its released pods are; it has 4 free'."""
    noun = level_name(level)
    where = ", ".join(around)
    demand = _demand(pods, need)
    if demand > 0:
        free = free_gpus(capacity, names, _eligible(pods, capacity))
        return (f"needs {format_amount(GPU, demand)} GPUs in its {noun} ({where}), where its released pods are; "
                f"it has {format_amount(GPU, free)} free")
    return f"needs {plural(need, 'pod')} in its {noun} ({where}), where its released pods are; it has no room for them"


def _request(pods: Sequence[PodInfo], key: str) -> Mapping[str, int]:
    return next(p.request for p in pods if p.key == key)


def _plan_within(
    pods: Sequence[PodInfo], capacity: Capacity, need: int, domain: str, names: Sequence[str], flat: Planner
) -> dict[str, str] | Unfit:
    """The flat packer on the domain's nodes alone (Capacity.scope); a placement is taken."""
    capacity.scope = (domain, names)
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
