"""ProvisioningRequests (autoscaling.x-k8s.io/v1) and PodTemplates (v1) as the API server stores them.

ProvisioningRequest is a CustomResourceDefinition in a real cluster
(cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml): its schema
says podSets 1-32 items, each with podTemplateRef.name (a DNS subdomain) and count >= 1;
provisioningClassName a DNS subdomain of at most 253 characters; at most 100 parameters of at
most 255 characters each; and `self == oldSelf` on podSets, provisioningClassName and
parameters ("Value is immutable"). The status is a subresource, as for every CRD with
`subresources.status`: the main resource keeps the status, the status subresource the spec
(apiextensions-apiserver pkg/registry/customresource/strategy.go), and metadata.generation moves
with the spec. PodTemplates follow pkg/registry/core/podtemplate/strategy.go (generation 1 on
create, bumped when the template changes) and pkg/apis/core/validation ValidatePodTemplate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ganggate.sim.api import autoscaling
from ganggate.sim.apimachinery.errors import Cause, invalid_value, required, too_long
from ganggate.sim.apimachinery.objectmeta import validate_object_meta
from ganggate.sim.apiserver.watch import clone

Obj = dict[str, Any]
KEY = autoscaling.KEY
PODTEMPLATES = "podtemplates"
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IMMUTABLE = ("podSets", "provisioningClassName", "parameters")


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def default(obj: Obj) -> None:
    """No defaults beyond the object's metadata (the CRD declares none)."""


def prepare_create(obj: Obj) -> None:
    obj.pop("status", None)
    obj.setdefault("metadata", {})["generation"] = 1


def prepare_update(new: Obj, old: Mapping[str, Any]) -> None:
    new["status"] = clone(old.get("status") or {})
    if not new["status"]:
        new.pop("status")
    generation = (old.get("metadata") or {}).get("generation") or 1
    changed = not _same(new.get("spec"), old.get("spec"))
    new.setdefault("metadata", {})["generation"] = generation + 1 if changed else generation


def prepare_status_update(new: Obj, old: Mapping[str, Any]) -> None:
    new["spec"] = clone(old.get("spec") or {})


def _subdomain(path: str, value: Any, limit: int = 253) -> list[Cause]:
    if not value:
        return [required(path)]
    if not isinstance(value, str) or not _SUBDOMAIN.match(value):
        return [invalid_value(path, value, f"spec.{path.split('.')[-1]} in body should match "
                              f"'{_SUBDOMAIN.pattern}'")]
    return [too_long(path, limit)] if len(value) > limit else []


def validate(obj: Mapping[str, Any]) -> list[Cause]:
    causes = list(validate_object_meta(obj, namespaced=True))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return causes + [required("spec")]
    pod_sets = spec.get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        causes.append(invalid_value("spec.podSets", pod_sets, "spec.podSets in body should have at least 1 items")
                      if isinstance(pod_sets, list) else required("spec.podSets"))
    else:
        if len(pod_sets) > 32:
            causes.append(too_long("spec.podSets", 32))
        for index, pod_set in enumerate(pod_sets):
            path = f"spec.podSets[{index}]"
            ref = (pod_set or {}).get("podTemplateRef") or {}
            causes += _subdomain(f"{path}.podTemplateRef.name", ref.get("name"))
            count = (pod_set or {}).get("count")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                causes.append(invalid_value(f"{path}.count", count, f"{path}.count in body should be greater than or equal to 1"))
    causes += _subdomain("spec.provisioningClassName", spec.get("provisioningClassName"))
    parameters = spec.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        causes.append(invalid_value("spec.parameters", parameters, "must be an object"))
    else:
        if len(parameters) > 100:
            causes.append(invalid_value("spec.parameters", len(parameters), "must have at most 100 properties"))
        causes += [too_long(f"spec.parameters.{k}", 255) for k, v in parameters.items() if len(str(v)) > 255]
    return causes


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    causes = [c for c in validate(new) if not c.field.startswith("metadata.")]
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    for field in _IMMUTABLE:
        if not _same(new_spec.get(field), old_spec.get(field)):
            causes.append(invalid_value(f"spec.{field}", new_spec.get(field), "Value is immutable"))
    return causes


# ---- PodTemplates ----------------------------------------------------------------------------

def prepare_template_create(obj: Obj) -> None:
    obj.setdefault("metadata", {})["generation"] = 1


def prepare_template_update(new: Obj, old: Mapping[str, Any]) -> None:
    generation = (old.get("metadata") or {}).get("generation") or 1
    changed = not _same(new.get("template"), old.get("template"))
    new.setdefault("metadata", {})["generation"] = generation + 1 if changed else generation


def validate_template(obj: Mapping[str, Any]) -> list[Cause]:
    causes = list(validate_object_meta(obj, namespaced=True))
    template = obj.get("template")
    containers = ((template or {}).get("spec") or {}).get("containers") if isinstance(template, Mapping) else None
    if not containers:
        causes.append(required("template.spec.containers"))
    return causes


def validate_template_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    return [c for c in validate_template(new) if not c.field.startswith("metadata.")]
