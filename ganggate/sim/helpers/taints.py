"""Taints and tolerations as the TaintToleration and NodeUnschedulable filter plugins see them.

Written from staging/src/k8s.io/api/core/v1/toleration.go (Toleration.ToleratesTaint),
staging/src/k8s.io/component-helpers/scheduling/corev1/helpers.go (TolerationsTolerateTaint,
FindMatchingUntoleratedTaint), pkg/scheduler/framework/plugins/helper/taint.go
(DoNotScheduleTaintsFilterFunc: only NoSchedule and NoExecute taints filter) and
pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go (a node with
spec.unschedulable takes only pods tolerating node.kubernetes.io/unschedulable:NoSchedule).

The Lt/Gt toleration operators sit behind the alpha TaintTolerationComparisonOperators gate,
off by default; with it off they tolerate nothing, as here unless `comparison_operators`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

DO_NOT_SCHEDULE_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"  # k8s.io/api/core/v1 well_known_taints.go
_UNSCHEDULABLE_TAINT = {"key": TAINT_NODE_UNSCHEDULABLE, "effect": "NoSchedule"}
_GO_INT = re.compile(r"[+-]?[0-9]+")


def _go_int(text: str) -> int | None:
    if not _GO_INT.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def tolerates(toleration: Mapping, taint: Mapping, comparison_operators: bool = False) -> bool:
    """Toleration.ToleratesTaint: effect and key match (empty means any), then the operator."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt") and comparison_operators:
        bound, have = _go_int(toleration.get("value") or ""), _go_int(taint.get("value") or "")
        if bound is None or have is None:
            return False
        return have < bound if operator == "Lt" else have > bound
    return False


def tolerations_tolerate(tolerations: Iterable[Mapping], taint: Mapping) -> bool:
    """TolerationsTolerateTaint: some toleration tolerates the taint."""
    return any(tolerates(t, taint) for t in tolerations)


def untolerated_taint(taints: Sequence[Mapping], tolerations: Sequence[Mapping]) -> Mapping | None:
    """FindMatchingUntoleratedTaint with DoNotScheduleTaintsFilterFunc: the first NoSchedule or
    NoExecute taint that no toleration tolerates, or None."""
    for taint in taints:
        if taint.get("effect") in DO_NOT_SCHEDULE_EFFECTS and not tolerations_tolerate(tolerations, taint):
            return taint
    return None


def taint_reason(taint: Mapping) -> str:
    """TaintToleration.Filter's reason: "node(s) had untolerated taint {key: value}"."""
    return f"node(s) had untolerated taint {{{taint.get('key') or ''}: {taint.get('value') or ''}}}"


def tolerates_unschedulable(tolerations: Iterable[Mapping]) -> bool:
    """NodeUnschedulable: the pod tolerates node.kubernetes.io/unschedulable:NoSchedule."""
    return tolerations_tolerate(tolerations, _UNSCHEDULABLE_TAINT)


def pod_tolerations(pod: Mapping) -> list[Mapping]:
    return list((pod.get("spec") or {}).get("tolerations") or [])


def node_taints(node: Mapping) -> list[Mapping]:
    return list((node.get("spec") or {}).get("taints") or [])


def is_unschedulable(node: Mapping) -> bool:
    """spec.unschedulable (kubectl cordon)."""
    return bool((node.get("spec") or {}).get("unschedulable"))
