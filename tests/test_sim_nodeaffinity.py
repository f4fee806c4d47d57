"""kubesim's node selection: required node affinity, taints and tolerations, cordons.

Cases follow staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go,
staging/src/k8s.io/api/core/v1/toleration_test.go and the NodeUnschedulable / TaintToleration
plugin tests (pkg/scheduler/framework/plugins/...).
"""

from __future__ import annotations

import pytest

from ganggate.sim.helpers import taints
from ganggate.sim.helpers.nodeaffinity import RequiredNodeAffinity, go_parse_int, is_label_key, matches
from ganggate.sim.scheduler.plugins import node_rejects


def node(name: str = "n1", labels: dict | None = None, taint_list: list | None = None, cordoned: bool = False) -> dict:
    spec: dict = {"taints": taint_list or []}
    if cordoned:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def pod(selector: dict | None = None, terms: list | None = None, tolerations: list | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c"}]}
    if selector is not None:
        spec["nodeSelector"] = selector
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": "p"}, "spec": spec}


def expr(key: str, operator: str, *values: str) -> dict:
    out: dict = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


LABELS = {"zone": "a", "gpu": "a100", "cores": "64"}


@pytest.mark.parametrize(
    ("p", "fits"),
    [
        (pod(), True),  # no selector at all
        (pod({"zone": "a"}), True),
        (pod({"zone": "b"}), False),
        (pod({"zone": "a", "missing": ""}), False),  # a selector key must be present, even for ""
        (pod(terms=[{"matchExpressions": [expr("zone", "In", "a", "b")]}]), True),
        (pod(terms=[{"matchExpressions": [expr("zone", "NotIn", "a")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("nope", "NotIn", "a")]}]), True),  # absent key: NotIn holds
        (pod(terms=[{"matchExpressions": [expr("gpu", "Exists")]}]), True),
        (pod(terms=[{"matchExpressions": [expr("gpu", "DoesNotExist")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("cores", "Gt", "32")]}]), True),
        (pod(terms=[{"matchExpressions": [expr("cores", "Lt", "32")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("gpu", "Gt", "1")]}]), False),  # "a100" is no integer
        # terms are ORed, expressions within a term ANDed
        (pod(terms=[{"matchExpressions": [expr("zone", "In", "b")]},
                    {"matchExpressions": [expr("zone", "In", "a"), expr("gpu", "Exists")]}]), True),
        (pod(terms=[{"matchExpressions": [expr("zone", "In", "a"), expr("gpu", "In", "h100")]}]), False),
        # nodeSelector and affinity are both required
        (pod({"zone": "b"}, [{"matchExpressions": [expr("zone", "In", "a")]}]), False),
        # an empty term selects nothing; so does required affinity with no terms
        (pod(terms=[{}]), False),
        (pod(terms=[]), False),
        (pod(terms=[{"matchExpressions": []}, {"matchExpressions": [expr("zone", "In", "a")]}]), True),
        # matchFields: metadata.name, In/NotIn with exactly one value
        (pod(terms=[{"matchFields": [expr("metadata.name", "In", "n1")]}]), True),
        (pod(terms=[{"matchFields": [expr("metadata.name", "NotIn", "n1")]}]), False),
        (pod(terms=[{"matchFields": [expr("metadata.name", "In", "n1", "n2")]}]), False),
        (pod(terms=[{"matchFields": [expr("metadata.name", "Exists")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("zone", "In", "a")],
                     "matchFields": [expr("metadata.name", "In", "n2")]}]), False),
        # a requirement NewRequirement refuses spoils its term only (LazyErrorNodeSelector)
        (pod(terms=[{"matchExpressions": [expr("zone", "In")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("zone", "Exists", "a")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("zone", "Gt", "1", "2")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("zone", "Near", "a")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("-bad-", "Exists")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("zone", "NotIn", "not a label value!")]}]), False),
        (pod(terms=[{"matchExpressions": [expr("zone", "NotIn")]},
                    {"matchExpressions": [expr("zone", "In", "a")]}]), True),
    ],
)
def test_required_node_affinity(p, fits):
    assert matches(p, node(labels=LABELS)) is fits


def test_a_node_without_a_name_skips_field_requirements():
    """nodeSelectorTerm.match only checks fields when the node has some (extractNodeFields)."""
    p = pod(terms=[{"matchFields": [expr("metadata.name", "In", "n1")]}])
    assert matches(p, {"metadata": {"labels": {}}})


def test_compiled_affinity_reports_whether_terms_are_set():
    assert not RequiredNodeAffinity(pod({"zone": "a"})).has_terms
    assert RequiredNodeAffinity(pod(terms=[])).has_terms


def test_parse_int_is_go_strconv():
    assert [go_parse_int(s) for s in ("12", "+3", "-4", " 1", "1_000", "9223372036854775808", "")] == [
        12, 3, -4, None, None, None, None]


def test_label_keys():
    assert [is_label_key(k) for k in ("zone", "example.com/zone", "a/b/c", "/x", "x" * 64, "Example.com/z")] == [
        True, True, False, False, False, False]


# -- tolerations (toleration_test.go TestTolerationToleratesTaint) ---------------------------

TAINT = {"key": "gpu", "value": "a100", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "value": "a100"}, True),  # empty operator means Equal; empty effect means any
        ({"key": "gpu", "value": "h100"}, False),
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists: every taint
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "gpu", "operator": "Gt", "value": "1"}, False),  # comparison operators are gated off
    ],
)
def test_toleration_tolerates_taint(toleration, tolerated):
    assert taints.tolerates(toleration, TAINT) is tolerated


