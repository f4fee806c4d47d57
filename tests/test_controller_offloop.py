"""A round plans in a worker thread: the event loop goes on meanwhile, the changes that arrive are
held until the round has acted (the planner never sees the state change under it), and a leader
whose lease lapsed while it planned releases nothing."""

from __future__ import annotations

import asyncio
import threading
import weakref

import pytest
from kubernetes_asyncio import client

from ganggate.controller.round import offloop
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.core.state.letgo import let_go
from ganggate.core.state.snapshot import make_node, make_pod


class Leader:
    is_leader = True


@pytest.fixture
async def controller():
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # nothing is called
    ctl = Controller(api, ControllerConfig(leader_election=False, preemption="off", protect_running_gangs=False))
    ctl.released = []
    ctl._start_release = lambda decision, now: ctl.released.append(decision.gang_key)
    ctl._on_node_event("ADDED", make_node("n0", gpus=8))
    for i in range(2):
        ctl._on_pod_event("ADDED", make_pod(f"a-{i}", gang="a", pod_num=2, gpus=1, gated=True))
    yield ctl
    await api.close()


@pytest.fixture
def blocked_planner(monkeypatch):
    """The planner, held in its thread until the test lets it go; records what it saw."""
    started, proceed = threading.Event(), threading.Event()
    seen: list[int] = []
    real = offloop.plan

    def plan(state, now, **kwargs):
        seen.append(len(state.pods))
        started.set()
        assert proceed.wait(60), "the test never let the planner go"
        seen.append(len(state.pods))
        return real(state, now, **kwargs)

    monkeypatch.setattr(offloop, "plan", plan)
    return started, proceed, seen


async def until(flag: threading.Event) -> None:
    while not flag.is_set():
        await asyncio.sleep(0.005)


async def test_changes_during_planning_wait_for_the_round_and_the_loop_runs_meanwhile(controller, blocked_planner):
    started, proceed, seen = blocked_planner
    round_task = asyncio.create_task(controller.round_off_loop(1e9))
    await until(started)
    # The loop runs this while the planner is still planning: the new pod is held, not applied.
    controller._on_pod_event("ADDED", make_pod("b-0", gang="b", pod_num=1, gpus=1, gated=True))
    controller._on_node_event("DELETED", make_node("n0", gpus=8))
    assert "default/b-0" not in controller.state.pods and "n0" in controller.state.nodes
    assert not controller.idle
    proceed.set()
    await round_task
    assert seen == [2, 2]  # the planner saw no change under it
    assert controller.released == [("default", "a")]  # decided on the state it planned over
    assert "default/b-0" in controller.state.pods and "n0" not in controller.state.nodes  # then applied


async def test_a_leader_whose_lease_lapsed_while_planning_releases_nothing(controller, blocked_planner):
    started, proceed, _ = blocked_planner
    controller.leader = Leader()
    round_task = asyncio.create_task(controller.round_off_loop(1e9))
    await until(started)
    controller.leader.is_leader = False  # renewal late: no longer leading
    controller._on_pod_event("ADDED", make_pod("b-0", gang="b", pod_num=1, gpus=1, gated=True))
    proceed.set()
    await round_task
    assert controller.released == []
    assert "default/b-0" in controller.state.pods  # the held change is not lost


async def test_on_the_loop_and_off_it_a_round_decides_the_same(controller):
    controller.round(1e9)
    on_loop = list(controller.released)
    controller.released.clear()
    controller.state.cancel_promises(["default/a-0", "default/a-1"])
    await controller.round_off_loop(1e9)
    assert on_loop == controller.released == [("default", "a")]


def test_the_planning_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="planning must be one of thread, loop"):
        ControllerConfig(planning="process").validate()


async def test_held_changes_are_applied_in_order_in_slices_and_all_of_them_if_cancelled() -> None:
    from ganggate.controller.round.offloop import ChangeBuffer

    applied: list[int] = []
    buffer = ChangeBuffer()
    buffer.planning = True
    for i in range(5000):
        buffer.apply(applied.append, i)
    assert applied == []
    await buffer.drain(slice_seconds=0.0)  # one change per slice: the loop runs between them
    assert applied == list(range(5000)) and not buffer.planning
    applied.clear()
    buffer.planning = True
    for i in range(100):
        buffer.apply(applied.append, i)
    task = asyncio.create_task(buffer.drain(slice_seconds=0.0))
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert applied == list(range(100)) and not buffer.planning


def test_a_replaced_picture_is_let_go_of_entry_by_entry_unless_something_else_holds_a_part() -> None:
    class Pod:
        pass

    pods = {f"ns/p{i}": Pod() for i in range(1000)}
    alive = weakref.ref(pods["ns/p7"])
    shared = {"kept": Pod()}  # also the new picture's: not emptied
    parts = {"pods": pods, "nodes": ["n1", "n2"], "dirty": {"n1"}, "dra": shared, "version": 3}
    del pods
    let_go(parts)
    assert parts == {} and alive() is None
    assert list(shared) == ["kept"]
