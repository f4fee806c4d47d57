"""PodGroup gangs, the pure parts: a PodGroup read as the gang annotations it stands for, who
admits its pods under each --podgroups mode, the webhook's answer to a pod naming a PodGroup, the
PodGroupInitiallyScheduled condition ganggate writes, and the PodGroup --podgroups=create makes."""

from __future__ import annotations

import pytest

from ganggate.admission.review import ALREADY_GATED, DENIED, GATED, NOT_GANG, OTHER_SCHEDULER, ReviewPolicy, decide
from ganggate.contract import GATE_NAME, GROUP_NAME, GROUP_POD_NUM, GROUP_TOPOLOGY_REQUIRED, GangSpec
from ganggate.controller.status.podgroups import native_rows, project_all
from ganggate.core.state.pods import PodInfo
from ganggate.podgroups import condition_patch, ganggate_admits, podgroup_for_gang, project
from tests.webhook_support import review


def podgroup(name="train", min_count=4, topology=None, conditions=None):
    spec = {"schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    pg = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
          "metadata": {"name": name, "namespace": "ml", "generation": 1}, "spec": spec}
    if conditions:
        pg["status"] = {"conditions": conditions}
    return pg


def member(name="w-0", group="train", gated=True, annotations=None, node=None):
    spec = {"schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE_NAME}]
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def test_a_podgroup_pod_reads_as_a_member_of_the_gang_the_podgroup_stands_for():
    info = PodInfo.from_pod(project(member(annotations={"ganggate.io/pod-group": "train"}),
                                    podgroup(min_count=3, topology="example.com/rack")))
    assert info.gang == GangSpec("train", 3, 3, "example.com/rack")


def test_a_pod_with_annotations_of_its_own_or_a_basic_podgroup_is_not_projected():
    own = member(annotations={GROUP_NAME: "train", GROUP_POD_NUM: "2"})
    assert project(own, podgroup()) is own
    plain = member()
    assert project(plain, podgroup(min_count=None)) is plain
    assert project(plain, None) is plain


@pytest.mark.parametrize("mode, native, admits", [
    ("gate", False, True), ("gate", True, True),
    ("auto", False, True), ("auto", True, False),
    ("create", False, True), ("create", True, False),
])
def test_who_admits_podgroup_pods_in_each_mode(mode, native, admits):
    assert ganggate_admits(mode, native) is admits


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="podgroups must be one of auto, gate, create"):
        ganggate_admits("sometimes", False)


def _decide(pod, **policy):
    return decide(review(pod)["request"], ReviewPolicy(**policy))


def test_the_webhook_gates_a_podgroup_pod_unless_the_scheduler_gang_schedules_it():
    pod = member(gated=False)
    gated = _decide(pod)
    assert gated.outcome == GATED
    patched = gated.patch.apply(pod)
    assert patched["spec"]["schedulingGates"] == [{"name": GATE_NAME}]
    assert patched["metadata"]["annotations"] == {"ganggate.io/pod-group": "train"}  # what it was gated for
    assert _decide(pod, native_gang_scheduling=True).outcome == NOT_GANG
    assert _decide(pod, native_gang_scheduling=True, podgroups="gate").outcome == GATED
    assert _decide(member(gated=True)).outcome == ALREADY_GATED
    other = member(gated=False)
    other["spec"]["schedulerName"] = "volcano"
    assert _decide(other).outcome == OTHER_SCHEDULER


def test_the_webhook_refuses_a_bound_podgroup_pod_and_one_that_names_two_gangs():
    bound = _decide(member(gated=False, node="node-0"))
    assert bound.outcome == DENIED and "must not be bound at creation" in bound.message
    two = _decide(member(gated=False, annotations={GROUP_NAME: "other", GROUP_POD_NUM: "2"}))
    assert two.outcome == DENIED and "name two gangs" in two.message
    same = _decide(member(gated=False, annotations={GROUP_NAME: "train", GROUP_POD_NUM: "2"}))
    assert same.outcome == GATED  # the annotation gang, named the same way twice


def test_the_condition_is_written_once_true_and_not_repeated():
    now = "2026-01-01T00:00:00Z"
    waiting = condition_patch(podgroup(), "False", "Unschedulable", "GangWaiting: 3 of 4 pods exist", now)
    (condition,) = waiting["status"]["conditions"]
    assert condition["type"] == "PodGroupInitiallyScheduled" and condition["status"] == "False"
    said = podgroup(conditions=waiting["status"]["conditions"])
    assert condition_patch(said, "False", "Unschedulable", "GangWaiting: 3 of 4 pods exist", now) is None
    done = condition_patch(said, "True", "Scheduled", "4 pods placed by ganggate", now)
    assert done["status"]["conditions"][0]["status"] == "True"
    assert condition_patch(podgroup(conditions=done["status"]["conditions"]), "False", "Unschedulable", "x", now) is None


