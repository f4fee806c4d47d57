"""OpenAPI v3 schemas of the custom resources kubesim serves as if their CRDs were installed.

ProvisioningRequest's schema is cluster-autoscaler's CRD
(cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml, v1), in the
shape kube-apiserver publishes a CRD at /openapi/v3 (apiextensions-apiserver
pkg/controller/openapi/builder: the definition named by the reversed group, metadata as a
reference to ObjectMeta, a List kind beside it, x-kubernetes-group-version-kind set).
"""

from __future__ import annotations

from typing import Any

_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_NAME = {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"}
_IMMUTABLE = [{"rule": "self == oldSelf", "message": "Value is immutable"}]
_PROVREQ = "io.x-k8s.autoscaling.v1.ProvisioningRequest"


def _gvk(kind: str) -> list[dict[str, str]]:
    return [{"group": "autoscaling.x-k8s.io", "version": "v1", "kind": kind}]


def schemas() -> dict[str, Any]:
    """Definition name -> schema, for the CRDs kubesim serves."""
    condition = {"allOf": [{"$ref": f"#/components/schemas/{_META}Condition"}], "default": {}}
    spec = {
        "type": "object",
        "required": ["podSets", "provisioningClassName"],
        "properties": {
            "podSets": {
                "type": "array", "minItems": 1, "maxItems": 32, "x-kubernetes-validations": _IMMUTABLE,
                "items": {
                    "type": "object", "required": ["count", "podTemplateRef"],
                    "properties": {
                        "count": {"type": "integer", "format": "int32", "minimum": 1},
                        "podTemplateRef": {"type": "object", "properties": {"name": dict(_NAME)}},
                    },
                },
            },
            "provisioningClassName": dict(_NAME, **{"x-kubernetes-validations": _IMMUTABLE}),
            "parameters": {"type": "object", "maxProperties": 100, "x-kubernetes-validations": _IMMUTABLE,
                           "additionalProperties": {"type": "string", "maxLength": 255}},
        },
    }
    status = {
        "type": "object",
        "properties": {
            "conditions": {"type": "array", "items": condition, "x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["type"]},
            "provisioningClassDetails": {"type": "object", "maxProperties": 64,
                                         "additionalProperties": {"type": "string", "maxLength": 32768}},
        },
    }
    return {
        _PROVREQ: {
            "type": "object", "required": ["spec"],
            "description": "ProvisioningRequest is a way to express additional capacity that we would like to provision in the cluster.",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": f"#/components/schemas/{_META}ObjectMeta"}]},
                "spec": spec, "status": status,
            },
            "x-kubernetes-group-version-kind": _gvk("ProvisioningRequest"),
        },
        _PROVREQ + "List": {
            "type": "object", "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{_PROVREQ}"}},
                "metadata": {"allOf": [{"$ref": f"#/components/schemas/{_META}ListMeta"}]},
            },
            "x-kubernetes-group-version-kind": _gvk("ProvisioningRequestList"),
        },
    }
