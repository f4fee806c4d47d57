"""Deciding which gangs to release, and where their pods should go. Pure: no I/O, no clock.

`decide` runs one round over the whole cluster: roll-forward of cut-short decisions first,
then the other gangs in `ganggate.core.policy.ordering`'s order, each packed (`packing`) against
the capacity (`capacity`) left by the decisions made before it in the same round, so that two
gangs that each fit alone but not together never both go. A plan avoids room a pending pod
may take first (`contention`); a gang that starves gets capacity held back (`ordering`) where
the hold brings its predicted start closer (`holdgain`).

The names other packages use are importable from here: decide, POLICIES, Decision, Waiting,
Unfit, Capacity, plan_gang, gpus, count_only_fits, totals_only_fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from ganggate.core.fit.gpushare import CardPolicy, WholeGpuPolicy, Workload
from ganggate.core.fit.resources import gpus
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.domains import placement_domain
from ganggate.core.placement.explain import contested_message, decision_reason, plural
from ganggate.core.placement.feasibility import CANNOT_FIT, never_fits
from ganggate.core.placement.gpushare_round import card_annotations, observed_workload, with_cards
from ganggate.core.placement.packing import plan_gang
from ganggate.core.placement.topology import released_nodes
from ganggate.core.policy.baseline import count_only_fits, decide_count, totals_only_fits
from ganggate.core.policy.contention import Rivals, find_rivals, place_uncontested
from ganggate.core.policy.holdback import Hold, hold_back
from ganggate.core.policy.holdgain import Gain, weigh_gang_hold
from ganggate.core.policy.lifecycle import waits_for_terminating
from ganggate.core.policy.ordering import release_candidates, release_in_flight, round_key, round_order
from ganggate.core.policy.reservation import Reservation, active_reservations, hold, place_reserved
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.outcome import Decision, Unfit, Waiting
from ganggate.core.state.pods import PodInfo

__all__ = [
    "POLICIES",
    "Capacity",
    "Decision",
    "Unfit",
    "Waiting",
    "count_only_fits",
    "decide",
    "gpus",
    "plan_gang",
    "totals_only_fits",
]

POLICIES = ("plan", "count")


def decide(
    state: ClusterState,
    now: float,
    *,
    policy: str = "plan",
    starvation_seconds: float = 300.0,
    blind_seconds: float | None = None,
    card_policy: CardPolicy | None = None,
    workload: Workload | None = None,
    whole_gpu_policy: WholeGpuPolicy | None = None,
) -> tuple[list[Decision], list[Waiting]]:
    """One round: which gangs to release now and where, and why the others wait.

    A pod asking a share of one GPU card gets its card from `card_policy` (default best fit),
    which may weigh `workload` (default: the mix of GPU pods the cluster holds, observed_workload);
    whole-GPU pods on nodes with cards, and pods asking no GPU that only nodes with cards hold,
    go where `whole_gpu_policy` says, when one is given. A
    sharing pod's decision carries the gpushare annotations, with `now` as the assume time.

    A gang that waited longer than `starvation_seconds` gets room held back where the pods
    there have deadlines (the hold ends by a known time and lends its room); where some have
    none, only once it waited longer than `blind_seconds` (None: the same limit)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    waiting: list[Waiting] = []
    ready: list[Gang] = []
    for gang in state.gangs.values():
        if gang.state == "conflict":
            waiting.append(Waiting(gang.key, "GangConflict", gang.conflict or "pods disagree", "conflict"))
        elif gang.state == "incomplete":
            waiting.append(Waiting(gang.key, "GangWaiting", gang.waiting_message(), "incomplete"))
        elif gang.state in ("waiting", "partial", "started"):
            ready.append(gang)
    rolls = round_order(g for g in ready if g.state == "partial")
    rest = round_order(g for g in ready if g.state != "partial")
    if policy == "count":
        counted, unfit = decide_count(state, rolls + rest)
        return counted, waiting + unfit
    cards = Capacity.cards_of(state)
    if not cards or (card_policy is None and whole_gpu_policy is None):
        workload = ()  # (read by the card policies alone)
    elif workload is None:
        workload = observed_workload(state, cards)
    capacity = Capacity.from_state(
        state, cards=cards, card_policy=card_policy, whole_gpu_policy=whole_gpu_policy, workload=workload,
        # Read by topology.place alone: with levels configured, or for a gang with a topology annotation.
        topology_placed={g.key: released_nodes(g, state) for g in rolls + rest
                         if g.state != "waiting" and (state.topology_levels or _asks_topology(g))},
    )
    reserved = active_reservations(state, now)  # room preemptors hold (core.reservation)
    for reservation in reserved.values():
        hold(capacity, state, reservation)
    rivals = find_rivals(state)
    decisions: list[Decision] = []
    holding = HoldBack()
    for gang in rolls + rest:
        outcome = plan_one(gang, state, now, capacity, reserved, rivals, starvation_seconds, holding, blind_seconds)
        if isinstance(outcome, Decision):
            decisions.append(outcome)
        elif outcome is not None:
            waiting.append(outcome)
    return decisions, waiting