def test_create_makes_a_podgroup_owned_as_the_gang_pods_are():
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}
    pg = podgroup_for_gang("ml", "train", 3, "example.com/rack", [owner])
    assert pg["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}},
                          "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}}
    (ref,) = pg["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("Job", "train", "u1", False)


def test_status_reads_gated_podgroup_pods_as_gang_members_and_lists_the_schedulers_own_apart():
    gated = member("w-0")
    native = member("n-0", group="native", gated=False, node="node-1")
    projected = project_all([gated, native], [podgroup(), podgroup("native", 1)])
    assert projected[0]["metadata"]["annotations"][GROUP_NAME] == "train"
    assert GROUP_TOPOLOGY_REQUIRED not in projected[0]["metadata"]["annotations"]
    assert projected[1] is native
    assert native_rows([gated, native], [podgroup(), podgroup("native", 1)]) == [["ml/native", "1/1", "1", "-"]]


def test_a_v1alpha2_podgroup_of_kubernetes_1_36_reads_the_same_and_gets_its_own_condition():
    alpha = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": "train", "namespace": "ml"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                      "schedulingConstraints": {"topologyConstraints": [{"topologyKey": "example.com/rack"}]}}}
    assert PodInfo.from_pod(project(member(), alpha)).gang == GangSpec("train", 2, 2, "example.com/rack")
    (condition,) = condition_patch(alpha, "True", "Scheduled", "", "2026-01-01T00:00:00Z")["status"]["conditions"]
    assert condition["type"] == "PodGroupScheduled"
    made = podgroup_for_gang("ml", "train", 2, "example.com/rack", None, "v1alpha2")
    assert made["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert made["spec"]["schedulingConstraints"] == {"topologyConstraints": [{"topologyKey": "example.com/rack"}]}


class _Recorder:
    def __init__(self):
        self.emitted = []

    def emit(self, pod, reason, message):
        self.emitted.append((pod["metadata"]["name"], reason, message))


def _source():
    from ganggate.controller.round.podgroups import PodGroupSource

    class Custom:
        def list_cluster_custom_object(self, *args, **kwargs):
            raise AssertionError("not listed in this test")

    events = _Recorder()
    source = PodGroupSource(Custom(), events, mode="auto", native=False, spawn=lambda work: work.close(),
                            may_act=lambda: True)
    fed = []
    source.reinject = lambda kind, pod: fed.append((kind, pod["metadata"]["name"]))
    source._on_list([])
    return source, events, fed


def test_a_pod_whose_podgroup_is_missing_waits_told_once_and_is_read_again_when_it_appears():
    source, events, fed = _source()
    pod = member("w-0", group="late")
    assert source.project(pod) is pod and source.project(pod) is pod
    assert [(name, reason) for name, reason, _ in events.emitted] == [("w-0", "PodGroupNotFound")]
    gone = member("w-1", group="late")
    source.project(gone)
    source.project(gone, "DELETED")  # a deleted pod is never fed back
    source._on_event("ADDED", podgroup("late", 1))
    assert fed == [("MODIFIED", "w-0")]
    assert PodInfo.from_pod(source.project(pod)).gang == GangSpec("late", 1, 1)


def test_a_changed_min_count_reads_every_live_member_again():
    source, _, fed = _source()
    source._on_event("ADDED", podgroup("train", 2))
    for name in ("w-0", "w-1"):
        source.project(member(name))
    source.project(member("w-1"), "DELETED")
    source._on_event("MODIFIED", podgroup("train", 2))  # nothing about the gang changed
    assert fed == []
    source._on_event("MODIFIED", podgroup("train", 3))
    assert fed == [("MODIFIED", "w-0")]


def test_ungated_podgroup_pods_are_the_schedulers_and_not_read_as_members():
    source, events, _ = _source()
    source._on_event("ADDED", podgroup("train", 2))
    pod = member("w-0", gated=False)
    assert source.project(pod) is pod and not events.emitted


def test_a_pod_gated_for_a_podgroup_whose_field_the_api_server_dropped_is_told_why():
    source, events, _ = _source()
    pod = member("w-0", annotations={"ganggate.io/pod-group": "train"})
    del pod["spec"]["schedulingGroup"]  # GenericWorkload off: dropped after admission
    assert source.project(pod) is pod and source.project(pod) is pod
    ((name, reason, message),) = events.emitted
    assert (name, reason) == ("w-0", "PodGroupFieldDropped") and "GenericWorkload feature gate is off" in message
