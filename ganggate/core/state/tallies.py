"""What a controller round reads of the whole cluster, kept up to date by the events that change it.

A round used to walk every gang and node for its gauges (gangs by state, GPUs free, promised
and held idle), for the next instant a round is due on time alone (promise deadlines, the
start of a starvation hold-back, gang timeouts), for the promises past their deadline and for
the gangs past their timeout: about 200 ms at 20,000 nodes and 100,000 pods, whatever changed.
`ClusterState` now tells a `Tallies` of each node whose free capacity may have changed and each
gang it refreshed, and the round reads the sums and the heads of a few heaps instead.

The heaps are lazy: an entry is checked against the state when it comes to the top (a promise
ended or renewed, a gang gone or changed leaves a stale entry behind, dropped then). Entries at
or before the `now` a question is asked at are dropped once past: the controller's clock does
not go backwards; if it does, the heaps are rebuilt from the state (`_rewound`). Pure: no I/O.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ganggate.core.fit.resources import GPU
from ganggate.core.state.gangs import Gang, GangKey, timed_out, waiting_timeout


class ClusterState(Protocol):
    """What the tallies read of core.cluster.ClusterState (which imports this module)."""

    @property
    def nodes(self) -> Mapping[str, Any]: ...
    @property
    def gangs(self) -> Mapping[GangKey, Gang]: ...
    @property
    def promises(self) -> Mapping[str, Any]: ...

#: Gang states whose released pods may be preempted (core.preemption).
PREEMPTIBLE_STATES = ("running", "released")


def idle_gpus(gang: Gang) -> int:
    """Milli-GPUs of the gang's bound pods held while the rest of the gang is not bound yet."""
    if gang.state in ("waiting", "running"):
        return 0
    live, bound = gang.live_count, gang.bound_count  # tallied by the gang: O(1)
    needed = gang.spec.min_available if gang.spec is not None else live
    if 0 < bound < needed or (gang.state == "released" and bound < live):
        return gang.bound_gpus
    return 0