def _asks_topology(gang: Gang) -> bool:
    """Whether the gang's pods ask for a topology level (as packing.plan_gang reads them)."""
    return gang.spec is not None and bool(gang.spec.topology_required or gang.spec.topology_preferred)


@dataclass
class HoldBack:
    """The starving gang a round holds capacity back for. One at a time, the first in round
    order, as Volcano's reservation holds nodes for one target job: holding for every starving
    gang at once lets them block each other and everything behind them."""

    gang: GangKey | None = None
    hold: Hold | None = None  # what was held for it, and its earliest start when known
    decided: set[GangKey] = field(default_factory=set)  # gangs released so far this round
    # Whether the last turn's answer read the clock or another gang's hold (a starving gang
    # that holds room, is given its blind hold back, or waits next in line): such an answer
    # holds for this round alone (core.incremental plans that gang again next round).
    clocked: bool = False
    refused: bool = False  # the hold weighed for `gang` was refused: it starts as early without one


def first_in_line(gang: Gang, state: ClusterState, decided: set[GangKey]) -> bool:
    """No older (or higher-priority) gang still waits: none may take the room freed for this
    one before its turn in a later round, so the start a hold promises can hold."""
    key = round_key(gang)
    return not any(other.state == "waiting" and other.key not in decided and round_key(other) < key
                   for other in state.gangs.values())


def releasable(gang: Gang, state: ClusterState) -> list[PodInfo] | None:
    """The pods a round may release for the gang; None when there are none, or a release is
    in flight (its promises hold). Reads the gang and its promises alone, not the capacity."""
    pods = release_candidates(gang)
    if not pods or release_in_flight(gang, state.promises):
        return None
    return pods


def plan_one(
    gang: Gang,
    state: ClusterState,
    now: float,
    capacity: Capacity,
    reserved: Mapping[GangKey, Reservation],
    rivals: Rivals,
    starvation_seconds: float,
    holding: HoldBack,
    blind_seconds: float | None = None,
) -> Decision | Waiting | None:
    """One gang's turn in a round: its release (taken from `capacity`), why it waits, or None
    (nothing to release, a release in flight, or a started gang's extras waiting quietly)."""
    holding.clocked = False
    outcome = _plan_one(gang, state, now, capacity, reserved, rivals, starvation_seconds, holding, blind_seconds)
    if isinstance(outcome, Decision):
        holding.decided.add(gang.key)
    return outcome


