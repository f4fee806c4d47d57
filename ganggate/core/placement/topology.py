"""Topology: a gang kept in few domains (zone, block, rack, ...; `ganggate.core.placement.domains`).

A gang may ask (`scheduling.k8s.io/group-topology-required`) to be placed in one domain of a
level, or wait; or prefer (`group-topology-preferred`) few domains of a level, never waiting
for it; with levels configured and neither asked, it prefers few domains of the narrowest.
`place` counts the domains of a chain of levels (`chain_levels`) and goes, in this order, into:
one domain of the narrowest level, each that could hold the gang by its room
(`ganggate.core.placement.rooms`), least room first; else the fewest domains of each level, widest first
(`ganggate.core.placement.fewest`); else one domain of a wider level; else (unless required) anywhere, as
the flat packer would. Each try is the flat packer on those domains' nodes alone. A required
level tries each of its domains that could hold the gang, fewest narrower domains first. More
pods of a gang that has members released already (a started gang's extras, the rest of a
release cut short) go into those members' domain: only there at the required level; there
first otherwise. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ganggate.contract import GangSpec
from ganggate.core.fit.resources import GPU, format_amount
from ganggate.core.placement import fewest
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.domains import (
    domain_free,
    domain_of,
    domains,
    free_gpus,
    level_name,
    one_node_each,
)
from ganggate.core.placement.explain import amount_text, plural
from ganggate.core.placement.rooms import Rooms, big_pods, chunk
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo

# Domain tries that the packer turned down (room said yes; CPU, memory or several pod sizes said
# no), at most, in one round, before gangs go straight to the fewest domains' choice (and the
# flat packer): a round full of gangs that fit nowhere stays cheap.
ROUND_FAILED_TRIES = 512
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


def chain_levels(capacity: Capacity, required: str | None, preferred: str | None) -> list[str]:
    """The levels whose domains are counted, widest first: from the required level down to
    the narrowest configured one; from the widest configured down to the preferred level (or,
    with neither asked, the narrowest); a level not configured alone. Levels of one node per
    domain (hostname) are the packer's business, unless required. Cached for the round."""
    key = f"\x00chain\x00{required}\x00{preferred}"
    found = capacity.topology_free.get(key)
    if isinstance(found, list):
        return found
    found = capacity.topology_free[key] = _chain_levels(capacity, required, preferred)
    return found


def _chain_levels(capacity: Capacity, required: str | None, preferred: str | None) -> list[str]:
    levels = list(capacity.topology_levels)
    start = required or preferred
    if start is not None and start not in levels:
        chain = [start]
    elif required:
        chain = levels[levels.index(required):]
    elif preferred:
        chain = levels[: levels.index(preferred) + 1]
    else:
        chain = levels
    return [lv for lv in chain if lv == required or not one_node_each(capacity, lv)]


def _eligible(pods: Sequence[PodInfo], capacity: Capacity) -> set[str] | None:
    """The nodes the gang's pods may use; None when that is every node (cached for the round
    by the pods' constraints: which nodes a constraint allows does not change in a round)."""
    keys = frozenset(p.constraint_key for p in pods)
    cache = capacity.topology_free.setdefault("\x00eligible", {})
    assert isinstance(cache, dict)
    if keys in cache:
        known: set[str] | None = cache[keys]
        return known
    indexes = [capacity.index(p) for p in {p.constraint_key: p for p in pods}.values()]
    found: set[str] | None = None
    if not all(len(index.members) == len(capacity.nodes) for index in indexes):
        found = set()
        for index in indexes:
            found |= index.members
    cache[keys] = found
    return found


def _demand(pods: Sequence[PodInfo], need: int) -> int:
    """The fewest GPUs `need` of the pods ask for."""
    return sum(sorted(p.gpu for p in pods)[:need])


def _spend_try(capacity: Capacity) -> bool:
    """Count one domain try the packer turned down; False once the round has none left."""
    left = capacity.topology_free.get("\x00tries left", ROUND_FAILED_TRIES)
    assert isinstance(left, int)
    capacity.topology_free["\x00tries left"] = left - 1
    return left > 1


def _tries_left(capacity: Capacity) -> bool:
    left = capacity.topology_free.get("\x00tries left", ROUND_FAILED_TRIES)
    return isinstance(left, int) and left > 0


def place(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner) -> dict[str, str] | Unfit:
    """Place the gang in the fewest domains (ganggate.core.placement.fewest) of the levels it asks for
    (or the configured ones), in one domain of the required level or wait; takes the
    placement from `capacity` like plan_gang."""
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
    chain = chain_levels(capacity, required, preferred)
    rooms = Rooms(capacity, chain, chunk(pods), eligible)
    rooms.big = big_pods(pods, need, rooms.per)
    demand = _demand(pods, need)
    if required is not None:
        result = _place_required(pods, capacity, need, flat, rooms, demand)
        if result is not None:
            return result
        every_pod_asks_gpu = min(p.gpu for p in pods) > 0
        if every_pod_asks_gpu and _fits_across(pods, capacity, need):  # the level is why
            return Unfit(required_message(pods, capacity, need, required, eligible))
        anywhere = flat(pods, capacity, need)
        if isinstance(anywhere, Unfit):
            return anywhere  # not even anywhere: the flat packer's reason
        for key, node in anywhere.items():
            capacity.take(node, _request(pods, key), -1)
        return Unfit(required_message(pods, capacity, need, required, eligible))
    if chain:
        result = _place_fewest(pods, capacity, need, flat, rooms, demand)
        if result is not None:
            return result
    return flat(pods, capacity, need)


