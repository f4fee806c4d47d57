"""The webhook and GPU sharing: a pod asking aliyun.com/gpu-mem is gated (as a gang of one when
it has no gang annotations) so that ganggate picks its card; bad asks are denied with a message
that says what to fix, and a denied pod is not changed; the shipped matchConditions send such pods."""

from __future__ import annotations

import copy

import pytest

from ganggate.admission.review import DENIED, GATED, NOT_GANG, OTHER_SCHEDULER, ReviewPolicy, decide, decide_create
from ganggate.admission.sharing import solo_gang_name
from ganggate.contract import (
    GATE_NAME,
    GROUP_NAME,
    GROUP_POD_NUM,
    SHARED_GPU_MEMORY,
    SOLO_ANNOTATION,
    GangSpec,
    parse_gang,
)
from tests.test_manifests import match_condition, webhook_configurations
from tests.webhook_support import gang_pod

POLICY = ReviewPolicy()


def sharing(amount: object = "4", *, name: str | None = "infer", gang: bool = False, **limits: str) -> dict:
    pod = gang_pod(name or "x", group="g" if gang else None, pod_num="2" if gang else None)
    if name is None:
        del pod["metadata"]["name"]
        pod["metadata"]["generateName"] = "infer-"
    pod["spec"]["containers"][0]["resources"]["limits"] = {SHARED_GPU_MEMORY: amount, **limits}
    return pod


def applied(pod: dict, decision) -> dict:
    assert decision.patch is not None
    return decision.patch.apply(copy.deepcopy(pod))


def test_a_sharing_pod_without_gang_annotations_is_gated_as_a_gang_of_one() -> None:
    pod = sharing("4")
    decision = decide_create(pod, POLICY, "3f2a-77")
    assert decision.outcome == GATED
    after = applied(pod, decision)
    assert after["spec"]["schedulingGates"] == [{"name": GATE_NAME}]
    annotations = after["metadata"]["annotations"]
    assert annotations[GROUP_NAME] == "gpushare-infer" and annotations[GROUP_POD_NUM] == "1"
    assert annotations[SOLO_ANNOTATION] == "shared-gpu"
    assert parse_gang(annotations) == GangSpec("gpushare-infer", 1, 1)


