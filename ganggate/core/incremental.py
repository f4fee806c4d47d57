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
  - its pods and promises (it is not in `ClusterState.dirty_gangs`); its priority and age,
    hence its place in the round order, come from its pods and change only with them;
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
less room can change the choices: so "lost capacity" is treated as "changed" too. A gang
with nothing to release or a release in flight (`planner.releasable`) reads no capacity: that
answer (none) is kept until its pods or promises change. Decisions come in the full round's
order; Waitings in another order (one per gang, the same ones).

A full round (every gang planned, the Capacity rebuilt) runs after a relist, a change of the
node layout (`ClusterState.layout_version`) or of the round's context, and whenever a part
this module does not track is in play: topology levels or a gang topology annotation, GPU
cards, preemption reservations (the "plan" policy only). Only one `IncrementalRounds` may read a
given ClusterState: it takes the dirty sets. Its settings (starvation limits, card policies) are
given once, when it is made: a call that asks for other settings is refused (`SettingsMismatch`),
since planning it would make this round and the next full ones; a call that gives none plans
with the rounds' own. Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.core.fit.gpushare import CardPolicy, WholeGpuPolicy
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.nodeindex import NodeIndex
from ganggate.core.planner import HoldBack, decide, plan_one, releasable
from ganggate.core.policy.contention import find_rivals
from ganggate.core.policy.ordering import release_candidates, round_key
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.outcome import Decision, Waiting

READY_STATES = ("waiting", "partial", "started")


@dataclass
class _Kept:
    """A gang's last Waiting, and the node indexes (the nodes its pods may use) it read; or, for
    a gang with nothing to release or a release in flight (planner.releasable), None and no
    indexes: that answer reads no capacity, and stands until the gang's pods or promises change."""

    waiting: Waiting | None
    indexes: tuple[NodeIndex, ...]


def _order_key(gang: Gang) -> tuple[Any, ...]:
    """The planner's round order: roll-forwards (partial) first, then round_key."""
    return (gang.state != "partial", *round_key(gang))


