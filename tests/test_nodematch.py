"""Which nodes a pod may use, against the Kubernetes documentation's tables.

Taints and tolerations: https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/
(ToleratesTaint in k8s.io/api/core/v1/toleration.go). Node affinity operators:
https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#operators
(k8s.io/component-helpers/scheduling/corev1/nodeaffinity).
"""

from __future__ import annotations

import pytest

from ganggate.core.fit.nodematch import (
    matches_node_selection,
    node_is_ready,
    node_rejects,
    toleration_matches,
    untolerated_taint,
)
from ganggate.core.state.snapshot import make_node, make_pod

TAINT = {"key": "key1", "value": "value1", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "toleration, tolerated",
    [
        ({"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"}, True),
        ({"key": "key1", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "key1", "value": "value1", "effect": "NoSchedule"}, True),  # operator defaults to Equal
        ({"key": "key1", "operator": "Equal", "value": "value2", "effect": "NoSchedule"}, False),
        ({"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoExecute"}, False),
        ({"key": "key1", "operator": "Exists"}, True),  # empty effect matches every effect
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "key2", "operator": "Exists"}, False),
        ({"key": "key1", "operator": "Equal"}, False),  # empty value is not value1
        ({"key": "key1", "operator": "Bogus", "value": "value1"}, False),
    ],
)
def test_tolerations_table(toleration: dict, tolerated: bool) -> None:
    assert toleration_matches(toleration, TAINT) is tolerated


def test_only_noschedule_and_noexecute_taints_keep_pods_away() -> None:
    soft = make_node("n", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    assert untolerated_taint([], soft) is None
    hard = make_node("n", taints=[{"key": "k", "effect": "PreferNoSchedule"}, {"key": "gpu", "value": "a100", "effect": "NoExecute"}])
    assert untolerated_taint([], hard) == {"key": "gpu", "value": "a100", "effect": "NoExecute"}
    assert node_rejects(make_pod("p"), hard) == "node(s) had untolerated taint {gpu: a100}"
    ok = make_pod("p", tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert node_rejects(ok, hard) is None


def affinity_pod(*terms: list[dict], selector: dict | None = None) -> dict:
    pod = make_pod("p", node_selector=selector)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": exprs} for exprs in terms]
            }
        }
    }
    return pod


NODE = make_node("gpu-1", labels={"zone": "a", "gpus": "8", "accel": "a100"})


@pytest.mark.parametrize(
    "expr, matches",
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "absent", "operator": "NotIn", "values": ["a"]}, True),  # absent label: not in
        ({"key": "accel", "operator": "Exists"}, True),
        ({"key": "absent", "operator": "Exists"}, False),
        ({"key": "absent", "operator": "DoesNotExist"}, True),
        ({"key": "accel", "operator": "DoesNotExist"}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["8"]}, False),
        ({"key": "gpus", "operator": "Lt", "values": ["16"]}, True),
        ({"key": "accel", "operator": "Gt", "values": ["1"]}, False),  # not an integer label
        ({"key": "absent", "operator": "Lt", "values": ["1"]}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["+4"]}, True),  # ParseInt takes a sign
        ({"key": "gpus", "operator": "Lt", "values": ["4_0"]}, False),  # ... but no underscores
        ({"key": "gpus", "operator": "Lt", "values": [" 9"]}, False),  # ... nor spaces
    ],
)
def test_affinity_operators(expr: dict, matches: bool) -> None:
    assert matches_node_selection(affinity_pod([expr]), NODE) is matches


def test_terms_are_ored_and_expressions_anded() -> None:
    yes = {"key": "zone", "operator": "In", "values": ["a"]}
    no = {"key": "zone", "operator": "In", "values": ["z"]}
    assert matches_node_selection(affinity_pod([no], [yes]), NODE)
    assert not matches_node_selection(affinity_pod([yes, no]), NODE)
    # An empty term matches nothing.
    empty = make_pod("p")
    empty["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    assert not matches_node_selection(empty, NODE)


def test_node_selector_and_affinity_must_both_hold() -> None:
    yes = {"key": "zone", "operator": "In", "values": ["a"]}
    assert matches_node_selection(affinity_pod([yes], selector={"accel": "a100"}), NODE)
    assert not matches_node_selection(affinity_pod([yes], selector={"accel": "h100"}), NODE)
    assert node_rejects(make_pod("p", node_selector={"accel": "h100"}), NODE) == (
        "node(s) didn't match Pod's node affinity/selector"
    )


def test_match_fields_select_by_node_name() -> None:
    pod = make_pod("p")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]
            }
        }
    }
    assert matches_node_selection(pod, NODE)
    assert not matches_node_selection(pod, make_node("gpu-2"))


def test_not_ready_and_cordoned_nodes_are_refused() -> None:
    pod = make_pod("p")
    assert not node_is_ready(make_node("n", ready=False))
    assert not node_is_ready({"metadata": {"name": "n"}, "status": {}})  # no condition yet
    assert node_rejects(pod, make_node("n", ready=False)) == "node(s) were not ready"
    cordoned = make_node("n", unschedulable=True)
    assert node_rejects(pod, cordoned) == "node(s) were unschedulable"
    tolerant = make_pod("p", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}])
    assert node_rejects(tolerant, cordoned) is None
