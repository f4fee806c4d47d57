"""Garbage collection for a controller that holds the picture of a large cluster.

CPython's cycle collector walks every object it tracks in the generations it collects, holding
the GIL, on whichever thread happened to allocate: at 100,000 pods a full (generation 2)
collection over the picture took 40-160 ms, mostly on the event loop (`gc.callbacks`, during
bench/bench_loop_stall.py), where it stalls every watch, lease renewal and release. The picture
is long-lived: its objects are replaced by watch events (and freed by their reference counts)
far more often than they end up in a garbage cycle. So, as long-running Python services do
(`gc.freeze`, the docs' advice for long-lived objects), the controller keeps it out of the
collector's way:

- after every list (each page, then the picture rebuilt from it: `Informer(freeze_pages=True)`,
  `Controller._replace`), `gc.freeze()` moves everything alive into the permanent generation;
- after each round, at most once a `settle_seconds`, `Collector.settle` collects the young
  generations (0 and 1: the cycles that died young, a millisecond's work) and freezes what
  survived since: the pods the watch brought, the round's kept answers. A full collection then
  walks only what was made since the last settle, not the picture;
- every `full_seconds` (an hour), a settle collects everything instead (`gc.unfreeze`, a full
  collection, `gc.freeze`): a cycle that became garbage after it was frozen (a finished task's,
  an exception's traceback) is freed then, and not before. That one collection walks the whole
  picture (about a second at 100,000 pods), once an hour.

Objects frozen and later dropped are freed at once by their reference counts, as any: freezing
keeps the collector from walking them, not them alive. `frozen` and `full_collections` count
what it did (tests, metrics).
"""

from __future__ import annotations

import gc
import time
from typing import Callable

#: At most one settle per this many seconds (rounds may come every 50 ms).
SETTLE_SECONDS = 1.0
#: A full collection (everything unfrozen, collected, frozen again) this often.
FULL_SECONDS = 3600.0


class Collector:
    """When the controller freezes what survived, and when it collects everything; see the module."""

    def __init__(self, settle_seconds: float = SETTLE_SECONDS, full_seconds: float = FULL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settle_seconds = settle_seconds
        self.full_seconds = full_seconds
        self.clock = clock
        self._last_settle: float | None = None
        self._last_full = clock()
        self.frozen = 0  # settles and syncs that froze
        self.full_collections = 0

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
        gc.collect(1)
        gc.freeze()
        self.frozen += 1