def _same(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Equal resource maps, a missing entry being zero."""
    return all(a.get(k, 0) == v for k, v in b.items()) and all(b.get(k, 0) == v for k, v in a.items())


def _preempting(gang: Gang) -> bool:
    return any(p.reservation is not None for p in gang.pods.values())


class SettingsMismatch(ValueError):
    """A call of IncrementalRounds.decide asked for settings other than the rounds' own."""


_OWN: object = object()  # decide(): "the settings the rounds were made with"


class IncrementalRounds:
    """decide() kept between rounds (see the module docstring). full_rounds, incremental_rounds
    and turns (gangs given a turn, i.e. planned, in the last round) say what it did, for tests
    and benchmarks. The settings are planner.decide's, fixed for the rounds' life."""

    def __init__(self, *, starvation_seconds: float = 300.0, blind_seconds: float | None = None,
                 card_policy: CardPolicy | None = None, whole_gpu_policy: WholeGpuPolicy | None = None) -> None:
        self.settings: dict[str, object] = {
            "starvation_seconds": starvation_seconds, "blind_seconds": blind_seconds,
            "card_policy": card_policy, "whole_gpu_policy": whole_gpu_policy}
        self._starvation_seconds = float(starvation_seconds)
        self._blind_seconds = blind_seconds
        self._card_policy = card_policy
        self._whole_gpu_policy = whole_gpu_policy
        self.capacity: Capacity | None = None
        self._layout = -1
        self._context: tuple[Any, ...] | None = None
        # What the gangs are, kept up to date from ClusterState.dirty_gangs.
        self._ready: dict[GangKey, Gang] = {}
        self._status: dict[GangKey, Waiting] = {}  # conflict and incomplete gangs
        self._topology: set[GangKey] = set()  # ready gangs with a topology annotation
        self._preempting: set[GangKey] = set()
        # Answers kept for the next round, and the ready gangs without one (planned every round).
        self._kept: dict[GangKey, _Kept] = {}
        self._kept_waitings: dict[GangKey, Waiting] = {}  # the kept Waitings alone (a round hands them back)
        self._last_waitings: list[Waiting] | None = None  # what the last incremental round returned
        self._unkept: set[GangKey] = set()
        self._kept_starving: set[GangKey] = set()  # kept gangs that starve (planned with no hold before them)
        self._by_index: dict[int, set[GangKey]] = {}  # id(NodeIndex) -> gangs kept on it
        self._indexes: dict[int, NodeIndex] = {}
        self._starving_at: list[tuple[float, GangKey]] = []  # (complete_since, gang) of kept Waitings
        self._in_heap: dict[GangKey, float] = {}  # what _starving_at holds for a gang, once
        self._changed_last: set[str] = set()  # nodes any take of the last round changed
        self._refreshed: set[str] = set()  # nodes capacity_now brought up to date since the last round
        self.full_rounds = 0
        self.incremental_rounds = 0
        self.turns = 0

    def decide(self, state: ClusterState, now: float, *, starvation_seconds: object = _OWN,
               blind_seconds: object = _OWN, card_policy: object = _OWN, whole_gpu_policy: object = _OWN,
               ) -> tuple[list[Decision], list[Waiting]]:
        """The round `planner.decide(state, now, **settings)` would return, with the rounds' own
        settings; a setting given must be the rounds' own (else SettingsMismatch, nothing changed).
        The card policies matter only on nodes with GPU cards, where every round is a full one."""
        self._check(starvation_seconds=starvation_seconds, blind_seconds=blind_seconds,
                    card_policy=card_policy, whole_gpu_policy=whole_gpu_policy)
        starving, blind = self._starvation_seconds, self._blind_seconds
        dirty_nodes, dirty_gangs = state.dirty_nodes, state.dirty_gangs
        state.dirty_nodes, state.dirty_gangs = set(), set()
        full = self.capacity is None or self._layout != state.layout_version or not state.track_changes
        state.track_changes = True
        if full:  # (a relist replaces every Gang: see them all again)
            self._ready, self._status, self._topology, self._preempting = {}, {}, set(), set()
            dirty_gangs = set(state.gangs)
            self._forget()
        for key in dirty_gangs:
            self._see(key, state.gangs.get(key))
        # The fallbacks first: planner.decide works out the rivals and the Capacity itself.
        if state.topology_levels or self._preempting or self._topology:
            return self._fallback(state, now, starving, self._card_policy, self._whole_gpu_policy, blind)
        if full and any(info.card_totals[1] for info in state.nodes.values()):  # GPU cards, as from_state finds them
            return self._fallback(state, now, starving, self._card_policy, self._whole_gpu_policy, blind)
        rivals = find_rivals(state)
        context = (
            starving, blind,
            tuple((r.constraint_key, tuple(sorted(r.request.items())), tuple(keys)) for r, keys in rivals),
            tuple(sorted(state.terminating)),
        )
        if full or context != self._context:
            self._forget()
            self.capacity = Capacity.from_state(state)
            self._layout = state.layout_version
            if self.capacity.cards:  # GPU cards: their use changes with every pod; not tracked
                return self._fallback(state, now, starving, self._card_policy, self._whole_gpu_policy, blind)
            stale: set[str] | None = None  # everything
            self.full_rounds += 1
        else:
            stale = self._refresh(state, dirty_nodes) | self._changed_last | self._refreshed
            self.incremental_rounds += 1
        self._refreshed = set()
        self._context = context
        # No gang changed since the last round: if none is planned either, the Waitings are the
        # last round's, handed back as the same list (the shell's report then has nothing to read).
        quiet = stale is not None and not dirty_gangs and self._last_waitings is not None
        decisions, waiting = self._round(state, now, stale, rivals, starving, quiet, blind)
        if quiet and not self.turns:
            assert self._last_waitings is not None and not decisions
            return decisions, self._last_waitings
        self._last_waitings = list(self._status.values()) + waiting
        return decisions, self._last_waitings

    def _check(self, **asked: object) -> None:
        """Refuse settings other than the rounds' own: planned, they would change the context of
        every kept answer, and this call and the owner's next would each be a full round."""
        other = {k: v for k, v in asked.items() if v is not _OWN and v != self.settings[k]}
        if other:
            asked_text = ", ".join(f"{k}={v!r}" for k, v in other.items())
            own = ", ".join(f"{k}={self.settings[k]!r}" for k in other)
            raise SettingsMismatch(
                f"these incremental rounds plan with {own}; a call asked for {asked_text}. Give no "
                f"settings (the rounds' own are used) or use an IncrementalRounds made with those")

    def _fallback(self, state: ClusterState, now: float, starvation_seconds: float,
                  card_policy: CardPolicy | None, whole_gpu_policy: WholeGpuPolicy | None,
                  blind_seconds: float | None = None) -> tuple[list[Decision], list[Waiting]]:
        """A part this module does not track is in play: a plain full round, nothing kept."""
        self._forget()
        self.full_rounds += 1
        self.turns = len(self._ready)
        return decide(state, now, starvation_seconds=starvation_seconds, blind_seconds=blind_seconds,
                      card_policy=card_policy,
                      whole_gpu_policy=whole_gpu_policy)

    def _see(self, key: GangKey, gang: Gang | None) -> None:
        """File a changed gang (None: gone) as ready or waiting for its pods; its answer is dropped."""
        self._drop(key)
        self._ready.pop(key, None)
        self._status.pop(key, None)
        self._topology.discard(key)
        self._unkept.discard(key)
        self._preempting.discard(key)
        if gang is None:
            return
        if gang.state == "conflict":
            self._status[key] = Waiting(key, "GangConflict", gang.conflict or "pods disagree", "conflict")
        elif gang.state == "incomplete":
            self._status[key] = Waiting(key, "GangWaiting", gang.waiting_message(), "incomplete")
        elif gang.state in READY_STATES:
            self._ready[key] = gang
            self._unkept.add(key)
            if gang.spec is not None and (gang.spec.topology_required or gang.spec.topology_preferred):
                self._topology.add(key)
        if _preempting(gang):
            self._preempting.add(key)

    def capacity_now(self, state: ClusterState) -> Capacity | None:
        """The kept Capacity brought up to date with the state, for a read between rounds (the
        preemption search: it must give back whatever it takes, Capacity.start_round/rewind);
        None when none is kept (the last round was a fallback) or the node layout changed. The
        nodes it updates count as changed for the next round, as the watch's would."""
        if self.capacity is None or self._layout != state.layout_version or not state.track_changes:
            return None
        dirty, state.dirty_nodes = state.dirty_nodes, set()
        self._refreshed |= self._refresh(state, dirty)
        return self.capacity

    def _forget(self) -> None:
        self.capacity, self._context, self._changed_last = None, None, set()
        self._refreshed = set()
        self._kept, self._by_index, self._indexes, self._starving_at, self._in_heap = {}, {}, {}, [], {}
        self._kept_waitings, self._last_waitings = {}, None
        self._kept_starving = set()
        self._unkept = set(self._ready)

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

    def _candidates(self, now: float, stale: set[str] | None, starvation_seconds: float) -> set[GangKey]:
        """The gangs to plan at the start of a round: all of them in a full round; else those
        without a kept answer, those on nodes that changed, and those that now starve."""
        if stale is None:
            return set(self._ready)
        out = set(self._unkept)
        for i, index in self._indexes.items():
            if not index.members.isdisjoint(stale):
                out.update(self._by_index.get(i, ()))
        heap = self._starving_at
        while heap and now - heap[0][0] > starvation_seconds:
            since, key = heapq.heappop(heap)
            if self._in_heap.get(key) == since:
                del self._in_heap[key]
            gang = self._ready.get(key)
            if key in self._kept and gang is not None and gang.complete_since == since:
                out.add(key)
        return out

    def _round(self, state: ClusterState, now: float, stale: set[str] | None, rivals: list[Any],
               starvation_seconds: float, quiet: bool = False,
               blind_seconds: float | None = None) -> tuple[list[Decision], list[Waiting]]:
        """Plan the gangs that need it, in round order, and reuse the rest's last Waiting (not
        gathered when `quiet` and no gang was planned: the caller has them)."""
        capacity = self.capacity
        assert capacity is not None
        capacity.start_round()
        before = capacity.before
        assert before is not None
        turns = self._candidates(now, stale, starvation_seconds)
        for key in turns:
            self._drop(key)
        order = [_order_key(self._ready[key]) for key in turns]
        heapq.heapify(order)
        decisions: list[Decision] = []
        waiting: list[Waiting] = []
        changed: set[str] = set()  # nodes net changed so far this round
        ever: set[str] = set()
        triggered: set[int] = set()
        mark = 0
        holding = HoldBack()
        held_before = False
        while order:
            turn = heapq.heappop(order)
            gang = self._ready[turn[-1]]
            turns.add(gang.key)
            outcome = plan_one(gang, state, now, capacity, {}, rivals, starvation_seconds, holding, blind_seconds)
            if isinstance(outcome, Decision):
                decisions.append(outcome)
            elif outcome is not None:
                waiting.append(outcome)
                if gang.state == "waiting" and not holding.clocked:
                    self._keep(gang, outcome, capacity, self._starving(gang, now, starvation_seconds))
            elif releasable(gang, state) is None:
                self._kept[gang.key] = _Kept(None, ())
                self._unkept.discard(gang.key)
            if not held_before and (holding.gang is not None or holding.hold is not None):
                # A hold from this turn on: the starving gangs kept after it (planned last with
                # none) would wait next in line for it now, and any gang may be backfilled into it.
                held_before = True
                self._replan_starving_after(turn, turns, order)
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
                            self._replan_after(turn, index, turns, order)
        if turns or not quiet:
            reused = dict(self._kept_waitings)  # (copies and set operations: no Python step per kept gang)
            for key in turns.intersection(reused):
                del reused[key]
            waiting.extend(reused.values())
        capacity.rewind()  # the kept capacity is the cluster's again
        self._changed_last = ever
        self.turns = len(turns)
        return decisions, waiting

    @staticmethod
    def _starving(gang: Gang, now: float, starvation_seconds: float) -> bool:
        waited = now - (gang.complete_since if gang.complete_since is not None else now)
        return waited > starvation_seconds

    def _replan_after(self, turn: tuple[Any, ...], index: NodeIndex, turns: set[GangKey], order: list[tuple[Any, ...]]) -> None:
        """A node of `index` changed at this turn: the gangs kept on it whose turn is later plan
        again (those already past keep their answer: they saw the node before the change)."""
        for key in list(self._by_index.get(id(index), ())):
            gang = self._ready[key]
            if key not in turns and _order_key(gang) > turn:
                self._drop(key)
                turns.add(key)
                heapq.heappush(order, _order_key(gang))

    def _replan_starving_after(self, turn: tuple[Any, ...], turns: set[GangKey], order: list[tuple[Any, ...]]) -> None:
        """A hold was made at this turn: the starving gangs kept after it plan again."""
        for key in list(self._kept_starving):
            gang = self._ready[key]
            if key not in turns and _order_key(gang) > turn:
                self._drop(key)
                turns.add(key)
                heapq.heappush(order, _order_key(gang))

    def _keep(self, gang: Gang, waiting: Waiting, capacity: Capacity, starving: bool = False) -> None:
        """Remember a gang's Waiting, and the node indexes its pods read, for later rounds. A
        starving gang's (planned with no hold in the round before its turn, none made by it)
        stands until its nodes change or a hold is made before its turn; a gang not starving
        yet is planned again once the clock passes its starvation limit (_starving_at)."""
        pods = release_candidates(gang)
        indexes = {id(i): i for i in (capacity.index(p) for p in {p.constraint_key: p for p in pods}.values())}
        self._kept[gang.key] = _Kept(waiting, tuple(indexes.values()))
        self._kept_waitings[gang.key] = waiting
        self._unkept.discard(gang.key)
        for i, index in indexes.items():
            self._by_index.setdefault(i, set()).add(gang.key)
            self._indexes[i] = index
        if starving:
            self._kept_starving.add(gang.key)
        elif gang.complete_since is not None and self._in_heap.get(gang.key) != gang.complete_since:
            self._in_heap[gang.key] = gang.complete_since
            heapq.heappush(self._starving_at, (gang.complete_since, gang.key))

    def _drop(self, key: GangKey) -> None:
        self._kept_waitings.pop(key, None)
        self._kept_starving.discard(key)
        kept = self._kept.pop(key, None)
        if kept is not None:
            if key in self._ready:
                self._unkept.add(key)
            for index in kept.indexes:
                self._by_index.get(id(index), set()).discard(key)
