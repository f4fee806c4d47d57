"""Gang-aware preemption, the pure part: which whole gangs a waiting gang of higher priority
may evict, and the room it then holds until it is released there."""

from __future__ import annotations

import json

from ganggate.core.planner import decide
from ganggate.core.policy.preemption import PreemptionOptions, PreemptionPlan, plan_preemption
from ganggate.core.policy.reservation import annotation_value
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.outcome import Waiting
from ganggate.core.state.pods import PREEMPTION_ANNOTATION
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z


def ts(seconds: int) -> str:
    return f"2024-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def waiting_gang(name: str, n: int, gpus: int, *, priority: int = 1000, ns: str = "ml", created: int = 0,
                 **kw) -> list[dict]:
    return [make_pod(f"{name}-{i}", namespace=ns, gang=name, pod_num=n, gpus=gpus, priority=priority,
                     owner=name, created=ts(created), **kw) for i in range(n)]


def running_gang(name: str, nodes: list[str], gpus: int, *, priority: int = 0, ns: str = "ml", created: int = 0,
                 owner: bool = True) -> list[dict]:
    n = len(nodes)
    return [make_pod(f"{name}-{i}", namespace=ns, gang=name, pod_num=n, gpus=gpus, priority=priority,
                     gated=False, node_name=node, phase="Running", created=ts(created),
                     owner=name if owner else None, decision={"id": f"d-{name}", "node": node})
            for i, node in enumerate(nodes)]


def state_of(nodes: list[dict], pods: list[dict]) -> ClusterState:
    state = ClusterState()
    state.reset(nodes, pods)
    return state


def preempt(state: ClusterState, **options) -> tuple[PreemptionPlan | None, list]:
    decisions, waitings = decide(state, T0)
    assert not decisions
    return plan_preemption(state, waitings, T0, PreemptionOptions(**options))


def victims(plan: PreemptionPlan | None) -> list[str]:
    assert plan is not None
    return [v.name for v in plan.victims]


def nodes(n: int, gpus: int = 8) -> list[dict]:
    return [make_node(f"n{i}", gpus=gpus) for i in range(n)]


# ---- the choice of victims ------------------------------------------------------------------


def test_the_cheapest_whole_gangs_go_lowest_priority_then_fewest_gpus_then_youngest() -> None:
    pods = (running_gang("prio5", ["n0"], 8, priority=5)
            + running_gang("big", ["n1", "n1"], 4, created=0)
            + running_gang("old", ["n2"], 8, created=10)
            + running_gang("young", ["n3"], 8, created=20)
            + waiting_gang("urgent", 2, 8))
    plan, _ = preempt(state_of(nodes(4), pods))
    assert victims(plan) == ["ml/young", "ml/old"]  # 8 GPUs each < big's 8? tie broken by youth
    assert sorted(set(plan.placement.values())) == ["n2", "n3"]
    assert all(len(v.pods) == 1 for v in plan.victims)


def test_fewer_gpus_go_before_more_at_the_same_priority() -> None:
    pods = (running_gang("two-nodes", ["n0", "n1"], 8) + running_gang("half", ["n2"], 4, created=5)
            + [make_pod("other", gpus=4, node_name="n2", phase="Running", owner="x", priority=2000)]
            + waiting_gang("urgent", 1, 4))
    plan, _ = preempt(state_of(nodes(3), pods))
    assert victims(plan) == ["ml/half"]
    assert plan.placement == {"ml/urgent-0": "n2"}


def test_a_victim_is_always_a_whole_gang_even_when_part_of_it_would_do() -> None:
    pods = running_gang("low", ["n0", "n1"], 8) + waiting_gang("urgent", 1, 8)
    plan, _ = preempt(state_of(nodes(2), pods))
    assert victims(plan) == ["ml/low"]
    assert sorted(p.name for p in plan.victims[0].pods) == ["low-0", "low-1"]


def test_victims_not_needed_are_pruned_costliest_first() -> None:
    # Greedy takes small (4 GPUs on n0, beside a pod it may not evict), then cheap8 (n1);
    # the gang fits on n1 alone, so small is dropped again.
    keeper = make_pod("keeper", gpus=4, node_name="n0", phase="Running", owner="k", priority=5000)
    pods = ([keeper] + running_gang("small", ["n0"], 4, priority=0)
            + running_gang("cheap8", ["n1"], 8, priority=1) + waiting_gang("urgent", 1, 8))
    plan, _ = preempt(state_of(nodes(2), pods))
    assert victims(plan) == ["ml/cheap8"]


