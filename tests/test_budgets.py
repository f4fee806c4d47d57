"""Which gangs get a PodDisruptionBudget of ganggate's (#8): none over a budget someone else made
(two budgets over one pod make the eviction subresource answer 500), none for the victims of a
preemption, none for a gang being torn down; and which budgets cover a pod, as the eviction
subresource (pkg/registry/core/pod/storage/eviction.go) judges it."""

from __future__ import annotations

import pytest

from ganggate.controller.lifecycle.protection import plan_budgets, preemption_victims
from ganggate.core.policy.budgets import covers, foreign_budgets_over, is_ours, selector_matches
from ganggate.core.policy.reservation import annotation_value
from ganggate.core.state.cluster import ClusterState, PodInfo
from ganggate.core.state.pods import PREEMPTION_ANNOTATION
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z


def budget(name: str, selector: dict | None, namespace: str = "default", labels: dict | None = None) -> dict:
    spec = {"minAvailable": 1}
    if selector is not None:
        spec["selector"] = selector
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


def ours(gang: str) -> dict:
    return budget(f"ganggate-{gang}", {"matchLabels": {"ganggate.io/gang": gang}},
                  labels={"ganggate.io/gang": gang, "app.kubernetes.io/managed-by": "ganggate"})


def released(name: str, gang: str, n: int = 2, app: str | None = None, terminating: bool = False) -> dict:
    pod = make_pod(name, gang=gang, pod_num=n, gpus=4, gated=False, node_name="n1", phase="Running", owner=gang,
                   decision={"id": f"d-{gang}", "node": "n1"})
    pod["metadata"]["labels"] = {"ganggate.io/gang": gang, "app": app or gang}
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    return pod


def state_of(*pods: dict) -> ClusterState:
    state = ClusterState()
    state.reset([make_node("n1", gpus=64), make_node("n2", gpus=64)], list(pods))
    return state


LABELS = {"app": "train", "tier": "gpu"}


@pytest.mark.parametrize(("selector", "matches"), [
    ({"matchLabels": {"app": "train"}}, True),
    ({"matchLabels": {"app": "other"}}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, False),
    ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
    ({"matchLabels": {"app": "train"}, "matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
    # eviction.go: "If a PDB with a nil or empty selector creeps in, it should match nothing"
    (None, False),
    ({}, False),
    ({"matchLabels": {}, "matchExpressions": []}, False),
    # an invalid selector (LabelSelectorAsSelector fails) matches nothing
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),
])
def test_a_selector_matches_as_the_eviction_subresource_reads_it(selector, matches) -> None:
    assert selector_matches(selector, LABELS) is matches


def test_a_budget_covers_only_pods_of_its_namespace_and_ours_are_told_apart() -> None:
    pod = PodInfo.from_pod(released("t-0", "train"))
    assert covers(budget("team", {"matchLabels": {"app": "train"}}), pod)
    assert not covers(budget("team", {"matchLabels": {"app": "train"}}, namespace="other"), pod)
    assert is_ours(ours("train"))
    assert not is_ours(budget("team", {"matchLabels": {"app": "train"}}))
    # labelled like ours but named otherwise, or not managed by ganggate: someone else's
    assert not is_ours(budget("mine", {"matchLabels": {"ganggate.io/gang": "train"}},
                              labels={"ganggate.io/gang": "train", "app.kubernetes.io/managed-by": "ganggate"}))
    assert not is_ours(budget("ganggate-train", {"matchLabels": {"app": "train"}}, labels={"ganggate.io/gang": "train"}))


def test_a_user_budget_over_any_pod_of_a_gang_means_ganggate_makes_none_and_drops_its_own() -> None:
    state = state_of(released("t-0", "train", app="t0"), released("t-1", "train", app="t1"),
                     released("o-0", "other", n=1))
    team = budget("team", {"matchLabels": {"app": "t1"}})  # covers one pod of train only
    assert foreign_budgets_over(state.gangs[("default", "train")], [team, ours("other")]) == ["team"]

    plan = plan_budgets(state.gangs, {}, foreign=[team])
    assert [b["metadata"]["name"] for b in plan.create] == ["ganggate-other"]
    assert plan.covered == {("default", "train"): ["team"]}
    # A user's budget made after ours: ours goes.
    plan = plan_budgets(state.gangs, {("default", "ganggate-train"): "train", ("default", "ganggate-other"): "other"},
                        foreign=[team, ours("train"), ours("other")])
    assert (plan.create, plan.delete) == ([], [("default", "ganggate-train")])
    # Gone again: ours comes back.
    plan = plan_budgets(state.gangs, {("default", "ganggate-other"): "other"}, foreign=[ours("other")])
    assert [b["metadata"]["name"] for b in plan.create] == ["ganggate-train"] and plan.covered == {}


def test_budgets_that_do_not_cover_a_gang_pod_change_nothing() -> None:
    state = state_of(released("t-0", "train"), released("t-1", "train"))
    elsewhere = [budget("team", {"matchLabels": {"app": "train"}}, namespace="other"),
                 budget("empty", {}), budget("nil", None), budget("web", {"matchLabels": {"app": "web"}})]
    plan = plan_budgets(state.gangs, {}, foreign=elsewhere)
    assert [b["metadata"]["name"] for b in plan.create] == ["ganggate-train"] and plan.covered == {}


def test_victims_of_a_preemption_and_gangs_being_torn_down_get_no_new_budget() -> None:
    low = [released("low-0", "low"), released("low-1", "low")]
    going = [released("g-0", "going"), released("g-1", "going", terminating=True)]
    keep = [released("k-0", "keep"), released("k-1", "keep")]
    top = [make_pod(f"top-{i}", gang="top", pod_num=2, gpus=64, owner="top") for i in range(2)]
    value = annotation_value("p1", "2024-01-01T00:00:00Z", "2024-01-01T00:05:00Z",
                             {"default/top-0": "n1", "default/top-1": "n2"}, ["default/low"])
    for pod in top:
        pod["metadata"]["annotations"][PREEMPTION_ANNOTATION] = value
    state = state_of(*low, *going, *keep, *top)

    assert preemption_victims(state, T0) == {("default", "low")}
    assert preemption_victims(state, T0 + 600) == set()  # the reservation ran out
    assert preemption_victims(state, T0 + 600, in_flight=["default/keep"]) == {("default", "keep")}
    plan = plan_budgets(state.gangs, {}, skip=preemption_victims(state, T0))
    assert [b["metadata"]["name"] for b in plan.create] == ["ganggate-keep"]
    # Neither is deleted when it exists: they are only not (re)created.
    known = {("default", "ganggate-low"): "low", ("default", "ganggate-going"): "going"}
    plan = plan_budgets(state.gangs, known, skip={("default", "low")})
    assert [b["metadata"]["name"] for b in plan.create] == ["ganggate-keep"] and plan.delete == []


def test_the_budget_of_a_gang_whose_pods_all_ended_is_deleted() -> None:
    done = [released("d-0", "done"), released("d-1", "done")]
    half = [released("h-0", "half"), released("h-1", "half")]
    for pod in done + half[:1]:
        pod["status"]["phase"] = "Succeeded"
    state = state_of(*done, *half)
    known = {("default", "ganggate-done"): "done", ("default", "ganggate-half"): "half",
             ("default", "ganggate-gone"): "gone"}
    plan = plan_budgets(state.gangs, known)
    # A terminal pod is evicted whatever its budgets say (eviction.go canIgnorePDB): nothing to keep.
    assert plan.delete == [("default", "ganggate-done"), ("default", "ganggate-gone")]
    assert plan.create == []
