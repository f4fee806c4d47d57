"""Whether holding room back for a starving gang brings its start closer (the guard's gain).

A hold (`holdback.hold_back`) keeps the room the starving gang's plan needs on some nodes from the
gangs behind it, until enough of the pods there have ended. It costs the room it idles meanwhile;
it pays only when the gang would otherwise start later. Both starts are predicted from what is
known of when the pods holding room end (`predicted_end`): a pod being deleted ends now, one with
spec.activeDeadlineSeconds by startTime + deadline (the kubelet ends it then), and any other is
expected to run on for as long as it has run so far, at least `MIN_RESIDUAL_SECONDS` (GPU run
times are heavy-tailed, so the service a job has attained predicts what it still needs: Tiresias,
NSDI'19).

- **With the hold** (`start_with_hold`): the held room is kept, so on each node of the hold the
  gang can start once enough pods there have ended for its pods there to fit beside the room free
  now; it starts at the latest of those times (the hold's own `ready_at` when every pod that must
  end has a deadline).
- **Without it** (`start_without_hold`): room that frees bit by bit goes to the gangs behind it,
  which is how a gang starves (the stream refills each GPU as it frees, before the rest of the
  room the gang needs has freed). Room that frees in one piece is the starving gang's, since it is
  planned first in a round, before anything backfills: a pod's room when it ends, or a running
  gang's when it ends (its ranks end together, as a job's do). Pods that only happen to be
  predicted to end at the same time (started together, or deadlines alike) are not one piece: each
  frees its room alone. Nor does room free now wait for it: GPUs, CPU and memory alike, it is
  taken by the gangs and pods behind it (a hold keeps the gang's CPU and memory too). The gang
  starts when the first piece ends whose own room holds all the pods it needs; never (inf) when
  none comes.
  A hold whose start is known (every pod that must end there has a deadline) is weighed against
  pieces whose end is known too: a start the kubelet guarantees is not given up for a guess.

`weigh` takes a new hold when it wins by a margin (`MARGIN_SECONDS`, and `MARGIN_SHARE` of the
wait the hold predicts, since the prediction of a blind hold is a guess); a hold held last round
stays while it wins at all and is let go once it does not. A gang that would start as early
without a hold gets none. Pure, typed: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ganggate.core.fit.resources import Resources, add_into, fits, gpus
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.packing import largest_first
from ganggate.core.policy.holdback import INF, MIN_RESIDUAL_SECONDS, Hold, expected_remaining, surely_ends
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.pods import PodInfo

#: A new hold must bring the start closer by at least this many seconds...
MARGIN_SECONDS = 600.0
#: ...and by this share of the wait it predicts (now to its predicted start).
MARGIN_SHARE = 0.25
#: The gain a metric records for a hold whose gang would not start at all without it.
UNBOUNDED_GAIN_SECONDS = 30 * 86400.0


def predicted_end(pod: PodInfo, now: float) -> tuple[float, bool]:
    """When the pod is predicted to end (see the module docstring), never before `now`, and
    whether that is known (being deleted, or a deadline) rather than expected."""
    sure = surely_ends(pod, now)  # (as the hold-back reads a pod: deleted, or its deadline)
    if sure != INF:
        return sure, True
    return now + expected_remaining(pod.started or now, now), False


@dataclass(frozen=True)
class Ending:
    """A pod that holds room on a node, when it is predicted to end, and the piece it frees its
    room with: its gang (namespace, group name), or its own key when it is in no gang."""

    end: float
    request: Mapping[str, int]
    piece: object
    known: bool = False  # the end is known (a deadline, a deletion), not expected


@dataclass(frozen=True)
class Forecast:
    """The predicted ends of the pods holding room, by node, each list soonest first (`forecast`)."""

    now: float
    by_node: dict[str, list[Ending]]


def forecast(state: ClusterState, now: float, held: Collection[str] | None = None, wanted: int = 0,
             eligible: Collection[str] | None = None) -> Forecast:
    """The Forecast of the cluster: bound pods not finished, and released pods not bound yet (a
    promise: they bind by its deadline, and run from then). Given `held`, only what a hold's weighing
    reads: every pod on the held nodes, and elsewhere on `eligible` (None: every node) only the pods
    of pieces that could free `wanted` GPUs (milli) at once, found by a cheap test per pod (its own
    GPUs, or its gang's pod count times them), so that a round at 100,000 pods reads the few."""
    by_node: dict[str, list[Ending]] = {}
    for pod in state.pods.values():
        node = pod.node_name
        if not node or pod.terminated:
            continue
        if held is not None and node not in held:
            if pod.gpu <= 0 or (eligible is not None and node not in eligible):
                continue
            if pod.gpu < wanted and pod.gpu * getattr(pod.gang, "pod_num", 1) < wanted:
                continue  # (no piece of it frees enough)
        end, known = predicted_end(pod, now)
        piece = state.gang_of(pod) or pod.key
        by_node.setdefault(node, []).append(Ending(end, pod.request, piece, known))
    for promise in state.promises.values():
        if promise.node is None:
            continue
        found = state.pods.get(promise.pod_key)
        start = max(promise.deadline, now)
        known = found is not None and found.deadline_seconds is not None
        end = start + (found.deadline_seconds if found is not None and found.deadline_seconds is not None
                       else MIN_RESIDUAL_SECONDS)
        by_node.setdefault(promise.node, []).append(Ending(end, promise.request, promise.gang_key, known))
    for endings in by_node.values():
        endings.sort(key=lambda e: e.end)
    return Forecast(now, by_node)


def start_with_hold(taken: Iterable[tuple[str, Mapping[str, int]]], free: Mapping[str, Mapping[str, int]],
                    endings: Mapping[str, Sequence[Ending]], now: float) -> float:
    """When the gang can start on the held room: on each node of `taken` (node, request held),
    the end of the last pod that must end, soonest first, for the requests held there to fit
    beside `free` (the node's free room, the hold not taken); the latest over the nodes; inf when
    some node never has the room."""
    need: dict[str, Resources] = {}
    for name, request in taken:
        add_into(need.setdefault(name, {}), request)
    start = now
    for name, wanted in need.items():
        room = dict(free.get(name, {}))
        when = now
        for ending in endings.get(name, ()):
            if fits(wanted, room):
                break
            add_into(room, ending.request)
            when = max(when, ending.end)
        if not fits(wanted, room):
            return INF
        start = max(start, when)
    return start


def start_without_hold(requests: Sequence[Mapping[str, int]], nodes: Iterable[str],
                       endings: Mapping[str, Sequence[Ending]], now: float, until: float = INF,
                       known_only: bool = False) -> float:
    """When the gang (the pods of `requests`, largest first) is predicted to start with no room
    held: the predicted end of the first piece (a pod, or a gang's pods: `Ending.piece`) whose
    own room on `nodes` holds all of them at once (what is free now is taken by the gangs behind
    it meanwhile); inf when none ends by `until`. With
    `known_only`, a piece with a pod of unknown end (no deadline) frees nothing."""
    wanted = sum(gpus(r) for r in requests)
    pieces: dict[object, list[tuple[float, str, Mapping[str, int]]]] = {}
    for name in nodes:
        for ending in endings.get(name, ()):
            pieces.setdefault(ending.piece, []).append((ending.end, name, ending.request))
    if known_only:
        unknown = {e.piece for name in nodes for e in endings.get(name, ()) if not e.known}
        for key in unknown:
            pieces.pop(key, None)
    ends = []
    for key, freed in pieces.items():
        when = max(e for e, _, _ in freed)  # a piece frees when its last pod ends
        if when <= until and sum(gpus(r) for _, _, r in freed) >= wanted:
            ends.append((when, key))
    ends.sort(key=lambda e: e[0])
    for when, key in ends:
        if _places(requests, pieces[key]):
            return max(when, now)
    return INF


def _places(requests: Sequence[Mapping[str, int]], freed: Sequence[tuple[float, str, Mapping[str, int]]]) -> bool:
    """Whether the pods fit, first fit, into the room the `freed` pods leave on their nodes."""
    rooms: dict[str, Resources] = {}
    for _, name, request in freed:
        add_into(rooms.setdefault(name, {}), request)
    for request in requests:
        for room in rooms.values():
            if fits(request, room):
                add_into(room, request, -1)
                break
        else:
            return False
    return True


@dataclass(frozen=True)
class Gain:
    """A hold weighed: the gang's predicted start with it and without it (inf: none predicted),
    whether it is taken, and the margin a new hold had to win by."""

    now: float
    with_hold: float
    without_hold: float
    taken: bool
    margin: float

    @property
    def seconds(self) -> float:
        """How much sooner the hold starts the gang (inf: it would not start without it)."""
        if self.without_hold == INF:
            return INF if self.with_hold != INF else 0.0
        return self.without_hold - self.with_hold

    @property
    def recorded(self) -> float:
        """The gain as a metric records it: an unbounded one as `UNBOUNDED_GAIN_SECONDS`."""
        return min(self.seconds, UNBOUNDED_GAIN_SECONDS)

    def describe(self) -> str:
        """Why the hold is taken or refused: the two predicted starts (the gang's Event, `ganggate status`)."""
        with_text = f"in about {_span(self.with_hold - self.now)}" if self.with_hold != INF else "never"
        if self.without_hold == INF:
            return f"it starts {with_text} with it; without, no pod or gang ending sooner frees room for it at once"
        without = f"in about {_span(self.without_hold - self.now)} without a hold (a pod or gang that ends frees room for it)"
        return f"it starts {with_text} with it, {without}" if self.taken else f"it starts {without}, {with_text} with one"


def margin(with_hold: float, now: float, held_before: bool) -> float:
    """How much sooner than without it a hold must start the gang: a new one by `MARGIN_SECONDS`
    and `MARGIN_SHARE` of the wait it predicts, one held last round by anything at all."""
    return 0.0 if held_before else max(MARGIN_SECONDS, MARGIN_SHARE * max(0.0, with_hold - now))


def weigh(with_hold: float, without_hold: float, now: float, held_before: bool) -> Gain:
    """Take the hold when it brings the start closer by the `margin` (a hold held last round:
    by more than nothing)."""
    needed = margin(with_hold, now, held_before)
    sooner = INF if without_hold == INF and with_hold != INF else without_hold - with_hold
    taken = with_hold != INF and (sooner > needed if held_before else sooner >= needed)
    return Gain(now, with_hold, without_hold, taken, needed)


def weigh_hold(taken: Sequence[tuple[str, Mapping[str, int]]], ready_at: float | None, nodes: Iterable[str],
               free: Mapping[str, Mapping[str, int]], seen: Forecast, held_before: bool) -> Gain:
    """Weigh a hold: `taken` what it took where (the gang's pods it plans), `ready_at` its start
    when every pod that must end has a deadline, `nodes` those the gang may use, `free` their free
    room with the hold taken (it is given back here, for the start without it), `seen` the
    cluster's Forecast, `held_before` whether the gang held room last round."""
    now = seen.now
    before: dict[str, Resources] = {}
    for name, request in taken:
        room = before.setdefault(name, dict(free.get(name, {})))
        add_into(room, request)
    free_before = _Overlay(before, free)
    with_hold = ready_at if ready_at is not None else start_with_hold(taken, free_before, seen.by_node, now)
    # A start without it later than this does not change the answer: look no further.
    until = with_hold + margin(with_hold, now, held_before) if with_hold != INF else INF
    requests = sorted((r for _, r in taken), key=lambda r: -gpus(r))
    without = start_without_hold(requests, nodes, seen.by_node, now, until, ready_at is not None)
    return weigh(with_hold, without, now, held_before)


def weigh_gang_hold(hold: Hold, pods: Sequence[PodInfo], capacity: Capacity, state: ClusterState, now: float,
                    held_before: bool) -> Gain:
    """`weigh_hold` for a hold `holdback.hold_back` made for these pods this round."""
    nodes = capacity.index(largest_first(pods)[0]).members
    seen = forecast(state, now, {name for name, _ in hold.taken}, sum(gpus(r) for _, r in hold.taken), nodes)
    return weigh_hold(hold.taken, hold.ready_at, nodes, capacity.free, seen, held_before)


class _Overlay(Mapping[str, Mapping[str, int]]):
    """`base` with some nodes' room replaced (no copy of the whole map)."""

    def __init__(self, top: Mapping[str, Mapping[str, int]], base: Mapping[str, Mapping[str, int]]) -> None:
        self._top, self._base = top, base

    def __getitem__(self, name: str) -> Mapping[str, int]:
        found = self._top.get(name)
        return found if found is not None else self._base[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)


def _span(seconds: float) -> str:
    """45s, 3m, 2h10m, 3d4h."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