def test_comparison_operators_when_enabled():
    taint = {"key": "rank", "value": "5", "effect": "NoSchedule"}
    assert taints.tolerates({"key": "rank", "operator": "Lt", "value": "6"}, taint, comparison_operators=True)
    assert not taints.tolerates({"key": "rank", "operator": "Gt", "value": "6"}, taint, comparison_operators=True)


def test_only_noschedule_and_noexecute_taints_filter():
    soft = {"key": "a", "effect": "PreferNoSchedule"}
    hard = {"key": "b", "value": "v", "effect": "NoExecute"}
    assert taints.untolerated_taint([soft], []) is None
    assert taints.untolerated_taint([soft, hard], []) == hard
    assert taints.untolerated_taint([soft, hard], [{"key": "b", "operator": "Exists"}]) is None


# -- the node-level filters in order (NodeUnschedulable, TaintToleration, NodeAffinity) -------


def test_filter_reasons_in_plugin_order():
    p = pod({"zone": "b"})
    assert node_rejects(p, node(labels=LABELS, taint_list=[TAINT], cordoned=True)) == "node(s) were unschedulable"
    assert node_rejects(p, node(labels=LABELS, taint_list=[TAINT])) == "node(s) had untolerated taint {gpu: a100}"
    assert node_rejects(p, node(labels=LABELS, taint_list=[{"key": "k", "effect": "NoSchedule"}])) == (
        "node(s) had untolerated taint {k: }")
    assert node_rejects(p, node(labels=LABELS)) == "node(s) didn't match Pod's node affinity/selector"
    assert node_rejects(pod({"zone": "a"}), node(labels=LABELS)) is None
    not_ready = node(labels=LABELS)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert node_rejects(pod(), not_ready) == "node(s) were not ready"


def test_a_pod_tolerating_the_unschedulable_taint_may_use_a_cordoned_node():
    tolerant = pod(tolerations=[{"key": taints.TAINT_NODE_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}])
    assert node_rejects(tolerant, node(cordoned=True)) is None
    assert node_rejects(pod(tolerations=[{"operator": "Exists"}]), node(cordoned=True)) is None
    assert node_rejects(pod(tolerations=[{"operator": "Exists", "effect": "NoExecute"}]), node(cordoned=True)) == (
        "node(s) were unschedulable")
