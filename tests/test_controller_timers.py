"""When the controller must run a round on time alone: the earliest bind-timeout deadline, gang
timeout or starvation hold-back still ahead, or none."""

from __future__ import annotations

from ganggate.controller.round.timers import PAST, next_due
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.pods import parse_time
from ganggate.core.state.snapshot import make_node, make_pod

T0 = "2027-01-01T00:00:00Z"
START = parse_time(T0)


def state_with(*pods: dict) -> ClusterState:
    state = ClusterState()
    state.reset([make_node("n0", gpus=8)], list(pods))
    return state


def test_nothing_waiting_means_nothing_due() -> None:
    assert next_due(state_with(), START, starvation_seconds=300) is None


def test_a_complete_gang_that_waits_is_due_for_its_hold_back_just_after_the_starvation_limit() -> None:
    state = state_with(*(make_pod(f"big-{i}", gang="big", pod_num=2, gpus=8, gated=True, created=T0) for i in range(2)))
    assert state.gangs[("default", "big")].state == "waiting"
    assert next_due(state, START + 10, starvation_seconds=300) == START + 300 + PAST
    assert next_due(state, START + 301, starvation_seconds=300) is None  # already starving: nothing ahead


def test_a_gang_timeout_is_due_unless_reported_and_a_promise_deadline_comes_first() -> None:
    pods = [make_pod(f"t-{i}", gang="t", pod_num=3, gpus=1, gated=True, created=T0) for i in range(2)]
    for pod in pods:
        pod["metadata"]["annotations"]["scheduling.k8s.io/group-timeout-seconds"] = "60"
    state = state_with(*pods)  # incomplete: 2 of 3
    assert next_due(state, START, starvation_seconds=300) == START + 60 + PAST
    assert next_due(state, START, starvation_seconds=300, timed_out=[("default", "t")]) is None
    released = make_pod("r-0", gang="r", pod_num=1, gpus=1, gated=True, created=T0)
    state = state_with(*pods, released)
    state.promise(("default", "r"), {"default/r-0": "n0"}, START + 30)
    assert next_due(state, START, starvation_seconds=300) == START + 30
