"""Workloads and PodGroups (scheduling.k8s.io/v1beta1, Kubernetes 1.37) as the API server stores
them, and the pod field that names a PodGroup.

Rules follow staging/src/k8s.io/api/scheduling/v1beta1/types.go (its +k8s validation tags) and
pkg/registry/scheduling/{workload,podgroup}/strategy.go: a Workload has 1-8 podGroupTemplates with
unique DNS-label names, each with exactly one of schedulingPolicy.basic / .gang (gang.minCount
>= 1); templates may be neither added nor removed, controllerRef is immutable. A PodGroup has
exactly one scheduling policy, immutable but for gang.minCount (mutable, for scaling); its
workloadRef, priorityClassName, priority, disruptionMode and schedulingConstraints are
immutable; at most one topology constraint whose key is a label key. The status is a
subresource (PodGroup +k8s:supportsSubresource="/status"), generation moves with the spec.
The pod field spec.schedulingGroup.podGroupName (pkg/api/pod/util.go dropDisabledPodFields) is
dropped on create when GenericWorkload is off, kept on update if the old pod had it, and is
immutable (ValidatePodUpdate compares the whole spec: pod_update.py says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ganggate.sim.api import scheduling as api
from ganggate.sim.apimachinery.errors import Cause, duplicate, forbidden, invalid_value, required, too_many
from ganggate.sim.apimachinery.objectmeta import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    qualified_name_errors,
    validate_object_meta,
)
from ganggate.sim.apiserver.registry import provisioningrequest as provreq

Obj = dict[str, Any]
_PODGROUP_IMMUTABLE = ("workloadRef", "priorityClassName", "priority", "disruptionMode", "schedulingConstraints",
                       "parentCompositePodGroupName")


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _immutable(path: str, new: Any, old: Any) -> list[Cause]:
    return [] if _same(new, old) else [invalid_value(path, new, "field is immutable")]


def _name_causes(path: str, value: Any, rule: str = "label") -> list[Cause]:
    if not value:
        return [required(path)]
    if not isinstance(value, str):
        return [invalid_value(path, value, "must be a string")]
    errors = dns1123_label_errors(value) if rule == "label" else dns1123_subdomain_errors(value)
    return [invalid_value(path, value, "; ".join(errors))] if errors else []


def default(obj: Obj) -> None:
    """PodGroupSpec.disruptionMode defaults to single (+default={"single": {}})."""
    if obj.get("kind") == "PodGroup" and isinstance(obj.get("spec"), dict):
        obj["spec"].setdefault("disruptionMode", {"single": {}})


# The strategy of a kind with a status subresource: no status on create, status kept on update,
# spec kept on a status update, generation counting spec changes (the same as ProvisioningRequest's).
prepare_create = provreq.prepare_create
prepare_update = provreq.prepare_update
prepare_status_update = provreq.prepare_status_update


def _policy(path: str, policy: Any) -> list[Cause]:
    """PodGroupSchedulingPolicy: a union, exactly one of basic and gang; gang.minCount >= 1."""
    if not isinstance(policy, Mapping):
        return [required(path)]
    chosen = [key for key in ("basic", "gang") if policy.get(key) is not None]
    if len(chosen) != 1:
        return [invalid_value(path, "", "must specify exactly one of: `basic`, `gang`")]
    if chosen == ["gang"]:
        gang = policy["gang"]
        count = gang.get("minCount") if isinstance(gang, Mapping) else None
        if count is None:
            return [required(f"{path}.gang.minCount")]
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            return [invalid_value(f"{path}.gang.minCount", count, "must be greater than or equal to 1")]
    return []


def _constraints(path: str, constraints: Any) -> list[Cause]:
    if constraints is None:
        return []
    topology = (constraints or {}).get("topology") or [] if isinstance(constraints, Mapping) else None
    if not isinstance(topology, list):
        return [invalid_value(f"{path}.topology", topology, "must be a list")]
    causes: list[Cause] = [too_many(f"{path}.topology", len(topology), 1)] if len(topology) > 1 else []
    for index, item in enumerate(topology):
        key = (item or {}).get("key") if isinstance(item, Mapping) else None
        if not key:
            causes.append(required(f"{path}.topology[{index}].key"))
        elif errors := qualified_name_errors(key):
            causes.append(invalid_value(f"{path}.topology[{index}].key", key, "; ".join(errors)))
    return causes


def _priority(path: str, spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    if spec.get("priorityClassName"):
        causes += _name_causes(f"{path}.priorityClassName", spec["priorityClassName"], "subdomain")
    priority = spec.get("priority")
    if priority is not None and (not isinstance(priority, int) or priority > api.HIGHEST_USER_DEFINABLE_PRIORITY):
        causes.append(invalid_value(f"{path}.priority", priority,
                                    f"must be less than or equal to {api.HIGHEST_USER_DEFINABLE_PRIORITY}"))
    return causes


# ---- Workloads ---------------------------------------------------------------------------------

def validate_workload(obj: Mapping[str, Any]) -> list[Cause]:
    causes = list(validate_object_meta(obj, namespaced=True))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return causes + [required("spec")]
    templates = spec.get("podGroupTemplates")
    if spec.get("compositePodGroupTemplates"):
        causes.append(forbidden("spec.compositePodGroupTemplates", "disabled by feature-gate CompositePodGroup"))
    if not isinstance(templates, list) or not templates:
        return causes + [required("spec.podGroupTemplates", "must specify one of: `podGroupTemplates`, "
                                                            "`compositePodGroupTemplates`")]
    if len(templates) > api.MAX_POD_GROUP_TEMPLATES:
        causes.append(too_many("spec.podGroupTemplates", len(templates), api.MAX_POD_GROUP_TEMPLATES))
    seen: set[str] = set()
    for index, template in enumerate(templates):
        path = f"spec.podGroupTemplates[{index}]"
        if not isinstance(template, Mapping):
            causes.append(invalid_value(path, template, "must be an object"))
            continue
        name = template.get("name")
        causes += _name_causes(f"{path}.name", name)
        if isinstance(name, str) and name in seen:
            causes.append(duplicate(f"{path}.name", name))
        seen.add(name if isinstance(name, str) else "")
        causes += _policy(f"{path}.schedulingPolicy", template.get("schedulingPolicy"))
        causes += _constraints(f"{path}.schedulingConstraints", template.get("schedulingConstraints"))
        causes += _priority(path, template)
    ref = spec.get("controllerRef")
    if ref is not None:
        if not isinstance(ref, Mapping) or not ref.get("kind"):
            causes.append(required("spec.controllerRef.kind"))
        if not isinstance(ref, Mapping) or not ref.get("name"):
            causes.append(required("spec.controllerRef.name"))
    return causes


def validate_workload_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    causes = [c for c in validate_workload(new) if not c.field.startswith("metadata.")]
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    causes += _immutable("spec.controllerRef", new_spec.get("controllerRef"), old_spec.get("controllerRef"))
    def names(spec: Mapping[str, Any]) -> list[str]:
        return sorted(str((t or {}).get("name")) for t in spec.get("podGroupTemplates") or [])
    if names(new_spec) != names(old_spec):
        causes.append(forbidden("spec.podGroupTemplates", "templates may not be added or removed"))
    return causes


# ---- PodGroups ---------------------------------------------------------------------------------

def validate_podgroup(obj: Mapping[str, Any]) -> list[Cause]:
    causes = list(validate_object_meta(obj, namespaced=True))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return causes + [required("spec")]
    causes += _policy("spec.schedulingPolicy", spec.get("schedulingPolicy"))
    ref = spec.get("workloadRef")
    if ref is not None:
        ref = ref if isinstance(ref, Mapping) else {}
        causes += _name_causes("spec.workloadRef.workloadName", ref.get("workloadName"), "subdomain")
        causes += _name_causes("spec.workloadRef.templateName", ref.get("templateName"))
    if spec.get("parentCompositePodGroupName") is not None:
        causes.append(forbidden("spec.parentCompositePodGroupName", "disabled by feature-gate CompositePodGroup"))
    causes += _constraints("spec.schedulingConstraints", spec.get("schedulingConstraints"))
    causes += _priority("spec", spec)
    return causes


def validate_podgroup_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    causes = [c for c in validate_podgroup(new) if not c.field.startswith("metadata.")]
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    for field in _PODGROUP_IMMUTABLE:
        causes += _immutable(f"spec.{field}", new_spec.get(field), old_spec.get(field))
    new_policy, old_policy = new_spec.get("schedulingPolicy") or {}, old_spec.get("schedulingPolicy") or {}
    causes += _immutable("spec.schedulingPolicy.basic", new_policy.get("basic"), old_policy.get("basic"))
    if (new_policy.get("gang") is None) != (old_policy.get("gang") is None):
        causes.append(invalid_value("spec.schedulingPolicy.gang", new_policy.get("gang"), "field is immutable"))
    return causes


def validate_podgroup_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for index, condition in enumerate(((new.get("status") or {}).get("conditions")) or []):
        path = f"status.conditions[{index}]"
        kind = (condition or {}).get("type") if isinstance(condition, Mapping) else None
        if not kind:
            causes.append(required(f"{path}.type"))
        elif kind in seen:
            causes.append(duplicate(f"{path}.type", kind))
        seen.add(str(kind))
        if isinstance(condition, Mapping) and condition.get("status") not in ("True", "False", "Unknown"):
            causes.append(invalid_value(f"{path}.status", condition.get("status"),
                                        'supported values: "False", "True", "Unknown"'))
        if isinstance(condition, Mapping) and not condition.get("reason"):
            causes.append(required(f"{path}.reason"))
    return causes


def validate_podgroup_any_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """The status subresource keeps the spec (prepare_status_update), so both checks hold on either."""
    return validate_podgroup_update(new, old) + validate_podgroup_status(new, old)


# ---- the pod field -----------------------------------------------------------------------------

def drop_disabled_pod_fields(pod: Obj, old: Mapping[str, Any] | None, enabled: bool) -> None:
    """dropDisabledPodFields: without GenericWorkload, spec.schedulingGroup is dropped unless the
    old pod already used it (a field stored while the gate was on survives updates)."""
    if enabled:
        return
    old_uses = bool(((old or {}).get("spec") or {}).get("schedulingGroup"))
    if not old_uses:
        (pod.get("spec") or {}).pop("schedulingGroup", None)


def gated_create_causes(key: str, obj: Mapping[str, Any], gates: Any) -> list[Cause]:
    """What a create is refused for beside the kind's own rules: a pod's schedulingGroup that is
    malformed; a PodGroup's or Workload template's schedulingConstraints while
    TopologyAwareWorkloadScheduling is off (+k8s:ifDisabled(...)=+k8s:forbidden)."""
    if key == "pods":
        return validate_pod_scheduling_group(obj)
    if gates.enabled("TopologyAwareWorkloadScheduling"):
        return []
    spec = obj.get("spec") or {}
    if key == api.PODGROUPS and spec.get("schedulingConstraints") is not None:
        return [forbidden("spec.schedulingConstraints", "disabled by feature-gate TopologyAwareWorkloadScheduling")]
    if key == api.WORKLOADS:
        return [forbidden(f"spec.podGroupTemplates[{i}].schedulingConstraints",
                          "disabled by feature-gate TopologyAwareWorkloadScheduling")
                for i, t in enumerate(spec.get("podGroupTemplates") or [])
                if isinstance(t, Mapping) and t.get("schedulingConstraints") is not None]
    return []


def validate_pod_scheduling_group(pod: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodSpec's schedulingGroup: podGroupName is required and a DNS subdomain."""
    group = (pod.get("spec") or {}).get("schedulingGroup")
    if group is None:
        return []
    if not isinstance(group, Mapping):
        return [invalid_value("spec.schedulingGroup", group, "must be an object")]
    return _name_causes("spec.schedulingGroup.podGroupName", group.get("podGroupName"), "subdomain")