def _plan_one(gang: Gang, state: ClusterState, now: float, capacity: Capacity, reserved: Mapping[GangKey, Reservation],
              rivals: Rivals, starvation_seconds: float, holding: HoldBack, blind_seconds: float | None,
              ) -> Decision | Waiting | None:
    """plan_one without the bookkeeping."""
    pods = releasable(gang, state)
    if pods is None:
        return None
    assert gang.spec is not None
    if gang.state == "partial":
        need = min(gang.still_needed, len(pods))
    elif gang.state == "started":
        need = 1
    else:
        need = min(gang.spec.min_available, len(pods))
    if gang.key in reserved:
        hold(capacity, state, reserved[gang.key], -1)
        result, _ = place_reserved(pods, capacity, need, reserved[gang.key], rivals, state)
        if not isinstance(result, Unfit):
            result = with_cards(pods, result, capacity)
        if isinstance(result, Unfit):
            hold(capacity, state, reserved[gang.key])
            return Waiting(gang.key, "GangWaiting", result.message, "preempting")
        return _decision(gang, result, capacity, False, now)
    result, contested = place_uncontested(pods, capacity, need, rivals)
    if not isinstance(result, Unfit):
        result = with_cards(pods, result, capacity)
    if not isinstance(result, Unfit):
        return _decision(gang, result, capacity, gang.state == "partial", now)
    if (backfilled := _backfill(gang, pods, need, capacity, rivals, holding, now)) is not None:
        return backfilled
    capacity.release_cards(p.key for p in pods)  # cards a given-up plan may still hold
    if contested:
        if gang.state != "started":  # a started gang's extras wait quietly
            return Waiting(gang.key, "GangWaiting", contested_message(contested), "contended")
        return None
    if gang.state == "started":
        return None  # extras wait quietly until one fits
    if gang.state == "waiting" and (never := never_fits(pods, need, state)) is not None:
        return Waiting(gang.key, CANNOT_FIT, never.message, f"never:{never.cause}")  # no hold-back for it
    message, reason = result.message, "GangUnschedulable"
    kind = "nodes" if message.startswith("0/") else "room"
    if (held_by_going := waits_for_terminating(pods, capacity, need, state)) is not None:
        message, reason, kind = f"{held_by_going} ({message})", "GangWaiting", "terminating"
    if gang.state == "partial":
        message = f"finishing decision {', '.join(gang.decision_ids()) or '?'}: {message}"
    waited = now - (gang.complete_since if gang.complete_since is not None else now)
    holding_for = holding.gang
    gain: Gain | None = None
    if gang.state == "partial" or (waited > starvation_seconds and holding_for is None):
        held = hold_back(pods, capacity, need, state, now, gang.held_nodes)
        holding.clocked = not isinstance(held, int) or held != 0  # (0: no hold, nothing of the clock read)
        blind = starvation_seconds if blind_seconds is None else blind_seconds
        if isinstance(held, Hold) and held.ready_at is None and gang.state != "partial" and waited <= blind:
            held.give_back(capacity)  # a blind hold idles its room for as long as the pods there run
            message += (f"; waited {waited:.0f}s; room would be held back on {plural(held.nodes, 'node')}, "
                        f"but not every pod there has a deadline: held after {blind:.0f}s")
        elif isinstance(held, Hold) and gang.state != "partial" and not (
                gain := weigh_gang_hold(held, pods, capacity, state, now, bool(gang.held_nodes))).taken:
            held.give_back(capacity)  # it would start as early without: a hold would only idle room
            gang.held_nodes = frozenset()
            holding.gang, holding.refused = gang.key, True
            message += f"; waited {waited:.0f}s; no capacity held back: {gain.describe()}"
            kind += "+unheld"
        elif isinstance(held, Hold):
            message += f"; waited {waited:.0f}s, capacity held back on {held_nodes_text(held)}"
            if gain is not None:
                message += f": {gain.describe()}"
            if first_in_line(gang, state, holding.decided):  # else an older gang may take the room first
                message += start_message(held)
            kind += "+held"
            if gang.state != "partial":
                holding.gang, holding.hold = gang.key, held
                gang.held_nodes = frozenset(name for name, _ in held.taken)  # (a memo on the picture)
        elif held < 0:
            message += "; it would not fit even if the running pods on the nodes it may use finished"
    elif waited > starvation_seconds and holding_for is not None:
        holding.clocked = True
        message += (f"; waited {waited:.0f}s, next in line after {holding_for[0]}/{holding_for[1]}, "
                    + ("which would start as early without capacity held back" if holding.refused
                       else "for which capacity is held back"))
    if gain is None:
        return Waiting(gang.key, reason, message, kind)
    return Waiting(gang.key, reason, message, kind, hold_gain=gain.recorded, hold_refused=not gain.taken)


def held_nodes_text(hold: Hold) -> str:
    """"2 nodes (gpu-1, gpu-2)": the nodes a hold drains, the first three named."""
    names = sorted({name for name, _ in hold.taken})
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{plural(len(names), 'node')} ({shown})"


def _backfill(gang: Gang, pods: list[PodInfo], need: int, capacity: Capacity, rivals: Rivals, holding: HoldBack,
              now: float) -> Decision | None:
    """The gang's release into room held for a starving gang, when it provably leaves before
    that gang could start (Hold.admits: every pod's deadline ends by its earliest start)."""
    hold = holding.hold
    if hold is None or gang.state != "waiting" or not hold.admits(pods[:need], now):
        return None
    hold.give_back(capacity)
    result, _ = place_uncontested(pods, capacity, need, rivals)
    if not isinstance(result, Unfit):
        result = with_cards(pods, result, capacity)
    if isinstance(result, Unfit):
        capacity.release_cards(p.key for p in pods)
    hold.give_back(capacity, 1)
    if isinstance(result, Unfit):
        return None
    decision = _decision(gang, result, capacity, False, now)
    assert holding.gang is not None
    return replace(decision, reason=f"{decision.reason}, backfilled into room held for "
                                   f"{holding.gang[0]}/{holding.gang[1]} (it ends before that gang could start)")


def start_message(hold: Hold) -> str:
    """When a held gang can start, when the pods it waits for have deadlines."""
    if hold.ready_at is None:
        return ""
    when = datetime.fromtimestamp(hold.ready_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    after = f" after {', '.join(hold.waits_for)} end" if hold.waits_for else ""
    return f"; starts{after}, by {when} at the latest"


def _decision(gang: Gang, placement: dict[str, str], capacity: Capacity, roll_forward: bool, now: float) -> Decision:
    """The release, its Event text, with topology levels the narrowest domain that holds it,
    and the card annotations of its GPU-sharing pods."""
    reason = decision_reason(gang, placement)
    where = placement_domain(capacity, placement) if capacity.topology_levels else None
    return Decision(gang.key, dict(placement), f"{reason} in {where}" if where else reason, roll_forward, where,
                    annotations=card_annotations(placement, capacity, now))
