"""PodDisruptionBudgets as the eviction subresource sees them: which budgets cover a pod, and
which gangs a budget someone else made already covers. Pure: no I/O.

The eviction subresource (pkg/registry/core/pod/storage/eviction.go, getPodDisruptionBudgets)
takes the budgets of the pod's namespace whose `spec.selector` converts to a valid, non-empty
label selector matching the pod's labels: "If a PDB with a nil or empty selector creeps in, it
should match nothing, not everything", and an invalid selector matches nothing either. When more
than one budget covers a pod, every eviction of it is answered 500 ("This pod has more than one
PodDisruptionBudget, which the eviction subresource does not support."), so a drain, the
scheduler's preemption and ganggate's own preemption all fail on it. ganggate therefore makes
no budget of its own for a gang some pod of which a budget of someone else covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ganggate.contract import GANG_LABEL
from ganggate.core.state.gangs import Gang
from ganggate.core.state.pods import PodInfo

MANAGED_BY = ("app.kubernetes.io/managed-by", "ganggate")

_SET_OPERATORS = ("In", "NotIn")
_EXISTENCE_OPERATORS = ("Exists", "DoesNotExist")


def budget_name(gang_name: str) -> str:
    """ganggate's budget of a gang: `ganggate-<group-name>` (a group-name is a DNS-1123 label,
    so this is a valid object name)."""
    return f"ganggate-{gang_name}"


def is_ours(budget: Mapping[str, Any]) -> bool:
    """A budget ganggate made for a gang (controller.lifecycle.protection): managed by ganggate, labelled
    with the gang, named after it."""
    meta = budget.get("metadata") or {}
    labels = meta.get("labels") or {}
    value = labels.get(GANG_LABEL)
    return (labels.get(MANAGED_BY[0]) == MANAGED_BY[1] and isinstance(value, str) and bool(value)
            and meta.get("name") == budget_name(value))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any] | None) -> bool:
    """metav1.LabelSelectorAsSelector(selector) is valid, not empty, and matches the labels.

    None (nil), `{}` and a selector with no requirements match nothing; so does an invalid one
    (an operator other than In, NotIn, Exists, DoesNotExist; In/NotIn without values;
    Exists/DoesNotExist with values)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if not match_labels and not expressions:
        return False
    labels = labels or {}
    ok = all(labels.get(k) == v for k, v in match_labels.items())
    for expr in expressions:
        if not isinstance(expr, Mapping):
            return False
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or not key or not isinstance(values, list):
            return False
        if op in _SET_OPERATORS:
            if not values:
                return False
            present = key in labels and labels[key] in values
            ok = ok and (present if op == "In" else not present)
        elif op in _EXISTENCE_OPERATORS:
            if values:
                return False
            ok = ok and ((key in labels) == (op == "Exists"))
        else:
            return False
    return ok


def covers(budget: Mapping[str, Any], pod: PodInfo) -> bool:
    """The eviction subresource counts the budget for this pod: same namespace, and its
    selector matches the pod's labels."""
    budget_meta = budget.get("metadata") or {}
    if (budget_meta.get("namespace") or "default") != pod.namespace:
        return False
    return selector_matches((budget.get("spec") or {}).get("selector"), pod.labels)


def foreign_budgets_over(gang: Gang, budgets: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the budgets not made by ganggate that cover a live pod of the gang, sorted."""
    names = set()
    pods: list[PodInfo] | None = None  # (read once a budget of the gang's namespace is met)
    for budget in budgets:
        meta = budget.get("metadata") or {}
        if is_ours(budget) or (meta.get("namespace") or "default") != gang.namespace:
            continue
        if pods is None:
            pods = gang.live_pods()
        if any(covers(budget, pod) for pod in pods):
            names.add(str(meta.get("name") or ""))
    return sorted(names)
