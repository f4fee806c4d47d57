"""PodDisruptionBudgets (policy/v1) as the API server stores them: strategy and validation (pure).

- strategy: pkg/registry/policy/poddisruptionbudget/strategy.go (PrepareForCreate clears the status
  and sets generation 1; PrepareForUpdate keeps the status and bumps generation when the spec
  changes; the status strategy keeps the spec);
- validation: pkg/apis/policy/validation/validation.go ValidatePodDisruptionBudget (minAvailable
  and maxUnavailable not both, each a non-negative int or a percentage up to 100%,
  unhealthyPodEvictionPolicy IfHealthyBudget or AlwaysAllow);
The status math the disruption controller, eviction and preemption share is in
ganggate.sim.helpers.disruption.

kubesim has no Deployments, ReplicaSets or StatefulSets and Jobs have no scale subresource, so a
percentage minAvailable or any maxUnavailable finds no controller scale for a pod with a
controller (the real controller's "found no controllers for pod" SyncFailed), and counts pods
without a controller as 0 (they are `unmanagedPods`), exactly as the real controller does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, invalid_value, not_supported, required
from ganggate.sim.apimachinery.objectmeta import validate_object_meta
from ganggate.sim.apiserver.watch import clone
from ganggate.sim.helpers.disruption import _PERCENT, POLICIES
from ganggate.sim.helpers.disruption import KEY as KEY  # the strategies' table reads it here

Obj = dict[str, Any]


# ---- strategy and validation ---------------------------------------------------------------------------
def default_pdb(pdb: Obj) -> None:
    """policy/v1 has no PDB defaults (unhealthyPodEvictionPolicy nil means IfHealthyBudget)."""


def prepare_create(pdb: Obj) -> None:
    """podDisruptionBudgetStrategy.PrepareForCreate."""
    pdb["status"] = {}
    pdb.setdefault("metadata", {})["generation"] = 1


def prepare_update(new: Obj, old: Mapping[str, Any]) -> None:
    """podDisruptionBudgetStrategy.PrepareForUpdate: status kept, generation bumped on a spec change."""
    new["status"] = clone(old.get("status") or {})
    generation = (old.get("metadata") or {}).get("generation", 1)
    changed = json.dumps(new.get("spec"), sort_keys=True) != json.dumps(old.get("spec"), sort_keys=True)
    new.setdefault("metadata", {})["generation"] = generation + (1 if changed else 0)


def prepare_status_update(new: Obj, old: Mapping[str, Any]) -> None:
    """podDisruptionBudgetStatusStrategy.PrepareForUpdate: the spec is kept."""
    new["spec"] = clone(old.get("spec") or {})


def _int_or_percent(path: str, value: Any) -> list[Cause]:
    """ValidateNonnegativeIntOrPercent + IsNotMoreThan100Percent."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return [invalid_value(path, value, "must be an integer or percentage (e.g '5%')")]
    if isinstance(value, int):
        return [invalid_value(path, value, "must be greater than or equal to 0")] if value < 0 else []
    if not _PERCENT.match(value):
        return [invalid_value(path, value, "a valid percent string must be a numeric string followed by an ending '%' "
                                           "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]
    if int(value[:-1]) > 100:
        return [invalid_value(path, value, "must not be greater than 100%")]
    return []


def validate(pdb: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodDisruptionBudget."""
    causes = validate_object_meta(pdb, namespaced=True)
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(invalid_value("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    for field in ("minAvailable", "maxUnavailable"):
        if spec.get(field) is not None:
            causes += _int_or_percent(f"spec.{field}", spec[field])
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in POLICIES:
        causes.append(not_supported("spec.unhealthyPodEvictionPolicy", policy, POLICIES))
    selector = spec.get("selector")
    if selector is not None and not isinstance(selector, dict):
        causes.append(required("spec.selector"))
    return causes


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodDisruptionBudget on the new object (the spec is mutable since 1.15)."""
    return [c for c in validate(new) if not c.field.startswith("metadata.")]
