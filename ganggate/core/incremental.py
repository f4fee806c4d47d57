"""Incremental rounds: re-plan only the gangs whose pods or candidate nodes changed.

`IncrementalRounds.decide` returns what `planner.decide` returns on the same state, doing less:
it keeps one `Capacity` between rounds (its per-constraint node indexes too), brings the
nodes the watch changed up to date (`ClusterState.dirty_nodes`), and reuses a gang's last
`Waiting` instead of planning it again when nothing its plan reads can have changed.

Why a reused answer is the same answer. A gang's turn in a round (`planner.plan_one`) is a
pure function of: its pods; the free capacity, at its turn, of the nodes it may use (the
only nodes the packer, the contention check and the messages look at); the round's rivals,
reservations and terminating pods; and `now`, only through starvation. So a gang's last
`Waiting` is reused only when all of these are unchanged:
  - its pods and promises (it is not in `ClusterState.dirty_gangs`);
  - its state is "waiting" and it is not starving (a starving or partial gang holds capacity
    back and says for how long it waited: always re-planned), and it has no reservation;
  - no node it may use changed: not by the watch since the last round, not by any take of
    the last round (at its turn the others may have taken from them then), and not by a
    take of this round before its turn (a gang planned earlier this round that took room);
  - the round's context: rivals, terminating pods, starvation limit, node layout.
Anything else makes it plan the gang as a full round would. A gang that waited last round on
nodes that only lost capacity since would still not fit if it is of one shape (its room, the
sum of per-node slots, cannot have grown) but its message (how much room is left) would be
stale, and a gang of several shapes or one kept out by contention is packed greedily, where
less room can change the choices: so "lost capacity" is treated as "changed" too.

A full round (every gang planned, the Capacity rebuilt) runs after a relist, a change of the
node layout (`ClusterState.layout_version`) or of the round's context, and whenever a part
this module does not track is in play: topology levels or a gang topology annotation, GPU
cards, preemption reservations, the count policy. Only one `IncrementalRounds` may read a
given ClusterState: it takes the dirty sets. Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Mapping

from ganggate.core.capacity import Capacity, NodeIndex
from ganggate.core.cluster import ClusterState
from ganggate.core.contention import find_rivals
from ganggate.core.gangs import Gang, GangKey
from ganggate.core.ordering import release_candidates
from ganggate.core.outcome import Decision, Waiting
from ganggate.core.planner import decide, plan_one, releasable
from ganggate.core.reservation import PREEMPTION_ANNOTATION

READY_STATES = ("waiting", "partial", "started")


@dataclass
class _Kept:
    """A gang's last Waiting, and the node indexes (the nodes its pods may use) it read; or, for
    a gang with nothing to release or a release in flight (planner.releasable), None and no
    indexes: that answer reads no capacity, and stands until the gang's pods or promises change."""

    waiting: Waiting | None
    indexes: tuple[NodeIndex, ...]


def _order_key(gang: Gang) -> tuple:
    """The planner's round order: roll-forwards (partial) first, then priority, age, key."""
    return (gang.state != "partial", -gang.priority, gang.created, gang.key)


