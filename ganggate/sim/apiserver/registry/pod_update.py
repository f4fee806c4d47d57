"""Pod update rules (pure): what may change in a stored pod, and what is immutable.

pkg/apis/core/validation/validation.go ValidatePodUpdate: the new pod must be valid
(pod_validation.validate_pod) and its metadata keep name/namespace/uid/creationTimestamp; of the
spec only the listed fields may change, checked by munging them back to the old values and
comparing what is left (anything else is `spec: Forbidden: pod updates may not change fields
other than …` with a diff):
- containers: only `image`; none added or removed;
- activeDeadlineSeconds: nil -> positive, or positive -> smaller non-negative;
- tolerations may only be added (validateOnlyAddedTolerations; tolerationSeconds may change);
- scheduling gates may only be removed (validateOnlyDeletedSchedulingGates, KEP-3521);
- while the old pod is gated (KEP-3838, mutable scheduling directives), nodeSelector may only
  gain entries (validateNodeSelectorMutation) and required node affinity terms may only gain
  expressions (validateNodeAffinityMutation / validateNodeSelectorTermHasOnlyAdditions).
ValidatePodStatusUpdate (pods/status) checks the phase and the conditions' types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, forbidden, invalid_value, not_supported, required
from ganggate.sim.apimachinery.objectmeta import validate_object_meta_update
from ganggate.sim.apimachinery.semantic import equal, normal
from ganggate.sim.apiserver.registry.pod_validation import validate_pod
from ganggate.sim.apiserver.watch import clone

UPDATABLE_POD_SPEC_FIELDS = ",".join([
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
])


def _names(gates: Any) -> list[str]:
    return [g.get("name", "") for g in gates or [] if isinstance(g, dict)]


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    required_ = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_ is None:
        return None
    return list(required_.get("nodeSelectorTerms") or [])


def _term_only_additions(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """validateNodeSelectorTermHasOnlyAdditions: every old requirement is still there."""
    for field in ("matchExpressions", "matchFields"):
        new_items = [normal(e) for e in new.get(field) or []]
        for expression in old.get(field) or []:
            if normal(expression) not in new_items:
                return False
    return True


def _restore(new_spec: dict[str, Any], old_spec: Mapping[str, Any], field: str) -> None:
    """Munge an updatable field back to its old value; absent stays absent, so that the specs
    compare equal with plain `==` (semantic.equal's fast path) when nothing else changed."""
    if field in old_spec:
        new_spec[field] = clone(old_spec[field])
    else:
        new_spec.pop(field, None)


def validate_pod_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodUpdate (see the module docstring)."""
    causes = validate_object_meta_update(new, old) + validate_pod(new)
    old_spec = old.get("spec") or {}
    if new.get("spec") == old_spec:
        return causes  # ValidatePodUpdate: equal specs need no further checks
    # The munged copy (mungedPodSpec := *newPod.Spec.DeepCopy() there): copied only as deep as the
    # munging below writes (the spec's fields, the containers' image), the rest shared with `new`.
    new_spec = dict(new.get("spec") or {})
    for kind in ("containers", "initContainers"):
        if isinstance(new_spec.get(kind), list):
            new_spec[kind] = [dict(c) if isinstance(c, dict) else c for c in new_spec[kind]]
    for kind in ("containers", "initContainers"):
        if len(new_spec.get(kind) or []) != len(old_spec.get(kind) or []):
            return causes + [forbidden(f"spec.{kind}", "pod updates may not add or remove containers")]
    # activeDeadlineSeconds: nil -> positive, or positive -> smaller non-negative.
    new_ads, old_ads = new_spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
    if new_ads is not None:
        if not isinstance(new_ads, int) or new_ads < 0 or new_ads > 2**31 - 1:
            return causes + [invalid_value("spec.activeDeadlineSeconds", new_ads, "must be between 0 and 2147483647, inclusive")]
        if old_ads is not None and old_ads < new_ads:
            return causes + [invalid_value("spec.activeDeadlineSeconds", new_ads, "must be less than or equal to previous value")]
    elif old_ads is not None:
        causes.append(invalid_value("spec.activeDeadlineSeconds", None, "must not update from a positive integer to nil value"))
    # Tolerations: only additions (tolerationSeconds of an existing one may change).
    new_tolerations = new_spec.get("tolerations") or []
    for old_toleration in old_spec.get("tolerations") or []:
        found = any(
            isinstance(t, dict) and equal(dict(old_toleration, tolerationSeconds=t.get("tolerationSeconds")), t)
            for t in new_tolerations
        )
        if not found:
            causes.append(forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"))
            break
    # Scheduling gates: only deletions (validateOnlyDeletedSchedulingGates).
    old_gates = set(_names(old_spec.get("schedulingGates")))
    for index, name in enumerate(_names(new_spec.get("schedulingGates"))):
        if name not in old_gates:
            causes.append(forbidden(f"spec.schedulingGates[{index}].name",
                                    f"only deletion is allowed, but found new scheduling gate '{name}'"))
    # Munge the updatable fields back to the old values, then compare what is left.
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(new_spec.get(kind) or []):
            if isinstance(container, dict):
                container["image"] = (old_spec.get(kind) or [])[index].get("image")
    new_spec.pop("activeDeadlineSeconds", None)
    if old_ads is not None:
        new_spec["activeDeadlineSeconds"] = old_ads
    _restore(new_spec, old_spec, "schedulingGates")
    _restore(new_spec, old_spec, "tolerations")
    old_grace = old_spec.get("terminationGracePeriodSeconds")
    if old_grace is not None and old_grace < 0 and new_spec.get("terminationGracePeriodSeconds") == 1:
        new_spec["terminationGracePeriodSeconds"] = old_grace
    if old_spec.get("schedulingGates"):
        # KEP-3838: a gated pod's node selection may be narrowed, never widened.
        new_selector = new_spec.get("nodeSelector") or {}
        old_selector = old_spec.get("nodeSelector") or {}
        if new_selector != old_selector:
            if any(new_selector.get(k) != v for k, v in old_selector.items()):
                causes.append(invalid_value("spec.nodeSelector", new_selector,
                                            "only additions to spec.nodeSelector are allowed (no mutations or deletions)"))
            _restore(new_spec, old_spec, "nodeSelector")
        old_affinity = (old_spec.get("affinity") or {}).get("nodeAffinity")
        new_affinity = (new_spec.get("affinity") or {}).get("nodeAffinity")
        if not equal(old_affinity, new_affinity):
            old_terms = _required_terms(old_spec)
            new_terms = _required_terms(new_spec) or []
            terms_path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
            if old_terms:
                if len(old_terms) != len(new_terms):
                    causes.append(invalid_value(terms_path, new_terms,
                                                "no additions/deletions to non-empty NodeSelectorTerms list are allowed"))
                else:
                    for index, (new_term, old_term) in enumerate(zip(new_terms, old_terms, strict=True)):
                        if not _term_only_additions(new_term, old_term):
                            causes.append(invalid_value(f"{terms_path}[{index}]", new_term,
                                                        "only additions are allowed (no mutations or deletions)"))
            affinity = new_spec.get("affinity")
            if isinstance(affinity, dict):
                affinity = dict(affinity)
                if old_affinity is None:
                    affinity.pop("nodeAffinity", None)
                else:
                    affinity["nodeAffinity"] = clone(old_affinity)
                new_spec["affinity"] = affinity if affinity or old_spec.get("affinity") is not None else None
            elif old_affinity is not None:
                new_spec["affinity"] = {"nodeAffinity": clone(old_affinity)}
    if not equal(new_spec, old_spec):
        diff = _diff(old_spec, new_spec)
        causes.append(forbidden("spec", f"pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{diff}"))
    return causes


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """A short description of the differing top-level spec fields (the real one is a cmp.Diff)."""
    lines = ["  core.PodSpec{"]
    for key in sorted(set(old) | set(new)):
        if normal(old.get(key)) != normal(new.get(key)):
            lines.append(f"-\t{key}: {json.dumps(old.get(key))},")
            lines.append(f"+\t{key}: {json.dumps(new.get(key))},")
    lines.append("  }")
    return "\n".join(lines)


def validate_pod_status_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodStatusUpdate, the parts that can go wrong here."""
    causes = validate_object_meta_update(new, old)
    phase = (new.get("status") or {}).get("phase")
    if phase and phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        causes.append(not_supported("status.phase", phase, ["Failed", "Pending", "Running", "Succeeded", "Unknown"]))
    for index, condition in enumerate((new.get("status") or {}).get("conditions") or []):
        if not isinstance(condition, dict) or not condition.get("type"):
            causes.append(required(f"status.conditions[{index}].type"))
    return causes
