"""Pod validation on create (pure): the spec as the real server checks it before storing.

pkg/apis/core/validation/validation.go:
- validatePodMetadataAndSpec (`validate_pod`, shared with update): object metadata, containers
  (names DNS-1123 labels, unique, an image, resource quantities in resource_validation.py),
  restartPolicy, tolerations (ValidateTolerations), nodeSelector, nodeName;
- validateSchedulingGates (KEP-3521): every gate name is a qualified name, and names are unique;
- ValidatePodCreate: no ephemeral containers, and a pod may not be created with both
  spec.nodeName and scheduling gates.

What may change afterwards is in pod_update.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, duplicate, forbidden, invalid_value, not_supported, required
from ganggate.sim.apimachinery.objectmeta import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
    validate_object_meta,
)
from ganggate.sim.apiserver.registry.pod_claims import validate_pod_resource_claims
from ganggate.sim.apiserver.registry.resource_validation import validate_resources

_RESTART_POLICIES = ["Always", "Never", "OnFailure"]


def _validate_containers(containers: Any, path: str, required_nonempty: bool) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(containers, list):
        if required_nonempty:
            causes.append(required(path))
        return causes
    if required_nonempty and not containers:
        causes.append(required(path))
    seen: set[str] = set()
    for index, container in enumerate(containers):
        here = f"{path}[{index}]"
        if not isinstance(container, dict):
            causes.append(invalid_value(here, container, "must be an object"))
            continue
        name = container.get("name") or ""
        if not name:
            causes.append(required(f"{here}.name"))
        else:
            for message in dns1123_label_errors(name):
                causes.append(invalid_value(f"{here}.name", name, message))
            if name in seen:
                causes.append(duplicate(f"{here}.name", name))
            seen.add(name)
        if not container.get("image"):
            causes.append(required(f"{here}.image"))
        causes += validate_resources(container.get("resources") or {}, f"{here}.resources")
    return causes


def validate_scheduling_gates(gates: Any, path: str = "spec.schedulingGates") -> list[Cause]:
    """validateSchedulingGates: every gate name is a qualified name, and names are unique."""
    causes: list[Cause] = []
    if gates is None:
        return causes
    if not isinstance(gates, list):
        return [invalid_value(path, gates, "must be a list")]
    seen: set[str] = set()
    for index, gate in enumerate(gates):
        name = gate.get("name", "") if isinstance(gate, dict) else ""
        here = f"{path}[{index}].name"
        for message in qualified_name_errors(name):
            causes.append(invalid_value(here, name, message))
        if name in seen:
            causes.append(duplicate(here, name))
        seen.add(name)
    return causes


def validate_tolerations(tolerations: Any, path: str = "spec.tolerations") -> list[Cause]:
    """ValidateTolerations: operator Exists/Equal, effect one of the three, Exists has no value."""
    causes: list[Cause] = []
    if tolerations is None:
        return causes
    if not isinstance(tolerations, list):
        return [invalid_value(path, tolerations, "must be a list")]
    for index, toleration in enumerate(tolerations):
        here = f"{path}[{index}]"
        if not isinstance(toleration, dict):
            causes.append(invalid_value(here, toleration, "must be an object"))
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key:
            for message in qualified_name_errors(key):
                causes.append(invalid_value(f"{here}.key", key, message))
        elif operator != "Exists":
            causes.append(invalid_value(f"{here}.operator", operator,
                                        "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
        if operator not in ("Equal", "Exists"):
            causes.append(not_supported(f"{here}.operator", operator, ["Equal", "Exists"]))
        if operator == "Exists" and toleration.get("value"):
            causes.append(invalid_value(f"{here}.operator", toleration.get("value"),
                                        "value must be empty when `operator` is 'Exists'"))
        effect = toleration.get("effect") or ""
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(not_supported(f"{here}.effect", effect, ["NoExecute", "NoSchedule", "PreferNoSchedule"]))
    return causes


def validate_pod(pod: Mapping[str, Any]) -> list[Cause]:
    """validatePodMetadataAndSpec, the part common to create and update."""
    causes = validate_object_meta(pod, namespaced=True)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return causes + [required("spec")]
    causes += _validate_containers(spec.get("containers"), "spec.containers", True)
    causes += _validate_containers(spec.get("initContainers"), "spec.initContainers", False)
    policy = spec.get("restartPolicy")
    if policy not in _RESTART_POLICIES:
        causes.append(not_supported("spec.restartPolicy", policy, _RESTART_POLICIES))
    causes += validate_scheduling_gates(spec.get("schedulingGates"))
    causes += validate_pod_resource_claims(spec)
    causes += validate_tolerations(spec.get("tolerations"))
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        causes.append(invalid_value("spec.nodeSelector", selector, "must be a map of strings"))
    else:
        for key, value in selector.items():
            for message in qualified_name_errors(key):
                causes.append(invalid_value("spec.nodeSelector", key, message))
            for message in label_value_errors(str(value)):
                causes.append(invalid_value("spec.nodeSelector", value, message))
    if spec.get("nodeName"):
        for message in dns1123_subdomain_errors(spec["nodeName"]):
            causes.append(invalid_value("spec.nodeName", spec["nodeName"], message))
    return causes


def validate_pod_create(pod: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodCreate."""
    causes = validate_pod(pod)
    spec = pod.get("spec") or {}
    if isinstance(spec, dict):
        if spec.get("ephemeralContainers"):
            causes.append(forbidden("spec.ephemeralContainers", "cannot be set on create"))
        # A Pod cannot be assigned a Node if there are remaining scheduling gates.
        if spec.get("nodeName") and spec.get("schedulingGates"):
            causes.append(forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    return causes
