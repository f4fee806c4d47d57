"""Cancelling a wait on an asyncio.Event must never be lost.

On Python 3.11, `asyncio.wait_for(event.wait(), timeout)` returns normally instead of raising
CancelledError when the event is set in the same moment the waiting task is cancelled (CPython
gh-86296, fixed in 3.12 only). The controller's decision loop waited that way on `_dirty`: a
stop that came while a watch event poked the loop was swallowed, the loop ran on, and
`Controller.run()` (which does not cancel twice) waited for it forever; bench_release hung in
its clean-up that way. kubesim's watch streams waited the same way for their next event.
"""

from __future__ import annotations

import asyncio

import pytest

from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.sim import Simulator
from ganggate.sim.apiserver.watch import Watcher


async def _settles(task: asyncio.Task, iterations: int = 200) -> bool:
    """Let the loop run a bounded number of iterations (not seconds); True once the task is done."""
    for _ in range(iterations):
        if task.done():
            return True
        await asyncio.sleep(0)
    return task.done()


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_decision_loop_stops_when_cancelled_as_an_event_pokes_it(turns):
    from kubernetes_asyncio import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    try:
        controller = Controller(api, ControllerConfig(leader_election=False, tick_seconds=3600.0,
                                                      debounce_seconds=0.0))
        controller._dirty = asyncio.Event()
        task = asyncio.create_task(controller._loop())
        for _ in range(5):
            await asyncio.sleep(0)  # the loop now waits for _dirty
        assert not task.done()
        controller._poke()  # a watch event arrives ...
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()  # ... as the controller is being stopped
        assert await _settles(task), "the decision loop swallowed its cancellation and runs on"
        assert task.cancelled()
    finally:
        await api.close()


async def test_controller_run_ends_when_stopped_during_a_poke():
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        for turns in range(4):
            api = sim.api_client()
            try:
                controller = Controller(api, ControllerConfig(leader_election=False, tick_seconds=3600.0,
                                                              debounce_seconds=0.0))
                run = asyncio.create_task(controller.run())
                while not controller.synced:
                    await asyncio.sleep(0.01)
                for _ in range(5):
                    await asyncio.sleep(0)
                controller._poke()
                for _ in range(turns):
                    await asyncio.sleep(0)
                run.cancel()
                done, _ = await asyncio.wait({run}, timeout=30)  # a hang guard, not a speed check
                assert done, f"Controller.run() did not end after cancel (turns={turns})"
            finally:
                await api.close()


@pytest.mark.parametrize("turns", [0, 1, 2])
async def test_watch_stream_wait_is_cancelled_even_as_an_event_arrives(turns):
    watcher = Watcher("pods", None, None, max_buffer=10)
    task = asyncio.create_task(watcher.wait(3600.0))
    for _ in range(3):
        await asyncio.sleep(0)
    watcher.push_raw(b"{}\n")
    for _ in range(turns):
        await asyncio.sleep(0)
    requested = task.cancel()  # False when the wait already returned for the event
    assert await _settles(task)
    assert task.cancelled() or not requested, "Watcher.wait() swallowed its cancellation"


async def test_a_controller_that_makes_no_round_still_waits_the_debounce_between_passes():
    """A standby (here: not synced) controller passes through its loop without a round; each pass
    must still count for the debounce, or it would run once per watch event."""
    from kubernetes_asyncio import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    try:
        controller = Controller(api, ControllerConfig(leader_election=False, tick_seconds=3600.0,
                                                      debounce_seconds=3600.0))
        controller._dirty = asyncio.Event()
        passes = []
        clear = controller._dirty.clear
        controller._dirty.clear = lambda: (passes.append(1), clear())[1]
        task = asyncio.create_task(controller._loop())
        try:
            controller._poke()
            for _ in range(20):
                await asyncio.sleep(0)
            assert len(passes) == 1  # the first pass after a quiet spell comes at once
            for _ in range(10):
                controller._poke()
                for _ in range(20):
                    await asyncio.sleep(0)
            assert len(passes) == 1, "each watch event made a pass of its own"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await api.close()
