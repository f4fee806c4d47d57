"""DeviceClass, ResourceSlice, ResourceClaim and ResourceClaimTemplate (resource.k8s.io/v1) as the
API server stores them: pkg/registry/resource/<kind>/strategy.go and
pkg/apis/resource/validation/validation.go at v1.35 (ValidateDeviceClass, ValidateResourceSlice,
ValidateResourceClaim, ValidateResourceClaimStatusUpdate, ValidateResourceClaimTemplate), with
pkg/apis/resource/v1/defaults.go (allocationMode ExactCount, count 1).

What kubesim checks: names (DNS labels/subdomains), the one-of rules (a request is `exactly` or
`firstAvailable`; a slice's node is one of nodeName, nodeSelector, allNodes,
perDeviceNodeSelection), counts and list limits, CEL selectors that compile, attributes with
exactly one value, unique device and request names, the immutable claim and template spec, the
slice's immutable nodeName and driver, and on a claim's status: results naming a request of the
claim, reservedFor unique by uid and at most 256, an allocation set once and never changed while
it stays. DeviceClass's extendedResourceName is dropped unless DRAExtendedResource is on (the
strategy's dropDisabledFields). Left out: opaque config sizes, tolerations, admin access, the
alpha capacity and binding-conditions fields.
Why this module is long: the four kinds' rules share the request and selector checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ganggate.sim.api import resource as api
from ganggate.sim.apimachinery.errors import (
    Cause,
    duplicate,
    forbidden,
    invalid_value,
    not_supported,
    required,
    too_many,
)
from ganggate.sim.apimachinery.objectmeta import dns1123_label_errors, dns1123_subdomain_errors, validate_object_meta
from ganggate.sim.apimachinery.quantity import QuantityError, parse_nanos
from ganggate.sim.apiserver.watch import clone

Obj = dict[str, Any]
IMMUTABLE = "field is immutable"
DEVICE_CLASSES = api.DEVICE_CLASSES
# pkg/apis/resource/validation: the extended resource name rule (v1helper.IsExtendedResourceName)
_NATIVE_PREFIX = "kubernetes.io/"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _label(path: str, value: Any) -> list[Cause]:
    if not value:
        return [required(path)]
    return [invalid_value(path, value, m) for m in dns1123_label_errors(str(value))]


def _subdomain(path: str, value: Any) -> list[Cause]:
    if not value:
        return [required(path)]
    return [invalid_value(path, value, m) for m in dns1123_subdomain_errors(str(value))]


def _selectors(path: str, selectors: Any) -> list[Cause]:
    """validateSelectorSlice / validateSelector: each a `cel` with an expression that compiles."""
    from ganggate.sim.apiserver.admission.cel import compile_expression

    if not selectors:
        return []
    if not isinstance(selectors, list):
        return [invalid_value(path, selectors, "must be a list")]
    causes = [too_many(path, len(selectors), api.SELECTORS_MAX)] if len(selectors) > api.SELECTORS_MAX else []
    for index, selector in enumerate(selectors):
        here = f"{path}[{index}]"
        cel = (selector or {}).get("cel") if isinstance(selector, Mapping) else None
        if not isinstance(cel, Mapping):
            causes.append(required(f"{here}.cel"))
            continue
        expression = cel.get("expression")
        if not expression:
            causes.append(required(f"{here}.cel.expression"))
            continue
        compiled = compile_expression(str(expression))
        if compiled.error:
            causes.append(invalid_value(f"{here}.cel.expression", expression, compiled.error))
    return causes


def _extended_resource_name(path: str, value: Any) -> list[Cause]:
    """validateDeviceClassSpec: extendedResourceName must be an extended resource name
    (a qualified name with a domain outside kubernetes.io, not requests.*)."""
    text = str(value)
    if "/" not in text or text.startswith(_NATIVE_PREFIX) or text.startswith("requests."):
        return [invalid_value(path, value, "must be a valid extended resource name")]
    domain, _, name = text.partition("/")
    if dns1123_subdomain_errors(domain) or not name:
        return [invalid_value(path, value, "must be a valid extended resource name")]
    return []


# -- DeviceClass -----------------------------------------------------------------------------


def default_class(obj: Obj) -> None:
    obj.setdefault("spec", {})


def validate_class(obj: Mapping[str, Any]) -> list[Cause]:
    """ValidateDeviceClass."""
    causes = validate_object_meta(obj, namespaced=False)
    spec = obj.get("spec") or {}
    causes += _selectors("spec.selectors", spec.get("selectors"))
    if spec.get("extendedResourceName") is not None:
        causes += _extended_resource_name("spec.extendedResourceName", spec["extendedResourceName"])
    return causes


def validate_class_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    return validate_class(new)


# -- ResourceSlice ---------------------------------------------------------------------------

_ATTRIBUTE_TYPES = ("bool", "int", "string", "version")
_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _device(path: str, device: Mapping[str, Any]) -> list[Cause]:
    """validateDevice: name a DNS label; each attribute exactly one value; each capacity a quantity."""
    causes = _label(f"{path}.name", device.get("name"))
    for name, attribute in (device.get("attributes") or {}).items():
        here = f"{path}.attributes[{name}]"
        set_ = [t for t in _ATTRIBUTE_TYPES if isinstance(attribute, Mapping) and attribute.get(t) is not None]
        if len(set_) != 1:
            causes.append(invalid_value(here, attribute, "exactly one value must be specified"))
    for name, capacity in (device.get("capacity") or {}).items():
        value = (capacity or {}).get("value") if isinstance(capacity, Mapping) else None
        if value is None:
            causes.append(required(f"{path}.capacity[{name}].value"))
            continue
        try:
            parse_nanos(value)
        except QuantityError:
            causes.append(invalid_value(f"{path}.capacity[{name}].value", value, "must be a quantity"))
    return causes


def validate_slice(obj: Mapping[str, Any]) -> list[Cause]:
    """ValidateResourceSlice."""
    causes = validate_object_meta(obj, namespaced=False)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return causes + [required("spec")]
    causes += _subdomain("spec.driver", spec.get("driver"))
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        causes.append(required("spec.pool.name"))
    generation = pool.get("generation")
    if not isinstance(generation, int) or generation < 0:
        causes.append(invalid_value("spec.pool.generation", generation, "must be greater than or equal to 0"))
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        causes.append(invalid_value("spec.pool.resourceSliceCount", count, "must be greater than 0"))
    chosen = [f for f in _NODE_FIELDS if spec.get(f) not in (None, False, "", {})]
    if len(chosen) != 1:
        causes.append(invalid_value("spec", None if not chosen else chosen,
                                    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                                    "`perDeviceNodeSelection` is required"))
    if spec.get("nodeName"):
        causes += _subdomain("spec.nodeName", spec["nodeName"])
    devices = spec.get("devices") or []
    if len(devices) > api.SLICE_DEVICES_MAX:
        causes.append(too_many("spec.devices", len(devices), api.SLICE_DEVICES_MAX))
    seen: set[str] = set()
    for index, device in enumerate(devices):
        if not isinstance(device, Mapping):
            causes.append(invalid_value(f"spec.devices[{index}]", device, "must be an object"))
            continue
        causes += _device(f"spec.devices[{index}]", device)
        if device.get("name") in seen:
            causes.append(duplicate(f"spec.devices[{index}].name", device.get("name")))
        seen.add(str(device.get("name")))
    return causes


def validate_slice_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    causes = validate_slice(new)
    for name in ("nodeName", "driver"):
        if (new.get("spec") or {}).get(name) != (old.get("spec") or {}).get(name):
            causes.append(invalid_value(f"spec.{name}", (new.get("spec") or {}).get(name), IMMUTABLE))
    return causes


# -- ResourceClaim and ResourceClaimTemplate ----------------------------------------------------


def _default_claim_spec(spec: Any) -> None:
    """defaults.go SetDefaults_ExactDeviceRequest / DeviceSubRequest: ExactCount, count 1."""
    if not isinstance(spec, dict):
        return
    for request in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        for item in [request.get("exactly")] + list(request.get("firstAvailable") or []):
            if isinstance(item, dict):
                item.setdefault("allocationMode", api.EXACT_COUNT)
                if item["allocationMode"] == api.EXACT_COUNT:
                    item.setdefault("count", 1)


def _device_request(path: str, request: Mapping[str, Any]) -> list[Cause]:
    """validateDeviceRequest / validateExactDeviceRequest: class, selectors, mode and count."""
    causes = _subdomain(f"{path}.deviceClassName", request.get("deviceClassName"))
    causes += _selectors(f"{path}.selectors", request.get("selectors"))
    mode = request.get("allocationMode")
    if mode == api.ALL:
        if request.get("count"):
            causes.append(invalid_value(f"{path}.count", request["count"], "must not be specified when allocationMode is 'All'"))
    elif mode == api.EXACT_COUNT:
        count = request.get("count")
        if not isinstance(count, int) or count <= 0:
            causes.append(invalid_value(f"{path}.count", count, "must be greater than zero"))
    else:
        causes.append(not_supported(f"{path}.allocationMode", mode, list(api.ALLOCATION_MODES)))
    return causes


def _claim_spec(path: str, spec: Any) -> list[Cause]:
    """validateResourceClaimSpec / validateDeviceClaim."""
    if not isinstance(spec, Mapping):
        return [required(path)]
    devices = spec.get("devices") or {}
    requests = devices.get("requests") or []
    causes: list[Cause] = []
    if len(requests) > api.REQUESTS_MAX:
        causes.append(too_many(f"{path}.devices.requests", len(requests), api.REQUESTS_MAX))
    names: set[str] = set()
    for index, request in enumerate(requests):
        here = f"{path}.devices.requests[{index}]"
        if not isinstance(request, Mapping):
            causes.append(invalid_value(here, request, "must be an object"))
            continue
        causes += _label(f"{here}.name", request.get("name"))
        if request.get("name") in names:
            causes.append(duplicate(f"{here}.name", request.get("name")))
        names.add(str(request.get("name")))
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (not first):
            causes.append(invalid_value(here, None, "exactly one of `exactly` or `firstAvailable` is required"))
        if isinstance(exactly, Mapping):
            causes += _device_request(f"{here}.exactly", exactly)
        for sub_index, sub in enumerate(first or []):
            sub_path = f"{here}.firstAvailable[{sub_index}]"
            causes += _label(f"{sub_path}.name", (sub or {}).get("name"))
            causes += _device_request(sub_path, sub or {})
    for index, constraint in enumerate(devices.get("constraints") or []):
        for name in (constraint or {}).get("requests") or []:
            if name.split("/", 1)[0] not in names:
                causes.append(invalid_value(f"{path}.devices.constraints[{index}].requests", name,
                                            "must be the name of a request in the claim or the name of a "
                                            "request and a subrequest separated by '/'"))
    return causes


def default_claim(obj: Obj) -> None:
    _default_claim_spec(obj.get("spec"))


def default_template(obj: Obj) -> None:
    _default_claim_spec((obj.get("spec") or {}).get("spec"))


def validate_claim(obj: Mapping[str, Any]) -> list[Cause]:
    """ValidateResourceClaim."""
    return validate_object_meta(obj, namespaced=True) + _claim_spec("spec", obj.get("spec"))


def validate_claim_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateResourceClaimUpdate: the spec is immutable; plus ValidateResourceClaimStatusUpdate."""
    causes = validate_claim(new)
    if not _same(new.get("spec"), old.get("spec")):
        causes.append(invalid_value("spec", new.get("spec"), IMMUTABLE))
    return causes + _claim_status(new, old)


