"""The preemption search on the incremental rounds' kept Capacity plans what it plans on one built
from the whole state, and gives back everything it took (the next round sees the cluster's free)."""

from __future__ import annotations

from ganggate.core.incremental import IncrementalRounds
from ganggate.core.placement.capacity import Capacity
from ganggate.core.policy.preemption import plan_preemption
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

NOW = 1704067200.0 + 60


def _cluster() -> ClusterState:
    """Four full nodes of 8 GPUs running low-priority owned gangs, and a high-priority gang
    of two 8-GPU pods that fits nowhere."""
    state = ClusterState()
    nodes = [make_node(f"n{i}", gpus=8) for i in range(4)]
    pods = []
    for i in range(4):
        for j in range(2):
            pods.append(make_pod(f"low{i}-{j}", namespace="ml", gang=f"low{i}", pod_num=2, gpus=4, gated=False,
                                 node_name=f"n{i}", phase="Running", owner=f"low{i}", priority=i,
                                 decision={"id": f"d{i}", "node": f"n{i}", "time": "2024-01-01T00:00:00Z"}))
    pods += [make_pod(f"hi-{j}", namespace="ml", gang="hi", pod_num=2, gpus=8, priority=100, owner="hi")
             for j in range(2)]
    state.reset(nodes, pods)
    return state


def test_the_search_on_the_kept_capacity_plans_the_same_and_gives_everything_back() -> None:
    state = _cluster()
    rounds = IncrementalRounds()
    decisions, waitings = rounds.decide(state, NOW)
    assert not decisions
    rounds.decide(state, NOW)  # an incremental round: the capacity is kept
    base = rounds.capacity_now(state)
    assert base is not None
    before = {name: dict(free) for name, free in base.free.items()}

    kept_plan, kept_reasons = plan_preemption(state, waitings, NOW, base=base)
    built_plan, built_reasons = plan_preemption(state, waitings, NOW)

    assert kept_plan is not None and built_plan is not None
    assert [v.name for v in kept_plan.victims] == [v.name for v in built_plan.victims] == ["ml/low0", "ml/low1"]
    assert kept_plan.placement == built_plan.placement
    assert kept_reasons == built_reasons
    assert base.free == before == Capacity.from_state(state).free
    assert rounds.decide(state, NOW) == rounds.decide(state, NOW)  # the kept rounds go on as before


def test_victims_kept_between_searches_follow_the_gangs_that_change() -> None:
    """The Victims a search keeps for the next (VictimMemo) are those it would build: a kept
    gang that starts being deleted, or whose pod ends, is seen as it is now."""

    from ganggate.core.policy.preemption import VictimMemo

    state = _cluster()
    _, waitings = IncrementalRounds().decide(state, NOW)
    memo = VictimMemo()
    plan, _ = plan_preemption(state, waitings, NOW, memo=memo)
    assert plan is not None and [v.name for v in plan.victims] == ["ml/low0", "ml/low1"]
    again, _ = plan_preemption(state, waitings, NOW, memo=memo)  # (kept: the same victims)
    assert again is not None and [v.name for v in again.victims] == ["ml/low0", "ml/low1"]
    pod = make_pod("low0-0", namespace="ml", gang="low0", pod_num=2, gpus=4, gated=False, node_name="n0",
                   phase="Running", owner="low0", priority=0,
                   decision={"id": "d0", "node": "n0", "time": "2024-01-01T00:00:00Z"})
    pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:30Z"  # low0 is being torn down: no victim
    state.apply_pod("MODIFIED", pod)
    kept, _ = plan_preemption(state, waitings, NOW, memo=memo)
    built, _ = plan_preemption(state, waitings, NOW)
    assert kept is not None and built is not None
    assert [v.name for v in kept.victims] == [v.name for v in built.victims] == ["ml/low1", "ml/low2"]
