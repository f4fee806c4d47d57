"""The clock a component reads: the wall clock in production, a simulated one in replays and tests.

Everything the controller times by policy (bind timeouts, gang timeouts, starvation, promises'
deadlines, the decision's time, Events' timestamps) reads one `Clock`, so a
replay that runs a day of simulated time in minutes sees every policy fire on that day's clock.
Waits that pace the API itself (retry backoff, rate limits, an echo awaited from a watch) stay
on the real clock: they are about how fast the API server answers, not about the simulated day;
so does the controller's lease (ganggate.kube.leader reads the real time), which proves a live
process to the other replicas.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Time as a component sees it."""

    def now(self) -> float:
        """Seconds since the Unix epoch: what decisions, deadlines and timestamps use."""

    async def sleep_until(self, when: float) -> None:
        """Return once now() >= when."""


class WallClock:
    """The real time of this machine."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, when: float) -> None:
        delay = when - time.time()
        if delay > 0:
            await asyncio.sleep(delay)


WALL = WallClock()
