"""OpenAPI v3 schemas of scheduling.k8s.io/v1beta1 Workload and PodGroup (Kubernetes 1.37,
staging/src/k8s.io/api/scheduling/v1beta1/types.go) and the PodSpec field that names a PodGroup
(core/v1 PodSchedulingGroup), in the shape kube-apiserver publishes built-in kinds: definitions
named io.k8s.api.<group>.<version>.<Kind>, x-kubernetes-group-version-kind on the kinds, and
required fields as the +required tags say. kubectl reads them to validate fields and to compute
strategic merge patches (conditions merge on `type`).
"""

from __future__ import annotations

from typing import Any

_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_PREFIX = "io.k8s.api.scheduling.v1beta1."
_CORE = "io.k8s.api.core.v1."


def _ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


def _gvk(kind: str) -> list[dict[str, str]]:
    return [{"group": "scheduling.k8s.io", "version": "v1beta1", "kind": kind}]


def _obj(properties: dict[str, Any], required: list[str] | None = None, description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if description:
        schema["description"] = description
    return schema


def _string() -> dict[str, Any]:
    return {"type": "string", "default": ""}


def _kind(kind: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = _obj({"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                   "metadata": _ref(_META + "ObjectMeta"), **properties}, required, description)
    schema["x-kubernetes-group-version-kind"] = _gvk(kind)
    return schema


def _list(kind: str) -> dict[str, Any]:
    schema = _obj({"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                   "items": {"type": "array", "items": _ref(_PREFIX + kind)},
                   "metadata": _ref(_META + "ListMeta")}, ["items"])
    schema["x-kubernetes-group-version-kind"] = _gvk(kind + "List")
    return schema


def schemas() -> dict[str, Any]:
    """Definition name -> schema for the two kinds, their parts, and PodSchedulingGroup."""
    empty = _obj({})
    policy = _obj({"basic": _ref(_PREFIX + "BasicSchedulingPolicy"), "gang": _ref(_PREFIX + "GangSchedulingPolicy")},
                  description="Exactly one policy must be set.")
    template_fields = {
        "name": _string(),
        "schedulingPolicy": _ref(_PREFIX + "PodGroupSchedulingPolicy"),
        "schedulingConstraints": _ref(_PREFIX + "PodGroupSchedulingConstraints"),
        "disruptionMode": _ref(_PREFIX + "DisruptionMode"),
        "priorityClassName": {"type": "string"},
        "priority": {"type": "integer", "format": "int32"},
    }
    return {
        _PREFIX + "Workload": _kind("Workload", "Workload allows for expressing scheduling constraints that should be "
                                    "used when managing the lifecycle of workloads from the scheduling perspective.",
                                    {"spec": _ref(_PREFIX + "WorkloadSpec")}, ["spec"]),
        _PREFIX + "WorkloadList": _list("Workload"),
        _PREFIX + "WorkloadSpec": _obj({
            "controllerRef": _ref(_PREFIX + "TypedLocalObjectReference"),
            "podGroupTemplates": {"type": "array", "items": _ref(_PREFIX + "PodGroupTemplate"),
                                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        }),
        _PREFIX + "TypedLocalObjectReference": _obj({"apiGroup": {"type": "string"}, "kind": _string(),
                                                     "name": _string()}, ["kind", "name"]),
        _PREFIX + "PodGroupTemplate": _obj(template_fields, ["name", "schedulingPolicy"]),
        _PREFIX + "PodGroupSchedulingPolicy": policy,
        _PREFIX + "BasicSchedulingPolicy": empty,
        _PREFIX + "GangSchedulingPolicy": _obj({"minCount": {"type": "integer", "format": "int32", "default": 0}},
                                               ["minCount"]),
        _PREFIX + "PodGroupSchedulingConstraints": _obj({"topology": {
            "type": "array", "items": _ref(_PREFIX + "TopologyConstraint"), "x-kubernetes-list-type": "atomic"}}),
        _PREFIX + "TopologyConstraint": _obj({"key": _string()}, ["key"]),
        _PREFIX + "DisruptionMode": _obj({"single": _ref(_PREFIX + "SingleDisruptionMode"),
                                          "all": _ref(_PREFIX + "AllDisruptionMode")}),
        _PREFIX + "SingleDisruptionMode": empty,
        _PREFIX + "AllDisruptionMode": empty,
        _PREFIX + "PodGroup": _kind("PodGroup", "PodGroup represents a runtime instance of pods grouped together.",
                                    {"spec": _ref(_PREFIX + "PodGroupSpec"), "status": _ref(_PREFIX + "PodGroupStatus")},
                                    ["spec"]),
        _PREFIX + "PodGroupList": _list("PodGroup"),
        _PREFIX + "PodGroupSpec": _obj({
            "workloadRef": _ref(_PREFIX + "WorkloadReference"),
            **{k: v for k, v in template_fields.items() if k != "name"},
        }, ["schedulingPolicy"]),
        _PREFIX + "WorkloadReference": _obj({"workloadName": _string(), "templateName": _string()},
                                            ["workloadName", "templateName"]),
        _PREFIX + "PodGroupStatus": _obj({"conditions": {
            "type": "array", "items": _ref(_META + "Condition"), "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"], "x-kubernetes-patch-merge-key": "type",
            "x-kubernetes-patch-strategy": "merge"}}),
        _CORE + "PodSchedulingGroup": _obj({"podGroupName": {"type": "string"}},
                                           description="PodSchedulingGroup names the PodGroup a pod belongs to."),
    }


def add_pod_field(every: dict[str, Any]) -> None:
    """PodSpec.schedulingGroup (core/v1 types.go, +featureGate=GenericWorkload): in the schema
    whatever the gate, as kube-apiserver publishes gated fields; the server drops it when off."""
    spec = every.get(_CORE + "PodSpec")
    if spec is not None:
        spec.setdefault("properties", {})["schedulingGroup"] = _ref(_CORE + "PodSchedulingGroup")