def _place_required(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner, rooms: Rooms,
                    demand: int) -> dict[str, str] | None:
    """Every domain of the required level (chain level 0) whose room could hold the gang, the
    fewest narrower domains (then least waste) first; in each, the packer on those narrower
    domains, then on the whole domain. None: in no domain."""
    holders = rooms.holders(0, demand)
    candidates: Iterable[tuple[str, fewest.Choice | None]]
    if len(rooms.chain) > 1:  # ranked by what they need below them
        ranked = []
        for free, domain in holders:
            inner = fewest.choose(rooms.room, rooms.children, len(rooms.chain), 1, rooms.children(0, domain), demand,
                                  rooms.slots_fit if rooms.big else None)
            ranked.append(((inner.key() if inner is not None else ((len(capacity.nodes),), free, ())), domain, inner))
        ranked.sort(key=lambda r: (r[0], r[1]))
        candidates = [(domain, inner) for _, domain, inner in ranked]
    else:
        candidates = ((domain, None) for _, domain in holders)  # lazily: the first that packs ends it
    level = rooms.chain[0]
    groups = domains(capacity, level)
    for domain, inner in candidates:
        if inner is not None and len(inner.leaves) < len(rooms.children(0, domain)):
            result = _plan_leaves(pods, capacity, need, flat, rooms.chain[-1], inner.leaves)
            if result is not None:
                return result
        within = _plan_within(pods, capacity, need, f"{level}\x00{domain}", groups[domain], flat)
        if not isinstance(within, Unfit):
            return within
        _spend_try(capacity)  # every domain of the required level is tried, the budget or not
    return None


def _place_fewest(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner, rooms: Rooms,
                  demand: int) -> dict[str, str] | None:
    """Preferred or default: one domain of the narrowest level, least waste first, each that
    could hold the gang (within the round's budget of turned-down tries); else the fewest
    domains of each level, widest first (fewest.choose); else one domain of a wider level,
    least room first. None: the flat packer's turn."""
    depth, leaf = len(rooms.chain), rooms.chain[-1]
    tried: set[tuple[str, ...]] = set()
    fits = rooms.slots_fit if rooms.big else None
    for _, domain in rooms.holders(depth - 1, demand):
        if not _tries_left(capacity):
            break
        if fits is not None and not fits(depth - 1, (domain,)):
            continue
        tried.add((domain,))
        result = _plan_leaves(pods, capacity, need, flat, leaf, (domain,))
        if result is not None:
            return result
        if demand <= 0:
            break  # no GPU asked: room says nothing; the fullest domain, then the packer
    roots = list(rooms.free(0))
    choice = fewest.choose(rooms.room, rooms.children, depth, 0, roots, demand, fits)
    if choice is not None and choice.leaves not in tried:
        # The chosen domains of the narrowest level; turned down (room overcounts), the chosen
        # ones of each wider level, narrowest first: few blocks still beat the flat packer.
        for i in range(depth - 1, -1, -1):
            chosen = choice.levels[i]
            if i < depth - 1 and len(chosen) == 1:
                break  # one domain of this level: the tries below look at each such domain
            result = _plan_leaves(pods, capacity, need, flat, rooms.chain[i], chosen)
            if result is not None:
                return result
    for i in range(depth - 2, -1, -1):  # one block, one zone, ... (what the choice missed)
        level, groups = rooms.chain[i], domains(capacity, rooms.chain[i])
        for _, domain in rooms.holders(i, demand):
            if not _tries_left(capacity):
                return None
            within = _plan_within(pods, capacity, need, f"{level}\x00{domain}", groups[domain], flat)
            if not isinstance(within, Unfit):
                return within
            _spend_try(capacity)
    return None


def _plan_leaves(pods: Sequence[PodInfo], capacity: Capacity, need: int, flat: Planner, level: str,
                 leaves: Sequence[str]) -> dict[str, str] | None:
    """The packer on these domains' nodes together; None (a try spent) when it turns them down."""
    groups = domains(capacity, level)
    names = [n for d in leaves for n in groups[d]]
    scope = f"{level}\x00{'|'.join(leaves)}"
    result = _plan_within(pods, capacity, need, scope, names, flat)
    if len(leaves) > 1:
        capacity.drop_scope(scope)  # a union of domains is this gang's alone: not kept up to date
    if isinstance(result, Unfit):
        _spend_try(capacity)
        return None
    return result


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
        return (f"needs {amount_text(GPU, demand)} in its {noun} ({where}), where its released pods are; "
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
            f"needs {amount_text(GPU, demand)} in one {noun}; the largest free {noun} "
            f"({largest[1]}) has {format_amount(GPU, largest[0])}"
        )
    return f"needs {plural(need, 'pod')} in one {noun}; no {noun} has room for them all"
