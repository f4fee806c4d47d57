"""Planning off the event loop: a round's `decide()` runs in a worker thread while the loop goes on
serving watches, lease renewals, releases and metrics.

The planner reads `ClusterState` without locks, so nothing may change it while it plans: every
change that arrives meanwhile (a watch event, a relist, promises given back by a release that
failed) is held by a `ChangeBuffer` and applied, in arrival order, once the round has acted on
its decisions. That is the order the on-loop round gave them too: there, events that arrived
during `decide()` waited in the loop's queue until the round returned.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ganggate.controller.round.timers import next_due
from ganggate.core.state.cluster import ClusterState

# How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms). With
# a round planned in a worker thread, the event loop waits for the GIL that long at every wake,
# on top of the OS's own scheduling: 1 ms halved the loop's p99 stall at 10,000 pods on the
# shared 2-core machine (bench/bench_loop_stall.py), and costs nothing while one thread runs.
GIL_SWITCH_SECONDS = 0.001


def share_the_gil() -> None:
    """Make a worker thread that plans hand the GIL to the event loop sooner (process-wide)."""
    if sys.getswitchinterval() > GIL_SWITCH_SECONDS:
        sys.setswitchinterval(GIL_SWITCH_SECONDS)


class ChangeBuffer:
    """Runs state changes at once, or holds them while a round plans (`planning`)."""

    def __init__(self) -> None:
        self.planning = False
        self._held: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self.held_total = 0  # changes that waited for a round, over the controller's life

    def apply(self, change: Callable[..., Any], *args: Any) -> None:
        if self.planning:
            self._held.append((change, args))
            self.held_total += 1
        else:
            change(*args)

    def flush(self) -> None:
        """Stop holding; apply what was held, in order."""
        self.planning = False
        held, self._held = self._held, deque()
        for change, args in held:
            change(*args)

    async def drain(self, slice_seconds: float = 0.002) -> None:
        """`flush` in slices of about `slice_seconds`, letting the loop run between them (a
        round's worth of watch events can take milliseconds to apply); changes that arrive
        meanwhile are held behind the others and applied in turn."""
        try:
            while self._held:
                deadline = time.perf_counter() + slice_seconds
                while True:  # at least one change per slice
                    change, args = self._held.popleft()
                    change(*args)
                    if not self._held or time.perf_counter() >= deadline:
                        break
                if self._held:
                    await asyncio.sleep(0)
        except BaseException:  # cancelled between slices: apply the rest at once, lose nothing
            self.flush()
            raise
        self.planning = False


def plan(state: ClusterState, now: float, *, policy: str, starvation_seconds: float,
         blind_seconds: float | None = None, timed_out: Any = (), card_policy: Any = None,
         whole_gpu_policy: Any = None, rounds: Any = None,
         node_lost_after: float | None = None) -> tuple[list[Any], list[Any], float | None]:
    """One round's decisions and waits, and when a round is next due on time alone. With
    `rounds` (a core.incremental.IncrementalRounds) the plan policy re-plans only what changed."""
    from ganggate.core.planner import decide

    if rounds is not None and policy == "plan":
        decisions, waitings = rounds.decide(state, now, starvation_seconds=starvation_seconds, blind_seconds=blind_seconds,
                                            card_policy=card_policy, whole_gpu_policy=whole_gpu_policy)
    else:
        decisions, waitings = decide(state, now, policy=policy, starvation_seconds=starvation_seconds,
                                     blind_seconds=blind_seconds,
                                     card_policy=card_policy, whole_gpu_policy=whole_gpu_policy)
    return decisions, waitings, next_due(state, now, starvation_seconds=starvation_seconds, timed_out=timed_out,
                                         blind_seconds=blind_seconds, node_lost_after=node_lost_after)


async def plan_in_thread(state: ClusterState, now: float, *, then: Callable[[], Any] | None = None,
                         **kwargs: Any) -> tuple[list[Any], list[Any], float | None]:
    """`plan` in a worker thread, then `then` there too (another read of the whole state, such
    as the gauges); the caller holds every state change until it returns."""

    def work() -> tuple[list[Any], list[Any], float | None]:
        out = plan(state, now, **kwargs)
        if then is not None:
            then()
        return out

    return await asyncio.to_thread(work)
