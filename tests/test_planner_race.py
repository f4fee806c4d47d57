"""The race between ungating and binding: a gang is never released into room that an
already-schedulable pending pod could take first (that would leave the gang partly bound)."""

from __future__ import annotations

from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0


def gang(name: str, n: int, gpus: int) -> list[dict]:
    return [make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=n, gpus=gpus) for i in range(n)]


def pending(name: str, gpus: int, **kw) -> dict:
    """An ordinary pod the default scheduler has not bound yet."""
    return make_pod(name, namespace="web", gpus=gpus, **kw)


def state_of(nodes: list[dict], pods: list[dict]) -> ClusterState:
    state = ClusterState()
    state.reset(nodes, pods)
    return state


def test_a_gang_waits_while_a_pending_pod_could_take_its_room() -> None:
    state = state_of([make_node("n1")], gang("job", 2, 4) + [pending("p", 4)])
    decisions, waiting = decide(state, T0)
    assert decisions == []
    [wait] = waiting
    assert wait.event_reason == "GangWaiting"
    assert "web/p" in wait.message and "n1" in wait.message and "partly bound" in wait.message


def test_once_the_pending_pod_is_bound_the_gang_is_judged_on_what_is_left() -> None:
    state = state_of([make_node("n1")], gang("job", 2, 4) + [pending("p", 4)])
    state.apply_pod("MODIFIED", pending("p", 4, node_name="n1", phase="Running"))
    decisions, waiting = decide(state, T0)
    assert decisions == []
    assert [w.event_reason for w in waiting] == ["GangUnschedulable"]
    state.apply_pod("DELETED", pending("p", 4, node_name="n1", phase="Running"))
    decisions, _ = decide(state, T0)
    assert [d.gang_key for d in decisions] == [("ml", "job")]


def test_the_gang_goes_around_a_contested_node() -> None:
    # p may only use n1; the gang fits on n2 as well, so it goes there now.
    nodes = [make_node("n1", labels={"pool": "a"}), make_node("n2", labels={"pool": "b"})]
    pods = gang("job", 1, 8) + [pending("p", 4, node_selector={"pool": "a"})]
    decisions, waiting = decide(state_of(nodes, pods), T0)
    assert waiting == []
    assert decisions[0].placement == {"ml/job-0": "n2"}


def test_pods_that_fit_beside_the_gang_or_nowhere_do_not_hold_it_up() -> None:
    nodes = [make_node("n1")]
    pods = gang("job", 1, 4) + [pending("small", 2), pending("huge", 16), pending("cpu", 0)]
    decisions, waiting = decide(state_of(nodes, pods), T0)
    assert waiting == []
    assert decisions[0].placement == {"ml/job-0": "n1"}


def test_pods_behind_another_gate_or_of_a_pinned_release_are_not_rivals() -> None:
    nodes = [make_node("n1")]
    other_gate = pending("queued", 4)
    other_gate["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    state = state_of(nodes, gang("job", 1, 4) + [other_gate])
    decisions, waiting = decide(state, T0)
    assert waiting == [] and len(decisions) == 1
    # The released, pinned pod holds its room as a promise; a second gang is judged
    # against what is left, not held up by it.
    state.promise(("ml", "job"), decisions[0].placement, deadline=T0 + 60)
    released = make_pod("job-0", namespace="ml", gang="job", pod_num=1, gpus=4, gated=False)
    state.apply_pod("MODIFIED", released)
    for pod in gang("next", 1, 4):
        state.apply_pod("ADDED", pod)
    decisions, waiting = decide(state, T0)
    assert [d.gang_key for d in decisions] == [("ml", "next")] and waiting == []


def test_an_unpinned_release_is_a_rival_for_the_next_gang() -> None:
    # job-0 (4 GPUs) is released without a node; next (8 GPUs) would leave it no room.
    state = state_of([make_node("n1")], gang("job", 1, 4) + gang("next", 1, 8))
    state.promise(("ml", "job"), {"ml/job-0": None}, deadline=T0 + 60)  # --placement=free
    state.apply_pod("MODIFIED", make_pod("job-0", namespace="ml", gang="job", pod_num=1, gpus=4, gated=False))
    decisions, waiting = decide(state, T0)
    assert decisions == []
    assert waiting[0].gang_key == ("ml", "next") and "ml/job-0" in waiting[0].message