def _same(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Equal resource maps, a missing entry being zero."""
    return all(a.get(k, 0) == v for k, v in b.items()) and all(b.get(k, 0) == v for k, v in a.items())


def _changed(indexes: tuple[NodeIndex, ...], hit: Mapping[int, bool]) -> bool:
    for index in indexes:
        if hit.get(id(index), True):
            return True
    return False


def _preempting(gang: Gang) -> bool:
    return any(PREEMPTION_ANNOTATION in ((p.raw.get("metadata") or {}).get("annotations") or {})
               for p in gang.pods.values())


class IncrementalRounds:
    """decide() kept between rounds (see the module docstring). full_rounds, incremental_rounds
    and turns (gangs given a turn, i.e. planned, in the last round) say what it did, for tests and benchmarks."""

    def __init__(self) -> None:
        self.capacity: Capacity | None = None
        self._layout = -1
        self._context: tuple | None = None
        self._kept: dict[GangKey, _Kept] = {}
        self._by_index: dict[int, set[GangKey]] = {}  # id(NodeIndex) -> gangs kept on it
        self._indexes: dict[int, NodeIndex] = {}
        self._changed_last: set[str] = set()  # nodes any take of the last round changed
        self._preempting: set[GangKey] = set()
        self.full_rounds = 0
        self.incremental_rounds = 0
        self.turns = 0

    def decide(self, state: ClusterState, now: float, *, starvation_seconds: float = 300.0
               ) -> tuple[list[Decision], list[Waiting]]:
        """The round `planner.decide(state, now, starvation_seconds=...)` would return."""
        dirty_nodes, dirty_gangs = state.dirty_nodes, state.dirty_gangs
        state.dirty_nodes, state.dirty_gangs = set(), set()
        full = self.capacity is None or self._layout != state.layout_version
        for key in dirty_gangs:
            gang = state.gangs.get(key)
            if gang is None:
                self._drop(key)  # gone: forget its answer
            if gang is not None and _preempting(gang):
                self._preempting.add(key)
            else:
                self._preempting.discard(key)
        if full:
            self._preempting = {key for key, gang in state.gangs.items() if _preempting(gang)}
        waiting: list[Waiting] = []
        ready: list[Gang] = []
        for gang in state.gangs.values():
            if gang.state == "conflict":
                waiting.append(Waiting(gang.key, "GangConflict", gang.conflict or "pods disagree"))
            elif gang.state == "incomplete":
                waiting.append(Waiting(gang.key, "GangWaiting", gang.waiting_message()))
            elif gang.state in READY_STATES:
                ready.append(gang)
        rivals = find_rivals(state)
        context = (
            starvation_seconds,
            tuple((r.constraint_key, tuple(sorted(r.request.items())), tuple(keys)) for r, keys in rivals),
            tuple(sorted(state.terminating)),
        )
        untracked = state.topology_levels or self._preempting or any(
            g.spec is not None and (g.spec.topology_required or g.spec.topology_preferred) for g in ready)
        if untracked:
            self._forget()
            self.full_rounds += 1
            self.turns = len(ready)
            return decide(state, now, starvation_seconds=starvation_seconds)
        if full or context != self._context:
            self._forget()
            self.capacity = Capacity.from_state(state)
            self._layout = state.layout_version
            if self.capacity.cards:  # GPU cards: their use changes with every pod; not tracked
                self.capacity = None
                self.full_rounds += 1
                self.turns = len(ready)
                return decide(state, now, starvation_seconds=starvation_seconds)
            stale: set[str] | None = None  # everything
            self.full_rounds += 1
        else:
            stale = self._refresh(state, dirty_nodes) | self._changed_last
            self.incremental_rounds += 1
        self._context = context
        capacity = self.capacity
        assert capacity is not None
        decisions, planned_waiting = self._round(state, now, capacity, ready, dirty_gangs, stale, rivals,
                                                 starvation_seconds)
        return decisions, waiting + planned_waiting

    def _forget(self) -> None:
        self.capacity, self._context, self._changed_last = None, None, set()
        self._kept, self._by_index, self._indexes = {}, {}, {}

    def _refresh(self, state: ClusterState, dirty_nodes: set[str]) -> set[str]:
        """Bring the kept capacity up to date; the nodes whose free capacity changed."""
        assert self.capacity is not None
        changed = set()
        for name in dirty_nodes:
            free = state.free(name)
            if not _same(free, self.capacity.free[name]):
                self.capacity.set_free(name, free)
                changed.add(name)
        return changed

    def _round(self, state: ClusterState, now: float, capacity: Capacity, ready: list[Gang],
               dirty_gangs: set[GangKey], stale: set[str] | None, rivals: list, starvation_seconds: float
               ) -> tuple[list[Decision], list[Waiting]]:
        """Plan the gangs that need it, in round order, and reuse the rest's last Waiting."""
        capacity.start_round()
        before = capacity.before
        assert before is not None
        order: list[tuple] = []
        reused: dict[GangKey, Gang] = {}
        # Per node index (a set of nodes gangs may use): whether any of its nodes changed.
        hit = {} if stale is None else {i: not index.members.isdisjoint(stale) for i, index in self._indexes.items()}
        for gang in ready:
            kept = self._kept.get(gang.key)
            if kept is not None and stale is not None and gang.key not in dirty_gangs and (
                    not kept.indexes or (gang.state == "waiting" and not _changed(kept.indexes, hit)
                                         and not self._starving(gang, now, starvation_seconds))):
                reused[gang.key] = gang
                continue
            if kept is not None:
                self._drop(gang.key)
            order.append(_order_key(gang))
        heapq.heapify(order)
        decisions: list[Decision] = []
        waiting: list[Waiting] = []
        changed: set[str] = set()  # nodes net changed so far this round
        ever: set[str] = set()
        triggered: set[int] = set()
        mark = 0
        planned = 0
        while order:
            key = heapq.heappop(order)
            gang = state.gangs[key[-1]]
            planned += 1
            outcome = plan_one(gang, state, now, capacity, {}, rivals, starvation_seconds)
            if isinstance(outcome, Decision):
                decisions.append(outcome)
            elif outcome is not None:
                waiting.append(outcome)
                if gang.state == "waiting" and not self._starving(gang, now, starvation_seconds):
                    self._keep(gang, outcome, capacity)
            elif releasable(gang, state) is None:
                self._kept[gang.key] = _Kept(None, ())
            # Nodes this turn changed: the kept gangs after it that may use them plan again.
            touched = {node for node, _ in capacity.changed[mark:]}
            mark = len(capacity.changed)
            for node in touched:
                if _same(capacity.free[node], before[node]):
                    changed.discard(node)
                elif node not in changed:
                    changed.add(node)
                    ever.add(node)
                    for index in capacity.indexes_of(node):
                        if id(index) not in triggered:  # once: it sends every later gang on it
                            triggered.add(id(index))
                            self._replan_after(key, index, reused, order)
        kept_waiting = (self._kept[key].waiting for key in reused)
        waiting.extend(w for w in kept_waiting if w is not None)
        capacity.rewind()  # the kept capacity is the cluster's again
        self._changed_last = ever
        self.turns = planned
        return decisions, waiting

    @staticmethod
    def _starving(gang: Gang, now: float, starvation_seconds: float) -> bool:
        waited = now - (gang.complete_since if gang.complete_since is not None else now)
        return waited > starvation_seconds

    def _replan_after(self, turn: tuple, index: NodeIndex, reused: dict[GangKey, Gang], order: list[tuple]) -> None:
        """A node of `index` changed at this turn: the gangs kept on it whose turn is later plan
        again (those already past keep their answer: they saw the node before the change)."""
        for key in list(self._by_index.get(id(index), ())):
            gang = reused.get(key)
            if gang is not None and _order_key(gang) > turn:
                del reused[key]
                self._drop(key)
                heapq.heappush(order, _order_key(gang))

    def _keep(self, gang: Gang, waiting: Waiting, capacity: Capacity) -> None:
        """Remember a gang's Waiting, and the node indexes its pods read, for later rounds."""
        pods = release_candidates(gang)
        indexes = {id(i): i for i in (capacity.index(p) for p in {p.constraint_key: p for p in pods}.values())}
        self._kept[gang.key] = _Kept(waiting, tuple(indexes.values()))
        for i, index in indexes.items():
            self._by_index.setdefault(i, set()).add(gang.key)
            self._indexes[i] = index

    def _drop(self, key: GangKey) -> None:
        kept = self._kept.pop(key, None)
        if kept is not None:
            for index in kept.indexes:
                self._by_index.get(id(index), set()).discard(key)
