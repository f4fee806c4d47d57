"""The checker the disruption end-to-end tests share (ganggate/replay/results/gangcheck.py does the judging).

`GangSampler` reads the simulator's pods every 100 ms of *simulated* time (on the clock the
simulator's components run on) and integrates the GPUs held by incomplete gangs: a measurement
for the record, never asserted. `assert_every_gang_whole_or_waiting` is the final-state check:
every gang either whole and running or with no pod bound; `wait_quiet` waits (a safety net,
not a timing assertion) until the pods stop changing, so that check reads an end state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ganggate.replay.results.gangcheck import GpuSecondsMeter, gang_states, incomplete_gpus, partly_bound

SAMPLE_SECONDS = 0.1


class GangSampler:
    """Samples GPUs held by incomplete gangs every 100 ms of simulated time, in-process."""

    def __init__(self, sim: Any, clock: Any, interval: float = SAMPLE_SECONDS) -> None:
        self.sim, self.clock, self.interval = sim, clock, interval
        self.meter = GpuSecondsMeter()
        self.partial_seen: set[str] = set()
        self._task: asyncio.Task | None = None

    def sample(self) -> None:
        pods = self.sim.store.list("pods")
        self.meter.add(self.clock.now(), incomplete_gpus(pods))
        self.partial_seen.update(k for k, s in gang_states(pods).items() if not (s.whole_running or s.waiting))

    async def _run(self) -> None:
        while True:
            self.sample()
            await self.clock.sleep_until(self.clock.now() + self.interval)
            await asyncio.sleep(0)

    def start(self) -> GangSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def stop(self) -> float:
        """Stop sampling; the GPU-seconds held by incomplete gangs over the run."""
        self.sample()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.meter.total


def pods_rv(sim: Any) -> int:
    return max((int(p["metadata"]["resourceVersion"]) for p in sim.store.list("pods")), default=0)


async def wait_quiet(sim: Any, quiet: float = 0.6, timeout: float = 30.0) -> None:
    """Wait until no pod has changed for `quiet` wall seconds (a safety net, not an assertion)."""
    deadline = time.monotonic() + timeout
    last, since = pods_rv(sim), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        rv = pods_rv(sim)
        if rv != last:
            last, since = rv, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError("the pods kept changing")


def assert_every_gang_whole_or_waiting(pods: list[dict]) -> None:
    """Every gang whole and running, or with no pod bound: never partly bound."""
    broken = partly_bound(pods)
    assert not broken, "gangs partly bound:\n  " + "\n  ".join(broken)
