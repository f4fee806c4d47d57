"""Time for the simulator's kubelet: the wall clock, optionally compressed, or a manual clock.

The kubelet stand-in finishes a pod `kubesim.io/run-seconds` after it starts. With `WallClock`
those seconds pass `time_scale` times faster than real time (a day of trace in minutes); with
`ManualClock` they pass only when a driver (the trace replay) advances the clock, which makes
a replay deterministic.

`epoch()` is the same clock read as Unix time: what the API server stamps on objects
(creationTimestamp). kube-apiserver stamps them with its own clock when it creates an object
(k8s.io/apiserver/pkg/registry/rest/create.go BeforeCreate -> FillObjectMetaSystemFields sets
CreationTimestamp to metav1.Now()); a simulated API server's own clock is the simulated one, so
that a controller reading the same clock ages pods in simulated time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Simulated seconds since the clock started."""

    async def sleep_until(self, when: float) -> None:
        """Return once now() >= when."""

    def epoch(self) -> float:
        """now() as Unix time (what the API server stamps)."""


class WallClock:
    """Real time, sped up by `time_scale` (1.0 = real time)."""

    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale
        self._start = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._start) * self.time_scale

    def epoch(self) -> float:
        """The real time: objects are stamped as a real API server stamps them (unscaled)."""
        return time.time()

    async def sleep_until(self, when: float) -> None:
        delay = (when - self.now()) / self.time_scale
        if delay > 0:
            await asyncio.sleep(delay)


class ManualClock:
    """Time that moves only when `advance_to` is called; sleepers wake in time order.

    `epoch_start` is the Unix time that `start` stands for (default: the real time when the
    clock was made, in whole seconds as timestamps are, so that a replay is the same every time)."""

    def __init__(self, start: float = 0.0, epoch_start: float | None = None) -> None:
        self._now = start
        self._epoch_offset = (float(int(time.time())) if epoch_start is None else epoch_start) - start
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._counter = itertools.count()

    def now(self) -> float:
        return self._now

    def epoch(self) -> float:
        return self._epoch_offset + self._now

    async def sleep_until(self, when: float) -> None:
        if when <= self._now:
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._counter), future))
        await future

    def next_wakeup(self) -> float | None:
        """The earliest time a sleeper waits for, or None."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance_to(self, when: float) -> None:
        """Move time forward to `when`, waking every sleeper due by then."""
        if when < self._now:
            raise ValueError(f"time cannot go back: {when} < {self._now}")
        self._now = when
        while self._sleepers and self._sleepers[0][0] <= when:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
