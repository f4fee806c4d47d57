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

from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Sequence

from ganggate.core.placement.capacity import Capacity
from ganggate.core.state.cluster import ClusterState
from ganggate.core.policy.contention import Rivals, find_rivals, place_uncontested
from ganggate.core.placement.explain import plural
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.policy.ordering import release_candidates, round_order
from ganggate.core.state.outcome import Unfit, Waiting
from ganggate.core.state.pods import PodInfo
from ganggate.core.policy.reservation import Reservation, active_reservations, hold
from ganggate.core.fit.resources import GPU, Resources, format_amount, gpus

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
    waitings: Iterable[Waiting],
    now: float,
    options: PreemptionOptions = PreemptionOptions(),
    busy: Collection[str] = (),
) -> tuple[PreemptionPlan | None, list[NoPreemption]]:
    """At most one preemption for this round, for the first waiting gang (in round order) for
    which one helps; and why the gangs tried before it preempt nothing.

    `waitings` are the round's (from `decide`, after its decisions were promised); `busy`
    names gangs ("ns/name") and pods ("pod ns/name") being preempted or preempting right now.
    """
    reservations = active_reservations(state, now)
    busy_names = set(busy) | {v for r in reservations.values() for v in r.victims}
    unfit = {w.gang_key for w in waitings if w.event_reason == "GangUnschedulable"}
    gangs = [g for k in unfit if (g := state.gangs.get(k)) is not None and g.state == "waiting"]
    reasons: list[NoPreemption] = []
    rivals = find_rivals(state)
    for gang in round_order(gangs)[: options.max_preemptors]:
        name = f"{gang.key[0]}/{gang.key[1]}"
        if gang.key in reservations or name in busy_names:
            continue  # one preemption in flight per preemptor
        if not options.ordinary_pods and not any(
                g.priority < gang.priority and g.state in ("running", "released") for g in state.gangs.values()):
            continue  # nothing it could preempt: say nothing
        if never_preempts(gang):
            reasons.append(NoPreemption(gang.key, "its preemptionPolicy is Never"))
            continue
        capacity = _base_capacity(state, reservations)
        result = _plan_for(gang, state, capacity, rivals, options, busy_names)
        if isinstance(result, PreemptionPlan):
            return result, reasons
        reasons.append(NoPreemption(gang.key, result))
    return None, reasons


def _base_capacity(state: ClusterState, reservations: Mapping[GangKey, Reservation]) -> Capacity:
    capacity = Capacity.from_state(state)
    for reservation in reservations.values():
        hold(capacity, state, reservation)
    return capacity


def _plan_for(gang: Gang, state: ClusterState, capacity: Capacity, rivals: Rivals,
              options: PreemptionOptions, busy: Collection[str]) -> PreemptionPlan | str:
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
    candidates = sorted(victims_for(state, gang.priority, nodes, options, busy), key=lambda v: v.cost)
    if not candidates:
        return f"no whole gang of priority below {gang.priority} runs on the nodes it may use"
    chosen: list[Victim] = []
    for victim in candidates:
        _free(capacity, victim.freed, 1)
        chosen.append(victim)
        if _fits(pods, capacity, need, rivals):
            break
    else:
        return (f"evicting all {plural(len(candidates), 'candidate')} of lower priority would still "
                f"not make room")
    for victim in sorted(chosen, key=lambda v: v.cost, reverse=True):  # prune, costliest first
        _free(capacity, victim.freed, -1)
        if _fits(pods, capacity, need, rivals):
            chosen.remove(victim)
        else:
            _free(capacity, victim.freed, 1)
    placement, _ = place_uncontested(pods, capacity, need, rivals)
    assert not isinstance(placement, Unfit)
    chosen.sort(key=lambda v: v.cost)
    return PreemptionPlan(gang.key, gang.priority, chosen, dict(placement), plan_message(gang, chosen, placement))


def victims_for(state: ClusterState, priority: int, nodes: Collection[str], options: PreemptionOptions,
                busy: Collection[str] = ()) -> list[Victim]:
    """Everything a gang of `priority` may preempt that frees room on `nodes`."""
    out: list[Victim] = []
    for gang in state.gangs.values():
        name = f"{gang.key[0]}/{gang.key[1]}"
        if gang.state not in ("running", "released") or gang.priority >= priority or name in busy:
            continue
        if any(p.terminating and not p.terminated for p in gang.pods.values()):
            continue  # already being torn down
        live = gang.live_pods()
        if not options.bare_pods and not all(p.owned for p in live):
            continue
        victim = _victim(name, gang.key, gang.priority, gang.created, live, state)
        if any(node in nodes for node, _ in victim.freed):
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


def _fits(pods: Sequence[PodInfo], capacity: Capacity, need: int, rivals: Rivals) -> bool:
    """Whether the gang's plan fits now (nothing stays taken from capacity)."""
    result, _ = place_uncontested(pods, capacity, need, rivals)
    if isinstance(result, Unfit):
        return False
    by_key = {p.key: p for p in pods}
    for key, node in result.items():
        capacity.take(node, by_key[key].request, -1)
    return True


def plan_message(gang: Gang, victims: Sequence[Victim], placement: Mapping[str, str]) -> str:
    """What the preemptor's `Preempting` Event says."""
    parts = [f"{v.name} ({plural(len(v.pods), 'pod')}, {format_amount(GPU, v.gpus)} GPU, priority {v.priority})"
             for v in victims]
    return (f"preempting {plural(len(victims), 'victim')} of lower priority: {'; '.join(parts)}; "
            f"to place {plural(len(placement), 'pod')} of priority {gang.priority} on "
            f"{plural(len(set(placement.values())), 'node')}")