def _claim_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateResourceClaimStatusUpdate: reservedFor unique and bounded, only with an allocation;
    results name the claim's requests; an allocation is not changed once set."""
    status = new.get("status") or {}
    old_status = old.get("status") or {}
    causes: list[Cause] = []
    reserved = status.get("reservedFor") or []
    if len(reserved) > api.RESERVED_FOR_MAX:
        causes.append(too_many("status.reservedFor", len(reserved), api.RESERVED_FOR_MAX))
    uids: set[str] = set()
    for index, ref in enumerate(reserved):
        here = f"status.reservedFor[{index}]"
        if not ref.get("resource"):
            causes.append(required(f"{here}.resource"))
        if not ref.get("name"):
            causes.append(required(f"{here}.name"))
        if not ref.get("uid"):
            causes.append(required(f"{here}.uid"))
        elif ref["uid"] in uids:
            causes.append(duplicate(f"{here}.uid", ref["uid"]))
        uids.add(str(ref.get("uid")))
    allocation = status.get("allocation")
    if reserved and not allocation:
        causes.append(forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
    old_allocation = old_status.get("allocation")
    if allocation and old_allocation and not _same(allocation, old_allocation):
        causes.append(invalid_value("status.allocation", allocation, IMMUTABLE))
    if allocation:
        names = {r.get("name") for r in ((new.get("spec") or {}).get("devices") or {}).get("requests") or []}
        results = (allocation.get("devices") or {}).get("results") or []
        if len(results) > api.ALLOCATION_RESULTS_MAX * 4:
            causes.append(too_many("status.allocation.devices.results", len(results), api.ALLOCATION_RESULTS_MAX))
        for index, result in enumerate(results):
            here = f"status.allocation.devices.results[{index}]"
            if str(result.get("request", "")).split("/", 1)[0] not in names:
                causes.append(invalid_value(f"{here}.request", result.get("request"),
                                            "must be the name of a request in the claim or the name of a "
                                            "request and a subrequest separated by '/'"))
            for field in ("driver", "pool", "device"):
                if not result.get(field):
                    causes.append(required(f"{here}.{field}"))
    return causes


def validate_template(obj: Mapping[str, Any]) -> list[Cause]:
    """ValidateResourceClaimTemplate."""
    causes = validate_object_meta(obj, namespaced=True)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return causes + [required("spec")]
    return causes + _claim_spec("spec.spec", spec.get("spec"))


def validate_template_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    causes = validate_template(new)
    if not _same(new.get("spec"), old.get("spec")):
        causes.append(invalid_value("spec", new.get("spec"), IMMUTABLE))
    return causes


# -- strategies ---------------------------------------------------------------------------


def prepare_no_status(obj: Obj) -> None:
    """Kinds without status: generation 1 on create."""
    obj.setdefault("metadata", {})["generation"] = 1


def prepare_update_no_status(new: Obj, old: Mapping[str, Any]) -> None:
    generation = (old.get("metadata") or {}).get("generation") or 1
    changed = not _same(new.get("spec"), old.get("spec"))
    new.setdefault("metadata", {})["generation"] = generation + 1 if changed else generation


def prepare_claim_create(obj: Obj) -> None:
    """resourceclaim strategy PrepareForCreate: the status is the status subresource's."""
    obj.pop("status", None)
    prepare_no_status(obj)


def prepare_claim_update(new: Obj, old: Mapping[str, Any]) -> None:
    new["status"] = clone(old.get("status") or {})
    if not new["status"]:
        new.pop("status")
    prepare_update_no_status(new, old)


def prepare_claim_status_update(new: Obj, old: Mapping[str, Any]) -> None:
    """resourceclaimStatusStrategy.PrepareForUpdate (pkg/registry/resource/resourceclaim/strategy.go
    at v1.35): the spec is the stored one. Its ValidateUpdate asks nothing of who writes: any client
    RBAC lets update resourceclaims/status may write an allocation (only admin-access results need
    the namespace label, AuthorizedForAdminStatus); from 1.36 DRAResourceClaimGranularStatusAuthorization
    also asks for update on the synthetic resourceclaims/binding."""
    new["spec"] = clone(old.get("spec") or {})


def drop_disabled_class_fields(obj: Obj, extended_resource: bool, old: Mapping[str, Any] | None = None) -> None:
    """deviceclass strategy dropDisabledFields: extendedResourceName only with DRAExtendedResource
    (kept on update when the stored object already uses it)."""
    spec = obj.get("spec")
    if extended_resource or not isinstance(spec, dict):
        return
    if old is not None and ((old.get("spec") or {}).get("extendedResourceName") is not None):
        return
    spec.pop("extendedResourceName", None)