def test_only_strictly_lower_priority_is_preempted() -> None:
    pods = running_gang("peer", ["n0"], 8, priority=1000) + waiting_gang("urgent", 1, 8)
    plan, reasons = preempt(state_of(nodes(1), pods))
    assert plan is None and reasons == []  # nothing it could preempt: nothing to say


def test_preemption_policy_never_never_preempts() -> None:
    pods = running_gang("low", ["n0"], 8) + waiting_gang("polite", 1, 8)
    for pod in pods[-1:]:
        pod["spec"]["preemptionPolicy"] = "Never"
    plan, reasons = preempt(state_of(nodes(1), pods))
    assert plan is None and reasons[0].reason == "its preemptionPolicy is Never"


def test_bare_gangs_are_not_victims_unless_allowed() -> None:
    pods = running_gang("bare", ["n0"], 8, owner=False) + waiting_gang("urgent", 1, 8)
    assert preempt(state_of(nodes(1), pods))[0] is None
    assert victims(preempt(state_of(nodes(1), pods), bare_pods=True)[0]) == ["ml/bare"]


def test_ordinary_pods_are_not_victims_unless_allowed() -> None:
    ordinary = make_pod("web", namespace="apps", gpus=8, node_name="n0", phase="Running", owner="web")
    pods = [ordinary] + waiting_gang("urgent", 1, 8)
    assert preempt(state_of(nodes(1), pods))[0] is None
    assert victims(preempt(state_of(nodes(1), pods), ordinary_pods=True)[0]) == ["pod apps/web"]


