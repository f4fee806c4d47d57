"""Never more than declared (issue #19): at most group-pod-num live members of a gang are released,
in every gang state; the pods beyond wait gated, are named, and go when a member ends."""

from __future__ import annotations

from ganggate.core.incremental import IncrementalRounds
from ganggate.core.placement.explain import excess_note
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z
DECISION = {"id": "d1", "time": "2024-01-01T00:00:00Z", "gang": "ml/g", "pods": 3}


def ts(seconds: int) -> str:
    return f"2024-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def member(name: str, *, created: int = 0, running: bool = True, phase: str = "Running", **kw) -> dict:
    if not running:
        return make_pod(name, namespace="ml", gang="g", pod_num=3, gpus=1, created=ts(created), **kw)
    return make_pod(name, namespace="ml", gang="g", pod_num=3, gpus=1, created=ts(created), gated=False,
                    node_name="n0", phase=phase, decision=DECISION, **kw)


def state_of(pods: list[dict]) -> ClusterState:
    state = ClusterState()
    state.reset([make_node("n0", gpus=8), make_node("n1", gpus=8)], pods)
    return state


def released_now(state: ClusterState) -> set[str]:
    decisions, _ = decide(state, T0)
    return {key.split("/", 1)[1] for d in decisions for key in d.placement}


def test_a_fourth_pod_of_a_running_gang_of_three_is_not_released() -> None:
    state = state_of([member(f"w-{i}") for i in range(3)] + [member("w-3", created=5, running=False)])
    gang = state.gangs[("ml", "g")]
    assert gang.release_room == 0
    assert [p.name for p in gang.excess_pods()] == ["w-3"]
    assert released_now(state) == set()
    assert excess_note(gang) == ("GangExcessMember: 1 pod beyond group-pod-num 3 held gated (w-3) "
                                 "until a live member ends")


def test_the_replacement_of_a_failed_member_goes_and_the_oldest_extra_first() -> None:
    pods = [member("w-0", phase="Failed"), member("w-1"), member("w-2"),
            member("w-4", created=9, running=False), member("w-3", created=5, running=False)]
    state = state_of(pods)
    gang = state.gangs[("ml", "g")]
    assert gang.release_room == 1
    assert [p.name for p in gang.excess_pods()] == ["w-4"]
    assert released_now(state) == {"w-3"}


def test_a_waiting_gang_with_more_pods_than_declared_releases_the_oldest_declared_number() -> None:
    pods = [member(f"w-{i}", created=i, running=False) for i in range(5)]
    state = state_of(pods)
    assert state.gangs[("ml", "g")].state == "waiting"
    assert released_now(state) == {"w-0", "w-1", "w-2"}
    assert [p.name for p in state.gangs[("ml", "g")].excess_pods()] == ["w-3", "w-4"]


def test_an_elastic_gang_started_with_its_minimum_takes_extras_only_up_to_its_number() -> None:
    released = [make_pod(f"e-{i}", namespace="ml", gang="e", pod_num=3, min_available=2, gpus=1, gated=False,
                         node_name="n0", phase="Running", decision=dict(DECISION, gang="ml/e")) for i in range(2)]
    extras = [make_pod(f"e-{i}", namespace="ml", gang="e", pod_num=3, min_available=2, gpus=1, created=ts(i))
              for i in (2, 3, 4)]
    state = state_of(released + extras)
    gang = state.gangs[("ml", "e")]
    assert gang.state == "started"
    assert released_now(state) == {"e-2"}
    assert [p.name for p in gang.excess_pods()] == ["e-3", "e-4"]


def test_incremental_rounds_hold_the_same_limit() -> None:
    state = state_of([member(f"w-{i}") for i in range(3)] + [member("w-3", created=5, running=False)])
    decisions, _ = IncrementalRounds().decide(state, T0)
    assert decisions == []
