"""PodDisruptionBudget math shared by the disruption controller, the eviction subresource and
the scheduler's preemption (pure).

- which pods a budget covers: pkg/apis/policy/validation and the label selector of policy/v1;
- status: pkg/controller/disruption/disruption.go (getExpectedPodCount, countHealthyPods,
  buildDisruptedPodMap, updatePdbStatus, failSafe) and pkg/apis/policy/helper
  UpdateDisruptionAllowedCondition.

kubesim has no Deployments, ReplicaSets or StatefulSets and Jobs have no scale subresource, so a
percentage minAvailable or any maxUnavailable finds no controller scale for a pod with a
controller (the real controller's "found no controllers for pod" SyncFailed), and counts pods
without a controller as 0 (they are `unmanagedPods`), exactly as the real controller does.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

KEY = "poddisruptionbudgets.policy"
IF_HEALTHY_BUDGET = "IfHealthyBudget"
ALWAYS_ALLOW = "AlwaysAllow"
POLICIES = [IF_HEALTHY_BUDGET, ALWAYS_ALLOW]
DELETION_TIMEOUT = timedelta(minutes=2)  # disruption.go DeletionTimeout
DISRUPTION_ALLOWED = "DisruptionAllowed"  # policy/v1 DisruptionAllowedCondition
_PERCENT = re.compile(r"^[0-9]+%$")

Obj = dict[str, Any]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- which pods a budget covers -------------------------------------------------------------------------
def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any] | None) -> bool:
    """LabelSelectorAsSelector(...).Matches; in policy/v1 an empty selector matches every pod, a nil one none."""
    if selector is None:
        return False
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def covers(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The budget selects the pod: same namespace, selector matching the pod's labels."""
    pod_meta = pod.get("metadata") or {}
    if (pdb.get("metadata") or {}).get("namespace") != pod_meta.get("namespace"):
        return False
    return selector_matches((pdb.get("spec") or {}).get("selector"), pod_meta.get("labels"))