def test_daemonset_pods_are_never_victims() -> None:
    ds = make_pod("agent", namespace="kube-system", gpus=8, node_name="n0", phase="Running")
    ds["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                          "uid": "u", "controller": True}]
    pods = [ds] + waiting_gang("urgent", 1, 8)
    assert preempt(state_of(nodes(1), pods), ordinary_pods=True, bare_pods=True)[0] is None


def test_no_preemption_when_it_would_not_help() -> None:
    # n0 would hold `huge` empty, but `keep` (higher priority than huge) is no victim.
    pods = running_gang("low", ["n0"], 4) + running_gang("keep", ["n0"], 4, priority=5000) + waiting_gang("huge", 1, 8)
    plan, reasons = preempt(state_of(nodes(1), pods))
    assert plan is None and "would still not make room" in reasons[0].reason


def test_victims_elsewhere_do_not_help_a_gang_pinned_by_its_selector() -> None:
    gpu_nodes = [make_node("a0", labels={"pool": "a"}), make_node("b0", labels={"pool": "b"})]
    pods = (running_gang("on-a", ["a0"], 8) + running_gang("on-b", ["b0"], 8)
            + waiting_gang("wants-b", 1, 8, node_selector={"pool": "b"}))
    assert victims(preempt(state_of(gpu_nodes, pods))[0]) == ["ml/on-b"]


def test_no_preemption_for_a_gang_that_fits_once_terminating_pods_finish() -> None:
    pods = running_gang("leaving", ["n0"], 8) + running_gang("low", ["n1"], 8) + waiting_gang("urgent", 1, 8)
    pods[0]["metadata"]["deletionTimestamp"] = ts(1)
    state = state_of(nodes(2), pods)
    decisions, waitings = decide(state, T0)
    assert not decisions and plan_preemption(state, waitings, T0)[0] is None
    # Even if the round called it unschedulable, the preemption would not go ahead.
    plan, reasons = plan_preemption(state, [Waiting(("ml", "urgent"), "GangUnschedulable", "")], T0)
    assert plan is None and "terminating pod finish" in reasons[0].reason


def test_the_highest_priority_waiting_gang_preempts_first_and_only_one_per_round() -> None:
    pods = (running_gang("low-a", ["n0"], 8) + running_gang("low-b", ["n1"], 8)
            + waiting_gang("mid", 1, 8, priority=100) + waiting_gang("top", 1, 8, priority=1000, created=5))
    plan, _ = preempt(state_of(nodes(2), pods))
    assert plan is not None and plan.preemptor == ("ml", "top")
    assert len(plan.victims) == 1


# ---- the reservation ------------------------------------------------------------------------


def reserve(pods: list[dict], gang: str, placement: dict[str, str], victims: list[str], until: int = 300) -> None:
    value = annotation_value("p1", ts(0), ts(until), placement, victims)
    for pod in pods:
        if pod["metadata"]["annotations"].get("scheduling.k8s.io/group-name") == gang:
            pod["metadata"]["annotations"][PREEMPTION_ANNOTATION] = value


def test_reserved_room_goes_to_the_preemptor_not_to_a_gang_behind_it() -> None:
    top = waiting_gang("top", 2, 8)
    victims_ = running_gang("low-a", ["n0"], 8) + running_gang("low-b", ["n1"], 8)
    for pod in victims_:
        pod["metadata"]["deletionTimestamp"] = ts(1)
    small = waiting_gang("small", 1, 8, priority=0, created=0)
    reserve(top, "top", {"ml/top-0": "n0", "ml/top-1": "n1"}, ["ml/low-a", "ml/low-b"])
    pods = top + victims_ + small
    # While the victims terminate, both wait; the preemptor says what for.
    decisions, waitings = decide(state_of(nodes(2), pods), T0)
    assert decisions == []
    why = {w.gang_key[1]: w.message for w in waitings}
    assert "room reserved on 2 nodes (n0, n1); waiting for 2 pods there to finish" in why["top"]
    # Once they are gone, only the preemptor goes, onto the reserved nodes.
    decisions, waitings = decide(state_of(nodes(2), top + small), T0)
    assert [(d.gang_key[1], d.placement) for d in decisions] == [("top", {"ml/top-0": "n0", "ml/top-1": "n1"})]


def test_a_reservation_ends_at_its_deadline() -> None:
    top = waiting_gang("top", 1, 8)
    small = waiting_gang("small", 1, 8, priority=0)
    reserve(top, "top", {"ml/top-0": "n0"}, [], until=60)
    state = state_of(nodes(2), top + small)
    assert len(decide(state, T0 + 30)[0]) == 2  # room for both: the reservation takes only its own
    busy = [make_pod("x", gpus=8, node_name="n1", phase="Running")]
    state = state_of(nodes(2), top + small + busy)
    assert [d.gang_key[1] for d in decide(state, T0 + 30)[0]] == ["top"]
    state.apply_pod("DELETED", top[0])
    assert [d.gang_key[1] for d in decide(state, T0 + 30)[0]] == ["small"]


def test_a_gang_with_a_reservation_does_not_preempt_again_nor_are_its_victims_chosen_twice() -> None:
    top = waiting_gang("top", 1, 8)
    reserve(top, "top", {"ml/top-0": "n0"}, ["ml/low-a"])
    pods = top + running_gang("low-a", ["n0"], 8) + running_gang("low-b", ["n1"], 8)
    pods += waiting_gang("second", 1, 8, priority=500)
    state = state_of(nodes(2), pods)
    _, waitings = decide(state, T0)
    plan, _ = plan_preemption(state, waitings, T0)
    assert plan is not None and plan.preemptor == ("ml", "second") and victims(plan) == ["ml/low-b"]


def test_annotation_names_pods_within_the_namespace() -> None:
    value = json.loads(annotation_value("id", ts(0), ts(5), {"ml/a-0": "n0"}, ["ml/x"]))
    assert value["nodes"] == {"a-0": "n0"} and value["victims"] == ["ml/x"]


def test_status_shows_a_preemptor_waiting_for_its_room() -> None:
    from ganggate.controller.status.tables import format_status

    top = waiting_gang("top", 1, 8)
    reserve(top, "top", {"ml/top-0": "n0"}, ["ml/low"])
    low = running_gang("low", ["n0"], 8)
    low[0]["metadata"]["deletionTimestamp"] = ts(1)
    state = state_of(nodes(1), top + low)
    text = format_status(state, *decide(state, T0), T0)
    line = next(row for row in text.splitlines() if row.startswith("ml/top"))
    assert "GangWaiting: preempting ml/low (preemption p1): room reserved on 1 node (n0); " \
           "waiting for 1 pod there to finish" in line


def test_a_reservation_written_in_part_holds_nothing() -> None:
    top = waiting_gang("top", 2, 8)
    reserve(top[:1], "top", {"ml/top-0": "n0", "ml/top-1": "n1"}, ["ml/low"])
    small = waiting_gang("small", 1, 8, priority=0)
    busy = [make_pod("x", gpus=8, node_name="n1", phase="Running")]
    decisions, _ = decide(state_of(nodes(2), top + small + busy), T0)
    assert [d.gang_key[1] for d in decisions] == ["small"]