class Tallies:
    """Sums over every node and gang (the gauges), and the heaps of what falls due on time."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        """Nothing tallied (a new Tallies, or one about to be rebuilt)."""
        self.states: Counter[str] = Counter()  # gangs by state
        self.held_idle = 0  # milli-GPUs (idle_gpus summed)
        self.free_gpus = 0  # milli-GPUs free on ready, schedulable nodes (no node below zero)
        self.promised_gpus = 0  # milli-GPUs promised on nodes that exist
        #: Priorities of the gangs in a PREEMPTIBLE_STATE, counted (the preemption search asks
        #: whether any is below a gang's: core.preemption).
        self.preemptible: Counter[int] = Counter()
        #: The gangs in state "waiting", by priority (the preemption search tries only those above
        #: the lowest preemptible priority).
        self.waiting: dict[int, set[GangKey]] = {}
        self._gang: dict[GangKey, tuple[str, int, int]] = {}  # state, idle, priority
        self._node: dict[str, tuple[int, int]] = {}  # free, promised
        # Heaps (see the module docstring): (deadline, pod key) of promises, twice (one for
        # the next instant due, one for expiry); (complete_since, gang) of waiting gangs;
        # (created + timeout, gang) of gangs with a timeout that still wait, twice too.
        self._promise_due: list[tuple[float, str]] = []
        self._promise_expiry: list[tuple[float, str]] = []
        self._starving: list[tuple[float, GangKey]] = []
        self._timeout_due: list[tuple[float, GangKey]] = []
        self._timeout_found: list[tuple[float, GangKey]] = []
        self._pushed: dict[GangKey, tuple[float | None, float | None]] = {}  # (complete_since, timeout at) filed
        self._past: set[GangKey] = set()  # gangs whose timeout has passed, not yet reported
        self._asked = float("-inf")  # the latest `now` asked at

    # ---- fed by ClusterState --------------------------------------------------------------

    def node(self, state: ClusterState, name: str) -> None:
        """The node's free or promised capacity, or the node itself, may have changed."""
        old_free, old_promised = self._node.pop(name, (0, 0))
        info = state.nodes.get(name)
        free = promised = 0
        if info is not None:
            promised = info.promised.get(GPU, 0)
            if info.ready and not info.cordoned:
                free = max(0, info.allocatable.get(GPU, 0) - info.used.get(GPU, 0) - promised)
            self._node[name] = (free, promised)
        self.free_gpus += free - old_free
        self.promised_gpus += promised - old_promised

    def gang(self, key: GangKey, gang: Gang | None) -> None:
        """The gang was refreshed (None: it is gone)."""
        old = self._gang.pop(key, None)
        if old is not None:
            self._count(key, old, -1)
        if gang is None:
            self._pushed.pop(key, None)
            return
        new = (gang.state, idle_gpus(gang), gang.priority)
        self._gang[key] = new
        self._count(key, new, 1)
        self._file_times(key, gang)

    def promise(self, pod_key: str, deadline: float) -> None:
        """A promise was made (or rebuilt) with this deadline."""
        heapq.heappush(self._promise_due, (deadline, pod_key))
        heapq.heappush(self._promise_expiry, (deadline, pod_key))

    def _count(self, key: GangKey, entry: tuple[str, int, int], sign: int) -> None:
        state, idle, priority = entry
        self.states[state] += sign
        if not self.states[state]:
            del self.states[state]
        self.held_idle += sign * idle
        if state in PREEMPTIBLE_STATES:
            self.preemptible[priority] += sign
            if not self.preemptible[priority]:
                del self.preemptible[priority]
        elif state == "waiting":
            if sign > 0:
                self.waiting.setdefault(priority, set()).add(key)
            else:
                keys = self.waiting[priority]
                keys.discard(key)
                if not keys:
                    del self.waiting[priority]

    def _file_times(self, key: GangKey, gang: Gang) -> None:
        """File the gang's starvation start and timeout when they changed since last filed."""
        since = gang.complete_since if gang.state == "waiting" else None
        timeout = waiting_timeout(gang)
        at = gang.created + timeout if timeout is not None else None
        old_since, old_at = self._pushed.get(key, (None, None))
        if since is not None and since != old_since:
            heapq.heappush(self._starving, (since, key))
        if at is not None and at != old_at:
            heapq.heappush(self._timeout_due, (at, key))
            heapq.heappush(self._timeout_found, (at, key))
        self._pushed[key] = (since, at)

    # ---- read by the round ------------------------------------------------------------------

    def waiting_above(self, priority: int) -> list[GangKey]:
        """The gangs in state "waiting" of a priority above `priority`."""
        return [key for p, keys in self.waiting.items() if p > priority for key in keys]

    def lowest_preemptible_priority(self) -> int | None:
        """The lowest priority of a running or released gang, or None when there is none."""
        return min(self.preemptible) if self.preemptible else None

    def next_due(self, state: ClusterState, now: float, starvation_seconds: float, past: float,
                 reported: Iterable[GangKey]) -> float | None:
        """The earliest promise deadline, start of starvation (+ past) or timeout (+ past) after
        `now`, of gangs not in `reported` (timed out and told already); None when there is none."""
        self._rewound(state, now)
        promises, gangs = state.promises, state.gangs
        reported = set(reported)

        def promise_ok(entry: tuple[float, str]) -> bool:
            promise = promises.get(entry[1])
            return promise is not None and promise.deadline == entry[0]

        def starving_ok(entry: tuple[float, GangKey]) -> bool:
            gang = gangs.get(entry[1])
            return gang is not None and gang.state == "waiting" and gang.complete_since == entry[0]

        def timeout_ok(entry: tuple[float, GangKey]) -> bool:
            return entry[1] not in reported and self._times_out_at(state, entry)

        due = [t for t in (_head(self._promise_due, now, 0.0, promise_ok),
                           _head(self._starving, now, starvation_seconds + past, starving_ok),
                           _head(self._timeout_due, now, past, timeout_ok)) if t is not None]
        self._compact(state)
        return min(due) if due else None

    def expired_promises(self, state: ClusterState, now: float) -> list[str]:
        """Keys of the promises whose deadline is at or before `now` (each once)."""
        self._rewound(state, now)
        heap, promises, out, seen = self._promise_expiry, state.promises, [], set()
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            promise = promises.get(key)
            if promise is not None and promise.deadline == deadline and key not in seen:
                out.append(key)  # (a promise made again with the same deadline is filed twice)
                seen.add(key)
        return out

    def timed_out(self, state: ClusterState, now: float, skip: Iterable[GangKey]) -> list[tuple[GangKey, int]]:
        """Gangs other than `skip` (reported already, for their current created time) past
        their timeout, with it; as core.lifecycle.gangs_timed_out finds them, sorted."""
        self._rewound(state, now)
        heap = self._timeout_found
        while heap and heap[0][0] < now:
            self._past.add(heapq.heappop(heap)[1])
        skipped, out = set(skip), []
        for key in list(self._past):
            gang = state.gangs.get(key)
            timeout = timed_out(gang, now) if gang is not None and key not in skipped else None
            if timeout is None:
                self._past.discard(key)  # gone, told, or no longer waiting: refiled if it waits again
                if gang is not None and key not in skipped:
                    self._pushed[key] = (self._pushed.get(key, (None, None))[0], None)
            else:
                out.append((key, timeout))
        return sorted(out)

    @staticmethod
    def _times_out_at(state: ClusterState, entry: tuple[float, GangKey]) -> bool:
        gang = state.gangs.get(entry[1])
        timeout = waiting_timeout(gang) if gang is not None else None
        return timeout is not None and gang is not None and gang.created + timeout == entry[0]

    def _rewound(self, state: ClusterState, now: float) -> None:
        """Entries before `now` are dropped as they pass: a clock gone back needs them again."""
        if now < self._asked:
            self.rebuild(state)
        self._asked = now

    def rebuild(self, state: ClusterState) -> None:
        """Everything again from the state (after a relist, or a clock gone back)."""
        self._clear()
        for name in state.nodes:
            self.node(state, name)
        for key, gang in state.gangs.items():
            self.gang(key, gang)
        for pod_key, promise in state.promises.items():
            self.promise(pod_key, promise.deadline)

    def _compact(self, state: ClusterState) -> None:
        """Drop stale entries once a heap holds many more than there are live ones."""
        limit = 2 * (len(state.gangs) + len(state.promises)) + 1024
        if max(len(self._promise_due), len(self._promise_expiry), len(self._starving),
               len(self._timeout_due), len(self._timeout_found)) > limit:
            asked, past = self._asked, self._past
            self.rebuild(state)
            self._asked, self._past = asked, past


def _head(heap: list[tuple[float, Any]], now: float, offset: float, valid: Any) -> float | None:
    """The first valid entry's time + offset after `now`, dropping the stale and the past ones."""
    while heap:
        entry = heap[0]
        if entry[0] + offset > now and valid(entry):
            return entry[0] + offset
        heapq.heappop(heap)
    return None
