"""Which nodes a pod may use: readiness, cordons, taints and tolerations, node selection.

Pure functions over plain API objects (dicts as the API serves them). They follow the
scheduler's filter plugins: NodeUnschedulable, TaintToleration (only NoSchedule and
NoExecute taints filter; k8s.io/api/core/v1/toleration.go ToleratesTaint) and NodeAffinity
(k8s.io/component-helpers/scheduling/corev1/nodeaffinity: nodeSelector ANDed with the
required terms, terms ORed, expressions within a term ANDed, an empty term matches nothing).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import Any

FILTERING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: The well-known node label a released pod is pinned with (nodeSelector).
HOSTNAME_LABEL = "kubernetes.io/hostname"


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """True when the node's Ready condition is True."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            status: str | None = condition.get("status")
            return status == "True"
    return False


def not_ready_since(node: Mapping[str, Any]) -> float | None:
    """When a node that is not Ready (False or Unknown) stopped being Ready: its Ready condition's
    lastTransitionTime, as Unix seconds; None when it is Ready or the time is not given."""
    from datetime import datetime

    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return None
            try:
                moment = datetime.strptime(str(condition.get("lastTransitionTime")), "%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                return None
            return moment.replace(tzinfo=UTC).timestamp()
    return None


def node_hostname(node: Mapping[str, Any] | None, node_name: str) -> str:
    """The value to pin with: the node's kubernetes.io/hostname label, else its name."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(HOSTNAME_LABEL) or node_name


def node_is_cordoned(node: Mapping[str, Any]) -> bool:
    """True when spec.unschedulable is set (kubectl cordon)."""
    return bool((node.get("spec") or {}).get("unschedulable"))


def tolerates_cordon(pod: Mapping[str, Any]) -> bool:
    """NodeUnschedulable lets a pod through that tolerates the unschedulable taint."""
    taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    return any(toleration_matches(t, taint) for t in pod_tolerations(pod))


def pod_tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("tolerations") or [])


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """ToleratesTaint from k8s.io/api/core/v1/toleration.go."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(tolerations: Iterable[Mapping[str, Any]], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of the node no toleration matches, if any."""
    tolerations = list(tolerations)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in FILTERING_TAINT_EFFECTS:
            continue
        if not any(toleration_matches(t, taint) for t in tolerations):
            found: Mapping[str, Any] = taint
            return found
    return None


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key: str = expr.get("key") or ""  # required by the API; "" matches no label
    operator = expr.get("operator")
    values = expr.get("values") or []
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, want = _go_int(labels[key]), _go_int(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _go_int(text: object) -> int | None:
    """strconv.ParseInt(text, 10, 64) as the Gt/Lt operators use it: an optional sign and
    decimal digits only (Python's int() would also take spaces and underscores)."""
    if not isinstance(text, str) or not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    field_values = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    return all(_expression_matches(e, labels) for e in expressions) and all(
        _expression_matches(f, field_values) for f in fields
    )


def required_node_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The pod's required node-affinity terms, or None when it has none."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return None
    return list(required.get("nodeSelectorTerms") or [])


def matches_node_selection(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """NodeAffinity filter: spec.nodeSelector and the required node-affinity terms."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    for key, value in selector.items():
        if labels.get(key) != value:
            return False
    terms = required_node_terms(pod)
    if terms is None:
        return True
    return any(_term_matches(term, node) for term in terms)


#: Canonical JSON (sorted keys, no spaces) of a value, for keys that must be equal exactly when
#: the values are; the encoder is made once (json.dumps makes one per call).
canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def selection_key(pod: Mapping[str, Any]) -> str:
    """Everything apart from resources that decides which nodes a pod may use (nodeSelector,
    required node affinity, tolerations) as one string: pods with equal keys may use exactly
    the same nodes, so eligibility can be worked out once per key instead of once per pod."""
    spec = pod.get("spec") or {}
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return canonical_json(
        [
            spec.get("nodeSelector") or {},
            affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
            spec.get("tolerations") or [],
        ]
    )


def node_rejects(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why the pod may not run on the node apart from resources, or None when it may.

    The reasons use the scheduler's own wording so they can be aggregated into messages
    such as "0/4 nodes are available: 4 node(s) had untolerated taint {...}.".
    """
    if not node_is_ready(node):
        return "node(s) were not ready"
    if node_is_cordoned(node) and not tolerates_cordon(pod):
        return "node(s) were unschedulable"
    # The default filter order runs TaintToleration before NodeAffinity
    # (pkg/scheduler/apis/config/v1/default_plugins.go), and the first failing plugin names
    # the node's reason; the taint is shown as "{key: value}" even when the value is empty
    # (pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go Filter).
    taint = untolerated_taint(pod_tolerations(pod), node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"
    if not matches_node_selection(pod, node):
        return "node(s) didn't match Pod's node affinity/selector"
    return None
