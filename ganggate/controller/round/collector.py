"""Garbage collection for a controller that holds the picture of a large cluster.

CPython's cycle collector walks every object it tracks in the generations it collects, holding
the GIL, on whichever thread happened to allocate: at 100,000 pods a full (generation 2)
collection took 40-600 ms (`gc.callbacks`, during bench/bench_loop_stall.py), on the event loop
too, where it stalls every watch, lease renewal and release. The picture
is long-lived: its objects are replaced by watch events (and freed by their reference counts)
far more often than they end up in a garbage cycle. So, as long-running Python services do
(`gc.freeze`, the docs' advice for long-lived objects), the controller keeps it out of the
collector's way:

- while it runs (`start`, from Controller.run), the collector makes no full collection of its
  own accord: the third threshold (`gc.set_threshold`) is raised out of reach. CPython starts a
  full collection after every 10 collections of generation 1 once the objects that reached
  generation 2 since the last one are a quarter of those there before; after a freeze that is
  almost always, and each one walked everything that reached generation 2 since the freeze: the
  pods the watch brought after a round's releases (tens of thousands of events at 100,000 pods),
  up to 600 ms per collection in the worker thread or on the loop (bench/bench_loop_stall.py).
  The young generations are collected as always (the thresholds found: CPython's 700 and 10);
- after every list (each page, then the picture rebuilt from it: `Informer(freeze_pages=True)`,
  `Controller._replace`), `gc.freeze()` moves everything alive into the permanent generation;
- after each round, at most once a `settle_seconds`, `Collector.settle` collects the young
  generations (the cycles that died young) and freezes what survived since: the pods the watch
  brought, the round's kept answers;
- every `churn_changes` changes applied to the picture (`churned`, from the pod and node
  events), the young generations are collected and what survived frozen too, rounds or not.
  CPython starts a young collection when its allocations minus its deallocations pass 700, and
  a watch event that replaces a pod allocates the new PodInfo and frees the old, frozen one: the
  count stays near zero while the young generation grows by every new pod. At 100,000 pods
  the young generation held 35,000-65,000 objects after a round's held events were applied,
  and the settle after it walked them all, 20-75 ms on the loop, as did whichever young
  collection in the worker thread came first (bench/bench_loop_stall.py);
- every `full_seconds` (an hour), a settle collects everything instead (`gc.unfreeze`, a full
  collection, `gc.freeze`): a cycle that became garbage after it reached generation 2 (a finished
  task's, an exception's traceback) is freed then, and not before. That one collection walks the
  whole picture, once an hour: seconds at 100,000 pods (1.4-3.3 s in bench_loop_stall's process,
  which also holds the objects it feeds the controller).

Objects frozen and later dropped are freed at once by their reference counts, as any: freezing
keeps the collector from walking them, not them alive. `frozen` and `full_collections` count
what it did.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

#: At most one settle per this many seconds (rounds may come every 50 ms).
SETTLE_SECONDS = 1.0
#: A full collection (everything unfrozen, collected, frozen again) this often.
FULL_SECONDS = 3600.0
#: A young collection (and a freeze) after this many changes applied to the picture: the
#: objects of a thousand pod events walked, under a millisecond.
CHURN_CHANGES = 1000
#: The third gc threshold while a controller runs: no full collection of the collector's own accord.
NO_FULL_COLLECTIONS = 2**30

_running = 0  # controllers started in this process (the thresholds are the process's)
_saved: tuple[int, int, int] | None = None


class Collector:
    """When the controller freezes what survived, and when it collects everything; see the module."""

    def __init__(self, settle_seconds: float = SETTLE_SECONDS, full_seconds: float = FULL_SECONDS,
                 clock: Callable[[], float] = time.monotonic, churn_changes: int = CHURN_CHANGES) -> None:
        self.settle_seconds = settle_seconds
        self.churn_changes = churn_changes
        self._churn = 0
        self.full_seconds = full_seconds
        self.clock = clock
        self._last_settle: float | None = None
        self._last_full = clock()
        self.frozen = 0  # settles and syncs that froze
        self.full_collections = 0

    def start(self) -> None:
        """A controller starts running in this process: no full collection of the collector's own
        accord from now on (the young generations' thresholds kept)."""
        global _running, _saved
        if _running == 0:
            _saved = gc.get_threshold()
            young, middle, _ = _saved
            gc.set_threshold(young, middle, NO_FULL_COLLECTIONS)
        _running += 1

    def stop(self) -> None:
        """The controller stopped: once no other one runs in the process, its garbage collection
        as it was (the thresholds it found; nothing frozen: what the controllers left behind,
        cycles too, is the collector's again, as for a test session that runs many of them)."""
        global _running, _saved
        _running = max(0, _running - 1)
        if _running == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None
            gc.unfreeze()

    def synced(self) -> None:
        """A list's objects, or a picture rebuilt from one, are alive now: freeze them."""
        gc.freeze()
        self.frozen += 1

    def settle(self) -> None:
        """After a round: the young generations collected and what survived frozen (at most once
        a settle_seconds), or, once a full_seconds, everything collected and frozen again."""
        now = self.clock()
        if now - self._last_full >= self.full_seconds:
            self._last_full = self._last_settle = now
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self.frozen += 1
            self.full_collections += 1
            return
        if self._last_settle is not None and now - self._last_settle < self.settle_seconds:
            return
        self._last_settle = now
        self._young()

    def churned(self) -> None:
        """One change applied to the picture (a watch event): every `churn_changes`, the young
        generations collected and what survived frozen (see the module)."""
        self._churn += 1
        if self._churn >= self.churn_changes:
            self._young()

    def _young(self) -> None:
        self._churn = 0
        gc.collect(1)
        gc.freeze()
        self.frozen += 1