def test_a_generated_name_uses_the_admission_request_uid() -> None:
    pod = sharing("4", name=None)
    request = {"uid": "0c9a7e2e-5f1b-4c1e-9b8e-1d2a3b4c5d6e", "operation": "CREATE",
               "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}
    after = applied(pod, decide(request, POLICY))
    name = after["metadata"]["annotations"][GROUP_NAME]
    assert name == "gpushare-0c9a7e2e5f1b4c1e9b8e1d2a3b4c5d6e"[:49]
    assert parse_gang(after["metadata"]["annotations"]) == GangSpec(name, 1, 1)


def test_solo_names_are_always_valid_gang_names() -> None:
    for pod_name in ("infer", "x" * 80, "web.v2", "", None):
        name = solo_gang_name(pod_name, "ABCD-1234")
        assert parse_gang({GROUP_NAME: name, GROUP_POD_NUM: "1"}) == GangSpec(name, 1, 1), name


def test_a_sharing_pod_in_a_gang_is_gated_as_a_member_of_its_gang() -> None:
    pod = sharing("4", gang=True)
    after = applied(pod, decide_create(pod, POLICY, "u"))
    assert after["metadata"]["annotations"] == {GROUP_NAME: "g", GROUP_POD_NUM: "2"}


@pytest.mark.parametrize("amount", ["eight", "0", "-2", "1.5", "8Gi", "", True, None, 0])
def test_a_bad_amount_is_denied_and_the_pod_is_not_changed(amount) -> None:
    pod = sharing(amount)
    before = copy.deepcopy(pod)
    decision = decide_create(pod, POLICY, "u")
    assert decision.outcome == DENIED and decision.patch is None and decision.code == 422
    assert f"{SHARED_GPU_MEMORY}={amount!r} must be a positive whole number" in decision.message
    assert pod == before


def test_whole_and_shared_gpus_in_one_container_are_denied() -> None:
    pod = sharing("4", **{"nvidia.com/gpu": "1"})
    decision = decide_create(pod, POLICY, "u")
    assert decision.outcome == DENIED
    assert decision.message.startswith("container 'trainer' asks both nvidia.com/gpu (whole GPUs) and aliyun.com/gpu-mem")


def test_whole_and_shared_gpus_in_separate_containers_are_fine() -> None:
    pod = sharing("4")
    pod["spec"]["containers"].append({"name": "trainer2", "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    pod["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu", None)
    assert decide_create(pod, POLICY, "u").outcome == GATED


def test_a_bound_sharing_pod_is_denied() -> None:
    pod = sharing("4")
    pod["spec"]["nodeName"] = "n1"
    decision = decide_create(pod, POLICY, "u")
    assert decision.outcome == DENIED and "picks its GPU card before the pod is bound" in decision.message


def test_the_shared_resource_list_is_configurable() -> None:
    pod = sharing("4")
    assert decide_create(pod, ReviewPolicy(shared_resources=frozenset()), "u").outcome == NOT_GANG
    other = gang_pod("p", group=None, pod_num=None)
    other["spec"]["containers"][0]["resources"]["limits"] = {"example.com/vgpu": "2"}
    assert decide_create(other, POLICY, "u").outcome == NOT_GANG
    assert decide_create(other, ReviewPolicy(shared_resources=frozenset({"example.com/vgpu"})), "u").outcome == GATED


def test_other_schedulers_sharing_pods_are_left_alone() -> None:
    pod = sharing("4")
    pod["spec"]["schedulerName"] = "volcano"
    assert decide_create(pod, POLICY, "u").outcome == OTHER_SCHEDULER


def test_the_shipped_match_conditions_send_sharing_pods_and_still_not_ordinary_ones() -> None:
    for configuration in webhook_configurations():
        matches = match_condition(configuration)
        assert matches(sharing("4"), None)
        plain = gang_pod("p", group=None, pod_num=None)
        assert not matches(plain, None)
        no_limits = copy.deepcopy(plain)
        no_limits["spec"]["containers"][0].pop("resources")
        assert not matches(no_limits, None)
        no_containers = copy.deepcopy(plain)
        no_containers["spec"] = {}
        assert not matches(no_containers, None)


def test_a_released_gang_of_one_made_for_sharing_gets_no_budget_but_a_real_gang_does() -> None:
    from ganggate.controller.lifecycle.protection import desired_budget
    from ganggate.core.state.cluster import ClusterState
    from ganggate.core.state.snapshot import make_pod

    solo = make_pod("infer", gang="gpushare-infer", pod_num=1, gated=False, decision={"id": "d", "node": "n1"})
    solo["metadata"]["annotations"][SOLO_ANNOTATION] = "shared-gpu"
    real = make_pod("ddp-0", gang="ddp", pod_num=1, gated=False, decision={"id": "e", "node": "n1"})
    state = ClusterState()
    state.reset([], [solo, real])
    budgets = {key[1]: desired_budget(gang) for key, gang in state.gangs.items()}
    assert budgets["gpushare-infer"] is None
    assert budgets["ddp"] is not None and budgets["ddp"]["spec"]["minAvailable"] == 1


def test_any_shared_amount_is_either_gated_whole_or_denied_with_the_pod_unchanged() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                               lambda inner: st.lists(inner, max_size=3), max_leaves=5)

    @settings(max_examples=200, deadline=None)
    @given(amount=json_values | st.from_regex(r"-?[0-9]{1,4}(\.[0-9])?(Gi|m)?", fullmatch=True))
    def check(amount) -> None:
        pod = sharing(amount)
        before = copy.deepcopy(pod)
        decision = decide_create(pod, POLICY, "u")
        assert pod == before
        if decision.outcome == GATED:
            assert isinstance(amount, (str, int)) and int(str(amount).strip()) > 0
            after = applied(pod, decision)
            assert after["spec"]["schedulingGates"] == [{"name": GATE_NAME}]
            assert parse_gang(after["metadata"]["annotations"]) == GangSpec("gpushare-infer", 1, 1)
        else:
            assert decision.outcome == DENIED and decision.patch is None and "must be a positive whole number" in decision.message

    check()