def guards(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The budget guards the pod against eviction and preemption: `covers`, but a nil or empty selector
    matches nothing there (pkg/registry/core/pod/storage/eviction.go getPodDisruptionBudgets,
    pkg/scheduler/framework/plugins/defaultpreemption filterPodsWithPDBViolation: "If a PDB with a
    nil or empty selector creeps in, it should match nothing, not everything"), while the disruption
    controller still counts every pod of the namespace for it (getPodsForPdb lists with the selector)."""
    selector = (pdb.get("spec") or {}).get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    return covers(pdb, pod)


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


# ---- the disruption controller's status -------------------------------------------------------------------
def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)."""
    if isinstance(value, int):
        return value
    return math.ceil(int(value[:-1]) * total / 100)


def expected_pod_count(pdb: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> tuple[int, int]:
    """getExpectedPodCount: (expectedCount, desiredHealthy); ValueError when a scale is needed and missing."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected = expected_scale(pods)
        return expected, max(expected - _scaled(spec["maxUnavailable"], expected), 0)
    min_available = spec.get("minAvailable")
    if isinstance(min_available, int):
        return len(pods), min_available
    if isinstance(min_available, str):
        expected = expected_scale(pods)
        return expected, _scaled(min_available, expected)
    return 0, 0


def expected_scale(pods: Iterable[Mapping[str, Any]]) -> int:
    """getExpectedScale: pods without a controller are unmanaged (not counted); kubesim's only
    controller kind, the Job, has no scale subresource, so a controlled pod is an error."""
    for pod in pods:
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("controller"):
                raise ValueError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
    return 0


def _parse(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def disrupted_pod_map(pdb: Mapping[str, Any], pods: list[Mapping[str, Any]], now: datetime) -> dict[str, str]:
    """buildDisruptedPodMap: evictions not yet seen through, dropping deleted pods and ones older than 2 minutes."""
    by_name = {p["metadata"]["name"]: p for p in pods}
    return _disrupted(pdb, lambda name: (pod := by_name.get(name)) is None or bool(pod["metadata"].get("deletionTimestamp")),
                      now)


def _disrupted(pdb: Mapping[str, Any], gone: Callable[[str], bool], now: datetime) -> dict[str, str]:
    """buildDisruptedPodMap over the budget's disruptedPods, `gone(name)` telling a pod deleted or being deleted."""
    out = {}
    for name, stamp in ((pdb.get("status") or {}).get("disruptedPods") or {}).items():
        when = _parse(stamp)
        if gone(name) or when is None or when + DELETION_TIMEOUT < now:
            continue
        out[name] = stamp
    return out


def count_healthy(pods: list[Mapping[str, Any]], disrupted: Mapping[str, str]) -> int:
    """countHealthyPods: Ready, not being deleted and not just evicted."""
    return sum(1 for p in pods
               if not p["metadata"].get("deletionTimestamp") and p["metadata"]["name"] not in disrupted and is_pod_ready(p))


def set_allowed_condition(status: Obj, generation: int | None = None) -> None:
    """UpdateDisruptionAllowedCondition: True/SufficientPods when a disruption is allowed, else InsufficientPods."""
    allowed = (status.get("disruptionsAllowed") or 0) > 0
    condition = {"type": DISRUPTION_ALLOWED, "status": "True" if allowed else "False",
                 "reason": "SufficientPods" if allowed else "InsufficientPods", "message": ""}
    _set_condition(status, condition, generation)


def _set_condition(status: Obj, condition: Obj, generation: int | None) -> None:
    """apimachinery meta.SetStatusCondition: the transition time moves only when the status changes."""
    conditions = status.setdefault("conditions", [])
    if generation is not None:
        condition["observedGeneration"] = generation
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            stamp = existing.get("lastTransitionTime") if existing.get("status") == condition["status"] else _now()
            conditions[index] = dict(condition, lastTransitionTime=stamp or _now())
            return
    conditions.append(dict(condition, lastTransitionTime=_now()))


def compute_status(pdb: Mapping[str, Any], all_pods: Iterable[Mapping[str, Any]], now: datetime | None = None) -> Obj:
    """The status the disruption controller writes for the budget, given every pod it can see."""
    now = now or datetime.now(UTC)
    generation = (pdb.get("metadata") or {}).get("generation", 1)
    status = copy.deepcopy(pdb.get("status") or {})
    pods = [p for p in all_pods if covers(pdb, p)]
    try:
        expected, desired = expected_pod_count(pdb, pods)
    except ValueError as exc:
        # failSafe: no disruption allowed while the budget cannot be computed.
        status["disruptionsAllowed"] = 0
        _set_condition(status, {"type": DISRUPTION_ALLOWED, "status": "False", "reason": "SyncFailed",
                                "message": str(exc)}, generation)
        return status
    disrupted = disrupted_pod_map(pdb, pods, now)
    return _status(status, generation, expected, desired, count_healthy(pods, disrupted), disrupted)


# What countHealthyPods and buildDisruptedPodMap read of one pod: (being deleted, Ready).
Health = tuple[bool, bool]


def pod_health(pod: Mapping[str, Any]) -> Health:
    return bool(pod["metadata"].get("deletionTimestamp")), is_pod_ready(pod)


def counts_itself(pdb: Mapping[str, Any]) -> bool:
    """Whether the budget's status needs only its pods' count and health (`compute_status_counted`):
    an integer minAvailable or none; maxUnavailable and percentages look for the pods' controllers."""
    spec = pdb.get("spec") or {}
    return spec.get("maxUnavailable") is None and not isinstance(spec.get("minAvailable"), str)


def compute_status_counted(pdb: Mapping[str, Any], pods: Mapping[str, Health], healthy: int,
                           now: datetime | None = None) -> Obj:
    """`compute_status` for a budget that `counts_itself`, given the health of the pods it covers by name
    and how many of them are Ready and not being deleted: the same status, without reading every pod."""
    now = now or datetime.now(UTC)
    generation = (pdb.get("metadata") or {}).get("generation", 1)
    status = copy.deepcopy(pdb.get("status") or {})
    spec = pdb.get("spec") or {}
    min_available = spec.get("minAvailable")
    expected, desired = (len(pods), min_available) if isinstance(min_available, int) else (0, 0)
    disrupted = _disrupted(pdb, lambda name: (health := pods.get(name)) is None or health[0], now)
    # count_healthy: the disrupted pods kept above are not being deleted; those Ready are not healthy
    healthy -= sum(1 for name in disrupted if pods[name][1])
    return _status(status, generation, expected, desired, healthy, disrupted)


def _status(status: Obj, generation: int, expected: int, desired: int, healthy: int, disrupted: dict[str, str]) -> Obj:
    """updatePdbStatus: the counts into the status, and its DisruptionAllowed condition."""
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    status.update(currentHealthy=healthy, desiredHealthy=desired, expectedPods=expected,
                  disruptionsAllowed=allowed, observedGeneration=generation)
    if disrupted:
        status["disruptedPods"] = disrupted
    else:
        status.pop("disruptedPods", None)
    set_allowed_condition(status, generation)
    return status
