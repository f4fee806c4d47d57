"""Validation of the objects kubesim stores, by kind and subresource (pure); the API server's
one entry point for defaulting, strategies and validation of the kinds without their own
strategy (strategies.py has the others).

Where each rule lives, with the Kubernetes source it follows cited beside the code:
- objectmeta.py: names (k8s.io/apimachinery/pkg/util/validation) and object metadata
  (k8s.io/apimachinery/pkg/api/validation/objectmeta.go: labels, annotations up to 256 KiB in
  total, immutable uid/creationTimestamp/namespace on update);
- defaulting.py: SetDefaults_Pod and friends (pkg/apis/core/v1/defaults.go), the pod, node and
  namespace strategies' PrepareForCreate/PrepareForUpdate (pkg/registry/core/pod/strategy.go:
  phase Pending and the SchedulingGated condition), and the Go types' `omitempty` encoding;
- pod_validation.py: ValidatePodCreate (pkg/apis/core/validation/validation.go: a pod may not be
  created with both spec.nodeName and scheduling gates), validateSchedulingGates (KEP-3521:
  qualified, unique names), tolerations, containers; resource_validation.py: their quantities;
- pod_update.py: ValidatePodUpdate (only the listed fields may change; gates may only be
  removed, KEP-3521; while gated, nodeSelector may only gain entries and required node affinity
  terms may only gain expressions, KEP-3838; tolerations may only be added) and
  ValidatePodStatusUpdate;
- semantic.py: apiequality.Semantic.DeepEqual (empty and absent are the same);
- here: nodes (taints), namespaces, MutatingWebhookConfigurations and events, and the
  dispatch by kind.

The names the API server and the other strategies use are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, duplicate, invalid_value, not_supported, required
from ganggate.sim.apimachinery.objectmeta import (
    DNS1123_LABEL_ERROR,
    DNS1123_SUBDOMAIN_ERROR,
    QUALIFIED_NAME_ERROR,
    TOTAL_ANNOTATION_SIZE_LIMIT,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
    validate_object_meta,
    validate_object_meta_update,
)
from ganggate.sim.apiserver.defaulting import (
    SCHEDULING_GATED_MESSAGE,
    default_namespace,
    default_node,
    default_pod,
    default_toleration_seconds,
    drop_empty,
    prepare_generic_update,
    prepare_pod_create,
    prepare_pod_update,
    prepare_status_update,
    qos_class,
)
from ganggate.sim.apiserver.registry.pod_update import (
    UPDATABLE_POD_SPEC_FIELDS,
    validate_pod_status_update,
    validate_pod_update,
)
from ganggate.sim.apiserver.registry.pod_validation import (
    validate_pod,
    validate_pod_create,
    validate_scheduling_gates,
    validate_tolerations,
)

__all__ = [
    "DNS1123_LABEL_ERROR", "DNS1123_SUBDOMAIN_ERROR", "QUALIFIED_NAME_ERROR", "SCHEDULING_GATED_MESSAGE",
    "TOTAL_ANNOTATION_SIZE_LIMIT", "UPDATABLE_POD_SPEC_FIELDS",
    "default_namespace", "default_node", "default_pod", "default_toleration_seconds", "drop_empty",
    "dns1123_label_errors", "dns1123_subdomain_errors", "label_value_errors", "qualified_name_errors",
    "prepare_generic_update", "prepare_pod_create", "prepare_pod_update", "prepare_status_update", "qos_class",
    "validate_create", "validate_event", "validate_node", "validate_object_meta", "validate_object_meta_update",
    "validate_pod", "validate_pod_create", "validate_pod_status_update", "validate_pod_update",
    "validate_scheduling_gates", "validate_tolerations", "validate_update",
]


# ---- other kinds --------------------------------------------------------------------------------------
def validate_node(node: Mapping[str, Any]) -> list[Cause]:
    causes = validate_object_meta(node, namespaced=False)
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate((node.get("spec") or {}).get("taints") or []):
        here = f"spec.taints[{index}]"
        if not isinstance(taint, dict):
            causes.append(invalid_value(here, taint, "must be an object"))
            continue
        key = taint.get("key") or ""
        if not key:
            causes.append(required(f"{here}.key"))
        for message in qualified_name_errors(key) if key else []:
            causes.append(invalid_value(f"{here}.key", key, message))
        effect = taint.get("effect") or ""
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(not_supported(f"{here}.effect", effect, ["NoExecute", "NoSchedule", "PreferNoSchedule"]))
        if (key, effect) in seen:
            causes.append(duplicate(here, taint))
        seen.add((key, effect))
    return causes


def validate_create(kind: str, obj: Mapping[str, Any], namespaced: bool) -> list[Cause]:
    """Validation on create, by kind."""
    if kind == "Pod":
        return validate_pod_create(obj)
    if kind == "Node":
        return validate_node(obj)
    if kind == "Namespace":
        return validate_object_meta(obj, namespaced=False, name_rule="label")
    if kind == "MutatingWebhookConfiguration":
        return validate_object_meta(obj, namespaced=False) + _validate_webhooks(obj)
    if kind == "Event":
        return validate_object_meta(obj, namespaced) + validate_event(obj)
    return validate_object_meta(obj, namespaced)


def validate_event(event: Mapping[str, Any]) -> list[Cause]:
    """ValidateEventCreate/legacyValidateEvent (pkg/apis/core/validation/events.go), the essentials.

    An event without eventTime (core/v1 style) must live in its involved object's namespace; one
    with eventTime (events.k8s.io/v1 style) needs the reporting controller and instance, the
    action and the reason.
    """
    causes: list[Cause] = []
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    new_style = bool(event.get("eventTime"))
    if event.get("apiVersion") == "events.k8s.io/v1":
        regarding = event.get("regarding") or {}
        if not new_style:
            causes.append(required("eventTime"))
        involved_namespace = regarding.get("namespace") or ""
        controller_field, instance = "reportingController", event.get("reportingInstance")
        controller = event.get("reportingController")
        action, reason = event.get("action"), event.get("reason")
    else:
        involved_namespace = (event.get("involvedObject") or {}).get("namespace") or ""
        controller_field, instance = "reportingComponent", event.get("reportingInstance")
        controller = event.get("reportingComponent")
        action, reason = event.get("action"), event.get("reason")
    if not new_style or event.get("apiVersion") != "events.k8s.io/v1":
        if involved_namespace and namespace != involved_namespace:
            causes.append(invalid_value("involvedObject.namespace", involved_namespace, "does not match event.namespace"))
        if not involved_namespace and namespace not in ("", "default"):
            causes.append(invalid_value("involvedObject.namespace", involved_namespace, "does not match event.namespace"))
    strict = event.get("apiVersion") == "events.k8s.io/v1"  # strict validation for the new API
    if strict and event.get("type") not in ("Normal", "Warning"):
        causes.append(invalid_value("type", event.get("type") or "", f"has invalid value: {event.get('type') or ''}"))
    if new_style or strict:
        if not controller:
            causes.append(required(controller_field))
        if not instance:
            causes.append(required("reportingInstance"))
        if not action:
            causes.append(required("action"))
        if not reason:
            causes.append(required("reason"))
    return causes


def validate_update(kind: str, new: Mapping[str, Any], old: Mapping[str, Any], namespaced: bool,
                    subresource: str | None = None) -> list[Cause]:
    """Validation on update, by kind and subresource."""
    if kind == "Pod":
        if subresource == "status":
            return validate_pod_status_update(new, old)
        return validate_pod_update(new, old)
    causes = validate_object_meta_update(new, old)
    if kind == "Node":
        return causes + validate_node(new)
    if kind == "Namespace":
        return causes + validate_object_meta(new, namespaced=False, name_rule="label")
    if kind == "MutatingWebhookConfiguration":
        return causes + validate_object_meta(new, namespaced=False) + _validate_webhooks(new)
    return causes + validate_object_meta(new, namespaced)


def _validate_webhooks(config: Mapping[str, Any]) -> list[Cause]:
    """ValidateMutatingWebhookConfiguration, the essentials: names, unique, a client config."""
    causes: list[Cause] = []
    seen: set[str] = set()
    for index, hook in enumerate(config.get("webhooks") or []):
        here = f"webhooks[{index}]"
        if not isinstance(hook, dict):
            causes.append(invalid_value(here, hook, "must be an object"))
            continue
        name = hook.get("name") or ""
        if not name:
            causes.append(required(f"{here}.name"))
        else:
            for message in dns1123_subdomain_errors(name):
                causes.append(invalid_value(f"{here}.name", name, message))
            if name.count(".") < 2:
                causes.append(invalid_value(f"{here}.name", name, "should be a domain with at least three segments separated by dots"))
            if name in seen:
                causes.append(duplicate(f"{here}.name", name))
            seen.add(name)
        client = hook.get("clientConfig") or {}
        if bool(client.get("url")) == bool(client.get("service")):
            causes.append(required(f"{here}.clientConfig", "exactly one of url or service is required"))
        if not hook.get("sideEffects"):
            causes.append(required(f"{here}.sideEffects", ""))
        if not hook.get("admissionReviewVersions"):
            causes.append(required(f"{here}.admissionReviewVersions", "must specify one of v1, v1beta1"))
    return causes
