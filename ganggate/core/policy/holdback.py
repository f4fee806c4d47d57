"""What a gang that has waited past the starvation limit holds back: the capacity it needs on
the nodes its plan would use (`hold_back`).

The hold, as Slurm's backfill reserves for its top job (slurm.schedmd.com/sched_config.html,
bf_* options): nodes are chosen by what is known of when they empty. A pod with
spec.activeDeadlineSeconds and a startTime ends by startTime + deadline (the kubelet kills it
then); a node's ready time is when enough of its pods have surely ended for the gang's pods
there to fit (unknown when one of them has no deadline). Nodes go by ready time; nodes of
unknown ready time (a blind hold) by the GPU-seconds the hold is expected to keep idle, each
pod expected to run on as long as it has run (`_expected_idle`); then by how few pods must
end, then by the most free GPU now. The held gang's earliest start is the
latest of its nodes' ready times; while it is known, a gang whose pods all carry deadlines
that end by then may use the held room (`Hold.admits`): it provably leaves before the held
gang could start. Without deadlines nothing may use held room.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ganggate.core.fit.resources import Resources, add_into, fits, gpus
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.domains import domains, free_gpus
from ganggate.core.placement.nodeindex import NodeIndex, sorted_in_steps
from ganggate.core.placement.packing import largest_first
from ganggate.core.placement.topology import gang_request, placed_domains
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.pods import PodInfo

INF = float("inf")

#: The least a pod of unknown end is expected to run on (a pod just started is not about to end).
MIN_RESIDUAL_SECONDS = 600.0


@dataclass
class Hold:
    """Room held back for one starving gang this round: what was taken from which node, and
    the earliest time the gang could start there (None: unknown, some pod that must end first
    has no deadline) and the pods it waits for (those whose end sets that time, latest first)."""

    taken: list[tuple[str, Resources]]
    ready_at: float | None
    waits_for: tuple[str, ...] = ()

    @property
    def nodes(self) -> int:
        return len({name for name, _ in self.taken})

    def admits(self, pods: Sequence[PodInfo], now: float) -> bool:
        """Whether a gang of these pods provably leaves before the held gang could start: its
        earliest start is known and every pod has a deadline that ends by then."""
        if self.ready_at is None or not pods:
            return False
        return all(p.deadline_seconds is not None and now + p.deadline_seconds <= self.ready_at for p in pods)

    def give_back(self, capacity: Capacity, sign: int = -1) -> None:
        """Give the held room back to `capacity` (sign=1 takes it again)."""
        for name, request in self.taken:
            capacity.take(name, request, sign)


def hold_back(pods: Sequence[PodInfo], capacity: Capacity, need: int, state: ClusterState,
              now: float = 0.0, sticky: frozenset[str] = frozenset()) -> Hold | int:
    """Hold capacity for a starving gang: the Hold made, or 0 (none held: several constraints,
    or nothing free anywhere that a younger gang could take from it) or -1 (none: the gang
    would not fit even on emptied nodes).

    Documented simplification: plan the gang on the room its nodes will have once enough of
    their running pods have finished, nodes chosen as the module says, and take the gang's
    whole request on them from this round's capacity. Later gangs may only use the rest (or
    the held room, when `Hold.admits` them); free capacity on the chosen nodes goes negative
    until enough running pods there finish. A gang that requires one domain of a topology
    level holds its room inside one domain: the one with the most free GPU where it would
    fit, or the one its released members are in. Nodes in `sticky` (the last hold's) go first
    among those of the same ready time: a hold does not move off a node it has half drained.
    """
    if pods and min(p.gpu for p in pods) > 0 and not _free_gpu_anywhere(capacity, pods[0]):
        return 0  # nothing free that a younger gang could take: holding protects nothing now
    required, _ = gang_request(pods)
    placed = placed_domains(pods, capacity, required) if required is not None else None
    if required is None or (len(pods) <= 1 and placed is None):
        return _hold(pods, capacity, need, state, None, now, sticky)
    if placed is not None:  # the rest of a gang with members placed: in their domain
        return _hold(pods, capacity, need, state, set(placed), now, sticky)
    eligible: set[str] | None = capacity.index(largest_first(pods)[0]).members
    groups = sorted(domains(capacity, required).items(), key=lambda g: (-free_gpus(capacity, g[1], eligible), g[0]))
    for _, names in groups:
        held = _hold(pods, capacity, need, state, set(names), now, sticky)
        if held != -1:
            return held
    return -1


def _free_gpu_anywhere(capacity: Capacity, pod: PodInfo) -> bool:
    """Some node the gang may use has a free GPU now (its index's top level is above 0)."""
    index = capacity.index(pod)
    return bool(index.levels) and index.levels[-1] > 0


@dataclass(frozen=True)
class _Occupant:
    """A pod that holds room on a node: when it surely ends (inf: unknown), and what it holds."""

    end: float
    request: Resources
    key: str
    started: float  # status.startTime (now for a pod not started): how long it has run so far


def _occupants(state: ClusterState, names: set[str], now: float) -> dict[str, list[_Occupant]]:
    """The pods holding room on the given nodes, by node: bound unfinished pods, and released
    pods not bound yet (promised: they bind by the promise's deadline, so with a deadline of
    their own they surely end by the two added up)."""
    out: dict[str, list[_Occupant]] = {}
    for pod in state.pods.values():
        if pod.node_name in names and not pod.terminated:
            out.setdefault(pod.node_name, []).append(
                _Occupant(surely_ends(pod, now), pod.request, pod.key, pod.started or now))
    for promise in state.promises.values():
        if promise.node in names:
            promised = state.pods.get(promise.pod_key)
            seconds = promised.deadline_seconds if promised is not None else None
            end = max(promise.deadline, now) + seconds if seconds is not None else INF
            out.setdefault(promise.node, []).append(_Occupant(end, promise.request, promise.pod_key, now))
    return out


def surely_ends(pod: PodInfo, now: float) -> float:
    """When the pod surely ends: now if it is being deleted, startTime + its deadline, else
    never (inf). A pod bound but not started yet (no startTime: the kubelet starts it within
    moments) counts from now; else, for that instant, its node would look unusable and the
    hold would move off the nodes it is draining."""
    if pod.terminating:
        return now
    if pod.deadline_seconds is not None and not pod.started:
        return now + pod.deadline_seconds
    ends = pod.ends_by
    return INF if ends is None else max(ends, now)


def _ready(pods: Sequence[PodInfo], free: Resources, occupants: list[_Occupant], now: float
           ) -> tuple[float, list[_Occupant]] | None:
    """When the node has room for all of `pods` (the earliest-ending occupants leave first;
    among those of unknown end, the youngest), and the occupants that must end for it; None
    when it never has, even emptied."""
    room = dict(free)
    need: Resources = {}
    for pod in pods:
        add_into(need, pod.request)
    gone: list[_Occupant] = []
    for occupant in sorted(occupants, key=_leave_order):
        if fits(need, room):
            break
        add_into(room, occupant.request)
        gone.append(occupant)
    if not fits(need, room):
        return None
    return max((o.end for o in gone), default=now), gone




def _expected_idle(gone: list[_Occupant], free_gpus: float, now: float) -> float:
    """GPU-seconds a blind hold on the node is expected to keep idle before the gang can start:
    each GPU that frees (and the free ones it holds now) idles until the last pod that must end
    has ended. A pod of unknown end is expected to run on for as long as it has run so far:
    GPU run times are heavy-tailed, so the service a job has attained predicts what it will
    need (Tiresias, NSDI'19, schedules on attained service for that reason). A node whose GPUs
    are all held by one pod costs nothing until it ends; one with free GPUs behind a pod that
    has run for days costs them for days."""
    last, rest = _idle_parts(gone, now)
    return free_gpus * last + rest


def _idle_parts(gone: Sequence[_Occupant], now: float) -> tuple[float, float]:
    """_expected_idle's parts that do not depend on the free GPUs: the time until the last of
    `gone` ends (expected, for one of unknown end), and the GPU-seconds their own GPUs idle until then."""
    remaining = [(o.end - now if o.end != INF else expected_remaining(o.started, now), o) for o in gone]
    last = max((r for r, _ in remaining), default=0.0)
    return last, sum(gpus(o.request) * (last - r) for r, o in remaining)


def expected_remaining(started: float, now: float) -> float:
    """How much longer a pod of unknown end, started at `started`, is expected to run: as long
    again as it has run so far, at least MIN_RESIDUAL_SECONDS (see _expected_idle)."""
    return max(now - started, MIN_RESIDUAL_SECONDS)


#: A node's place in a hold's choice: (ready time, not held last, expected idle if blind, pods
#: that must end, most free GPU, name); see _HoldMemo.rank.
_Rank = tuple[float, bool, float, int, float, str]


@dataclass
class _Ranking:
    """The nodes one shape of hold may use, in the order a hold takes them, as of
    `Capacity.changed[:mark]`."""

    names: Collection[str]
    mark: int
    entries: dict[str, _Rank]
    order: list[_Rank]


class _HoldMemo:
    """What the holds of one round read, worked out once per round instead of once per starving
    gang (each of thousands of them looked over every node and every pod): the occupants of
    every node, from one pass over the pods, each node's in the order _ready takes them; and per
    (node index, first pod's request, sticky nodes, domain) the nodes ranked, brought up to date
    at each use by ranking again only the nodes a take changed since (`Capacity.changed`).
    The same ranks in the same order as ranking every node each time: a rank reads only the
    node's free room, its occupants, the pod and `now`. Kept in `Capacity.memo`, which
    start_round, rewind and set_free empty; valid for one state (its version) and one `now`."""

    KEY = "holdback.hold_back"

    def __init__(self, state: ClusterState, now: float) -> None:
        self.seen = (id(state), state.version, now)
        self.now = now
        occupants = _occupants(state, set(state.nodes), now)
        for found in occupants.values():
            found.sort(key=_leave_order)  # (stable: _ready's own sort then keeps this order)
        self.occupants = occupants
        self.rankings: dict[tuple[object, ...], _Ranking] = {}
        self.profiles: dict[str, _Leaving] = {}

    @classmethod
    def of(cls, capacity: Capacity, state: ClusterState, now: float) -> _HoldMemo:
        memo = capacity.memo.get(cls.KEY)
        if not isinstance(memo, cls) or memo.seen != (id(state), state.version, now):
            memo = capacity.memo[cls.KEY] = cls(state, now)
        return memo

    def rank(self, name: str, asked: Sequence[tuple[str, int]], want: int, capacity: Capacity,
             sticky: frozenset[str]) -> _Rank | None:
        """The node's place in the hold's choice for a pod asking `asked` (its positive amounts)
        of which `want` GPU: what _ready and _expected_idle make of it, from the node's _Leaving;
        None when it never has room."""
        leaving = self.profiles.get(name)
        if leaving is None:
            leaving = self.profiles[name] = _Leaving(self.occupants.get(name, []), self.now)
        gone = leaving.gone_for(asked, capacity.free[name])
        if gone is None:
            return None
        ready = leaving.ready[gone]
        free_gpu = max(0.0, capacity.level[name])  # (level is gpus(free), kept by every take)
        blind = leaving.idle(gone, min(free_gpu, want)) if ready == INF else 0.0
        return (ready, name not in sticky, blind, gone, -free_gpu, name)

    def ranked(self, capacity: Capacity, index: NodeIndex, first: PodInfo, sticky: frozenset[str],
               within: frozenset[str] | None) -> list[_Rank]:
        """The nodes of `index` (within `within`) where a pod like `first` may ever fit, in hold
        order: sorted ranks."""
        key = (id(index), tuple(sorted(first.request.items())), sticky, within)
        want = gpus(first.request)
        asked = [(resource, amount) for resource, amount in first.request.items() if amount > 0]
        changed = capacity.changed
        ranking = self.rankings.get(key)
        if ranking is None:
            names: Collection[str] = index.members if within is None else {n for n in index.members if n in within}
            entries = {}
            for name in names:
                found = self.rank(name, asked, want, capacity, sticky)
                if found is not None:
                    entries[name] = found
            ranking = self.rankings[key] = _Ranking(names, len(changed), entries,
                                                          sorted_in_steps(entries.values()))
        elif ranking.mark < len(changed):
            entries, order, names = ranking.entries, ranking.order, ranking.names
            for name in {name for name, _ in changed[ranking.mark:]}:
                if name not in names:
                    continue
                new, old = self.rank(name, asked, want, capacity, sticky), entries.get(name)
                if new == old:
                    continue
                if old is not None:
                    del order[bisect.bisect_left(order, old)]
                    del entries[name]
                if new is not None:
                    bisect.insort(order, new)
                    entries[name] = new
            ranking.mark = len(changed)
        return ranking.order


class _Leaving:
    """A node's occupants leaving in _ready's order, worked out once per round: after the first
    k have left, the room they free (`freed[k]`, added to the node's free room), the time the
    node is ready (`ready[k]`: the latest of their ends, now for none), and for a blind hold the
    GPU-seconds expected idle (`idle`, as _expected_idle). Reads the occupants and `now` alone,
    not the node's free room, which takes change."""

    def __init__(self, occupants: list[_Occupant], now: float) -> None:
        self.occupants, self.now = occupants, now
        freed: list[Resources] = [{}]
        ready = [now]
        room: Resources = {}
        latest = -INF
        for occupant in occupants:
            add_into(room, occupant.request)
            freed.append(dict(room))
            latest = max(latest, occupant.end)  # (the latest end of those gone: _ready's max)
            ready.append(latest)
        self.freed, self.ready = freed, ready
        self._idle: dict[int, tuple[float, float]] = {}
        # No negative request (none is valid): then each resource's freed room only grows with k.
        self._growing = all(amount >= 0 for occupant in occupants for amount in occupant.request.values())
        self._by_resource: dict[str, list[int]] = {}

    def gone_for(self, asked: Sequence[tuple[str, int]], free: Mapping[str, int]) -> int | None:
        """The fewest occupants that must leave, in leave order, for a pod asking `asked` to fit
        beside `free` (None: never), as _ready finds it. Each resource's room freed after k leave
        only grows with k, so the k from which the pod fits is the largest of the first k from
        which each resource fits: a bisect per resource."""
        if not self._growing:  # (one step at a time, as _ready)
            for gone, extra in enumerate(self.freed):
                if all(amount <= free.get(resource, 0) + extra.get(resource, 0) for resource, amount in asked):
                    return gone
            return None
        gone = 0
        for resource, amount in asked:
            freed = self._by_resource.get(resource)
            if freed is None:
                freed = self._by_resource[resource] = [extra.get(resource, 0) for extra in self.freed]
            gone = max(gone, bisect.bisect_left(freed, amount - free.get(resource, 0)))
        return gone if gone < len(self.freed) else None

    def idle(self, gone: int, free_gpus: float) -> float:
        """_expected_idle(the first `gone` occupants, free_gpus, now), its free-GPU-independent
        part kept: the same sum in the same order, so the same float."""
        parts = self._idle.get(gone)
        if parts is None:
            parts = self._idle[gone] = _idle_parts(self.occupants[:gone], self.now)
        last, rest = parts
        return free_gpus * last + rest


def _leave_order(occupant: _Occupant) -> tuple[float, float]:
    """The order _ready sees occupants leave: earliest end first; among those of unknown end, the youngest."""
    return (occupant.end, -occupant.started)


def _hold(pods: Sequence[PodInfo], capacity: Capacity, need: int, state: ClusterState, within: set[str] | None,
          now: float, sticky: frozenset[str] = frozenset()) -> Hold | int:
    """hold_back on the given nodes only (None: all)."""
    order = largest_first(pods)
    index = capacity.index(order[0])
    if any(p.constraint_key != order[0].constraint_key for p in order):
        return 0  # several constraints: keep it simple, no hold
    # Every node the gang may use: one whose room is partly promised to a released pod not yet
    # bound counts too (that pod's end is known when it has a deadline: _occupants).
    memo = _HoldMemo.of(capacity, state, now)
    running = memo.occupants
    ranked = memo.ranked(capacity, index, order[0], sticky, None if within is None else frozenset(within))
    plan: list[tuple[str, PodInfo]] = []
    remaining = order
    ready_at: float = now
    waits: list[tuple[float, str]] = []
    for *_, name in ranked:
        if len(plan) >= need or not remaining:
            break
        room = dict(capacity.free[name])
        for occupant in running.get(name, []):
            add_into(room, occupant.request)
        mine: list[PodInfo] = []
        left: list[PodInfo] = []
        for pod in remaining:
            if len(plan) + len(mine) < need and fits(pod.request, room):
                add_into(room, pod.request, -1)
                mine.append(pod)
            else:
                left.append(pod)
        if not mine:
            continue
        remaining = left
        plan.extend((name, pod) for pod in mine)
        when, gone = _ready(mine, capacity.free[name], running.get(name, []), now) or (INF, [])
        ready_at = max(ready_at, when)
        waits.extend((o.end, o.key) for o in gone)
    if len(plan) < need:
        return -1
    taken = []
    for name, pod in plan:
        capacity.take(name, pod.request)
        taken.append((name, pod.request))
    if ready_at == INF:
        return Hold(taken, None)
    return Hold(taken, ready_at, tuple(key for _, key in sorted(waits, reverse=True)[:3]))
