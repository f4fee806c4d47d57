"""Gang-aware preemption: which whole lower-priority gangs a waiting gang may evict to fit.

For the highest-priority complete gang that fits nowhere (and may preempt: no pod of it says
`preemptionPolicy: Never`), the candidates are running or released gangs of strictly lower
priority, whole (every live pod), and, only when the options allow, ordinary pods of lower
priority and pods without an owning controller. As Kueue's minimal preemption does
(pkg/scheduler/preemption), candidates are taken in cost order, lowest priority, then fewest
GPUs, then youngest, until the gang's plan fits on the capacity they leave; then each chosen
one, costliest first, is dropped again if the gang still fits without it. Never a part of a
gang; never for a gang that would fit by waiting for pods already terminating. Pure: no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from ganggate.core.fit.resources import GPU, Resources, format_amount, gpus
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.explain import plural
from ganggate.core.placement.packing import fits_as_planned
from ganggate.core.policy.contention import Rivals, find_rivals, place_uncontested
from ganggate.core.policy.ordering import release_candidates, round_key
from ganggate.core.policy.reservation import Reservation, active_reservations, hold
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.outcome import Unfit, Waiting
from ganggate.core.state.pods import PodInfo

#: Owners whose pods come straight back where they were: evicting them frees nothing.
_RETURNING_OWNERS = ("DaemonSet", "Node")


@dataclass(frozen=True)
class PreemptionOptions:
    """What may be preempted beyond whole gangs with owning controllers."""

    bare_pods: bool = False  # pods without an owning controller (nothing recreates them)
    ordinary_pods: bool = False  # bound pods that belong to no gang
    max_preemptors: int = 8  # waiting gangs tried per round, highest priority first


@dataclass
class Victim:
    """One unit that is preempted whole: a gang (every live pod), or one ordinary pod."""

    name: str  # "ns/gang", or "pod ns/name" for an ordinary pod
    gang_key: GangKey | None
    priority: int
    gpus: int  # milli-GPUs of its live pods
    created: float
    pods: list[PodInfo]
    freed: list[tuple[str, Resources]] = field(default_factory=list)  # (node, request) it gives back
    # freed by request: (request, [(node, pods of that request there)]), for Capacity.take_each
    _by_request: list[tuple[Resources, list[tuple[str, int]]]] | None = field(default=None, repr=False,
                                                                               compare=False)

    def by_request(self) -> list[tuple[Resources, list[tuple[str, int]]]]:
        """`freed` grouped by request, then node (worked out once: a VictimMemo keeps the Victim)."""
        if self._by_request is None:
            groups: dict[tuple[tuple[str, int], ...], tuple[Resources, dict[str, int]]] = {}
            for node, request in self.freed:
                key = tuple(sorted(request.items()))
                group = groups.get(key)
                if group is None:
                    group = groups[key] = (request, {})
                group[1][node] = group[1].get(node, 0) + 1
            self._by_request = [(request, list(nodes.items())) for request, nodes in groups.values()]
        return self._by_request

    @property
    def cost(self) -> tuple[int, int, float, str]:
        """Lowest priority first, then fewest GPUs, then youngest."""
        return (self.priority, self.gpus, -self.created, self.name)


@dataclass
class PreemptionPlan:
    """Evict these victims whole; the preemptor then goes where `placement` says."""

    preemptor: GangKey
    priority: int
    victims: list[Victim]
    placement: dict[str, str]
    message: str


@dataclass
class NoPreemption:
    """Why a waiting gang preempts nothing this round."""

    gang_key: GangKey
    reason: str


def never_preempts(gang: Gang) -> bool:
    """A pod of the gang has preemptionPolicy Never (from its PriorityClass, at admission)."""
    return any(p.preemption_policy == "Never" for p in gang.live_pods())


def plan_preemption(
    state: ClusterState,
    waitings: Sequence[Waiting],
    now: float,
    options: PreemptionOptions = PreemptionOptions(),
    busy: Collection[str] = (),
    base: Capacity | None = None,
    memo: VictimMemo | None = None,
) -> tuple[PreemptionPlan | None, list[NoPreemption]]:
    """At most one preemption for this round, for the first waiting gang (in round order) for
    which one helps; and why the gangs tried before it preempt nothing.

    `waitings` are the round's (from `decide`, after its decisions were promised); `busy`
    names gangs ("ns/name") and pods ("pod ns/name") being preempted or preempting right now.
    `base`: the cluster's free capacity kept between rounds and up to date (core.incremental's),
    used and given back instead of building one from the whole state; None builds one.
    `memo`: the gangs' Victims kept between searches (VictimMemo); None builds them all.
    """
    lowest = state.tallies.lowest_preemptible_priority()  # kept by the events: no walk over the gangs
    if not options.ordinary_pods and lowest is None:
        return None, []  # no gang runs: nothing to preempt, nothing to say
    reservations = active_reservations(state, now)
    busy_names = set(busy) | {v for r in reservations.values() for v in r.victims}
    # A gang of priority no higher than every running gang's preempts nothing and says nothing;
    # round order puts every gang above it first, so leaving it out changes no gang's turn. The
    # state keeps its waiting gangs by priority: those above the lowest are read, not every one.
    if options.ordinary_pods or lowest is None:
        unfit = {w.gang_key for w in waitings if w.event_reason == "GangUnschedulable"}
        gangs = [g for k in unfit if (g := state.gangs.get(k)) is not None and g.state == "waiting"]
    else:
        above = state.tallies.waiting_above(lowest)
        why = dict(zip(map(attrgetter("gang_key"), waitings), map(attrgetter("event_reason"), waitings),
                       strict=True)) if above else {}
        gangs = [state.gangs[k] for k in above if why.get(k) == "GangUnschedulable"]
    reasons: list[NoPreemption] = []
    rivals = find_rivals(state) if gangs else []
    for gang in heapq.nsmallest(options.max_preemptors, gangs, key=round_key):  # round_order's first few
        name = f"{gang.key[0]}/{gang.key[1]}"
        if gang.key in reservations or name in busy_names:
            continue  # one preemption in flight per preemptor
        if never_preempts(gang):
            reasons.append(NoPreemption(gang.key, "its preemptionPolicy is Never"))
            continue
        capacity = _base_capacity(state, reservations, base)
        try:
            result = _plan_for(gang, state, capacity, rivals, options, busy_names, memo)
        finally:
            if base is not None:
                base.rewind()  # the kept capacity is the cluster's again
        if isinstance(result, PreemptionPlan):
            return result, reasons
        reasons.append(NoPreemption(gang.key, result))
    return None, reasons


def _base_capacity(state: ClusterState, reservations: Mapping[GangKey, Reservation],
                   base: Capacity | None = None) -> Capacity:
    """The cluster's free capacity less the reservations: `base` (a Capacity kept up to date
    with the state, core.incremental), every take from now on undone by its rewind(); else one
    built from the whole state."""
    if base is not None:
        base.start_round()
        capacity = base
    else:
        capacity = Capacity.from_state(state)
    for reservation in reservations.values():
        hold(capacity, state, reservation)
    return capacity


def _plan_for(gang: Gang, state: ClusterState, capacity: Capacity, rivals: Rivals,
              options: PreemptionOptions, busy: Collection[str], memo: VictimMemo | None = None) -> PreemptionPlan | str:
    """A plan for one gang, or why none helps."""
    assert gang.spec is not None
    pods = release_candidates(gang)
    need = min(gang.spec.min_available, len(pods))
    if _fits(pods, capacity, need, rivals):
        return "it fits without preempting once room held back for other gangs is free"
    leaving = list(state.terminating.values())
    if leaving:
        _free(capacity, [(p.node_name or "", p.request) for p in leaving], 1)
        fits_then = _fits(pods, capacity, need, rivals)
        _free(capacity, [(p.node_name or "", p.request) for p in leaving], -1)
        if fits_then:
            return f"it fits once {plural(len(leaving), 'terminating pod')} finish"
    nodes: set[str] = set()
    for constraint in {p.constraint_key: p for p in pods}.values():
        nodes |= capacity.index(constraint).members
    candidates = sorted(victims_for(state, gang.priority, nodes, options, busy, memo), key=lambda v: v.cost)
    if not candidates:
        return f"no whole gang of priority below {gang.priority} runs on the nodes it may use"
    chosen: list[Victim] = []
    for victim in candidates:
        _free_victim(capacity, victim, 1)
        chosen.append(victim)
        if _fits(pods, capacity, need, rivals):
            break
    else:
        return (f"evicting all {plural(len(candidates), 'candidate')} of lower priority would still "
                f"not make room")
    dropped: set[int] = set()
    for victim in sorted(chosen, key=lambda v: v.cost, reverse=True):  # prune, costliest first
        _free_victim(capacity, victim, -1)
        if _fits(pods, capacity, need, rivals):
            dropped.add(id(victim))  # (by identity: comparing Victims compares their pods)
        else:
            _free_victim(capacity, victim, 1)
    chosen = [v for v in chosen if id(v) not in dropped]
    placement, _ = place_uncontested(pods, capacity, need, rivals)
    assert not isinstance(placement, Unfit)
    chosen.sort(key=lambda v: v.cost)
    return PreemptionPlan(gang.key, gang.priority, chosen, dict(placement), plan_message(gang, chosen, placement))


class VictimMemo:
    """Each gang's Victim (or None: it is being torn down, or has pods nothing would recreate)
    kept between searches while the gang's pods (Gang.changes), the node layout and the options
    are as they were: building them reads every pod of every running gang (a few hundred ms at
    100,000 pods). A gang with a live pod not bound yet is not kept (its room is a promise's)."""

    def __init__(self) -> None:
        self._kept: dict[GangKey, tuple[Gang, int, int, bool, Victim | None, frozenset[str]]] = {}

    def victim(self, gang: Gang, state: ClusterState, options: PreemptionOptions) -> tuple[Victim | None, frozenset[str]]:
        """The gang's Victim and the nodes it frees room on, as victims_for would build them."""
        kept = self._kept.get(gang.key)
        if (kept is not None and kept[0] is gang and kept[1] == gang.changes and kept[2] == state.layout_version
                and kept[3] == options.bare_pods):
            return kept[4], kept[5]
        victim = _gang_victim(gang, state, options)
        nodes = frozenset(node for node, _ in victim.freed) if victim is not None else frozenset()
        if victim is None or all(p.node_name for p in victim.pods):
            self._kept[gang.key] = (gang, gang.changes, state.layout_version, options.bare_pods, victim, nodes)
        else:
            self._kept.pop(gang.key, None)
        return victim, nodes

    def forget_gone(self, state: ClusterState) -> None:
        """Drop what is kept for gangs no longer in the state."""
        for key in [k for k in self._kept if k not in state.gangs]:
            del self._kept[key]


def _gang_victim(gang: Gang, state: ClusterState, options: PreemptionOptions) -> Victim | None:
    """The gang as a victim (every live pod); None when it is being torn down, or when it has a
    pod without an owning controller and bare pods may not be preempted."""
    if any(p.terminating and not p.terminated for p in gang.pods.values()):
        return None  # already being torn down
    live = gang.live_pods()
    if not options.bare_pods and not all(p.owned for p in live):
        return None
    return _victim(f"{gang.key[0]}/{gang.key[1]}", gang.key, gang.priority, gang.created, live, state)


def victims_for(state: ClusterState, priority: int, nodes: Collection[str], options: PreemptionOptions,
                busy: Collection[str] = (), memo: VictimMemo | None = None) -> list[Victim]:
    """Everything a gang of `priority` may preempt that frees room on `nodes` (`memo`: the
    gangs' Victims kept from the last search)."""
    out: list[Victim] = []
    memo = memo if memo is not None else VictimMemo()
    wanted = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    for gang in state.gangs.values():
        if gang.state not in ("running", "released") or gang.priority >= priority:
            continue
        if busy and f"{gang.key[0]}/{gang.key[1]}" in busy:
            continue
        victim, freed_on = memo.victim(gang, state, options)
        if victim is not None and not wanted.isdisjoint(freed_on):
            out.append(victim)
    if options.ordinary_pods:
        for pod in state.pods.values():
            name = f"pod {pod.key}"
            if (pod.gang is not None or not pod.node_name or pod.terminated or pod.terminating
                    or pod.priority >= priority or pod.node_name not in nodes or name in busy
                    or _returns(pod) or not (pod.owned or options.bare_pods)):
                continue
            out.append(_victim(name, None, pod.priority, pod.created, [pod], state))
    return out


def _victim(name: str, key: GangKey | None, priority: int, created: float, pods: list[PodInfo],
            state: ClusterState) -> Victim:
    freed: list[tuple[str, Resources]] = []
    for pod in pods:
        promise = state.promises.get(pod.key)
        node = pod.node_name or (promise.node if promise is not None else None)
        if node is not None and node in state.nodes:
            freed.append((node, pod.request))
    return Victim(name, key, priority, sum(gpus(p.request) for p in pods), created, list(pods), freed)


def _returns(pod: PodInfo) -> bool:
    """Owned by a DaemonSet or a Node (a static pod): it comes back where it was."""
    return pod.controller_ref is not None and pod.controller_ref.get("kind") in _RETURNING_OWNERS


def _free(capacity: Capacity, freed: Sequence[tuple[str, Resources]], sign: int) -> None:
    for node, request in freed:
        if node in capacity.free:
            capacity.take(node, request, -sign)


def _free_victim(capacity: Capacity, victim: Victim, sign: int) -> None:
    """_free(capacity, victim.freed, sign), each node re-filed once per request (Capacity.take_each):
    the same room, in fewer steps (the search frees and takes back hundreds of victims)."""
    free = capacity.free
    for request, spots in victim.by_request():
        capacity.take_each(request, [(node, -sign * count) for node, count in spots if node in free])


def _fits(pods: Sequence[PodInfo], capacity: Capacity, need: int, rivals: Rivals) -> bool:
    """Whether the gang's plan fits now (nothing stays taken from capacity)."""
    if not _may_fit(pods, capacity, need):
        return False
    if not rivals and (told := fits_as_planned(pods, capacity, need)) is not None:
        return told  # (place_uncontested without rivals is plan_gang: its answer, nothing taken and given back)
    result, _ = place_uncontested(pods, capacity, need, rivals)
    if isinstance(result, Unfit):
        return False
    by_key = {p.key: p for p in pods}
    for key, node in result.items():
        capacity.take(node, by_key[key].request, -1)
    return True


def _may_fit(pods: Sequence[PodInfo], capacity: Capacity, need: int) -> bool:
    """False when the gang cannot fit, by a count alone: its pods all of one constraint and one
    GPU amount, and fewer than `need` such pods fit by free GPUs on the nodes they may use
    (NodeIndex.room_for, an upper bound). The search adds victims one at a time and asks after
    each whether the gang fits: most answers are this cheap no, not a packing."""
    first = pods[0] if pods else None
    if first is None or first.gpu <= 0 or any(p.gpu != first.gpu or p.constraint_key != first.constraint_key
                                              for p in pods):
        return True
    return capacity.index(first).room_for(first.gpu) >= need


def plan_message(gang: Gang, victims: Sequence[Victim], placement: Mapping[str, str]) -> str:
    """What the preemptor's `Preempting` Event says."""
    parts = [f"{v.name} ({plural(len(v.pods), 'pod')}, {format_amount(GPU, v.gpus)} GPU, priority {v.priority})"
             for v in victims]
    return (f"preempting {plural(len(victims), 'victim')} of lower priority: {'; '.join(parts)}; "
            f"to place {plural(len(placement), 'pod')} of priority {gang.priority} on "
            f"{plural(len(set(placement.values())), 'node')}")
