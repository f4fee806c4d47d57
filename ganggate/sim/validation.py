"""Defaulting, create/update strategies and validation of the objects kubesim stores (pure).

Follows kube-apiserver where it matters to gangs:
- object metadata: k8s.io/apimachinery/pkg/api/validation/objectmeta.go (names, labels,
  annotations up to 256 KiB in total, immutable uid/creationTimestamp/namespace on update);
- pods: pkg/apis/core/validation/validation.go ValidatePodCreate (a pod may not be created with
  both spec.nodeName and scheduling gates), validateSchedulingGates (qualified, unique names) and
  ValidatePodUpdate (only the listed fields may change; gates may only be removed, KEP-3521;
  while gated, nodeSelector may only gain entries and required node affinity terms may only gain
  expressions, KEP-3838 validateNodeSelectorMutation/validateNodeAffinityMutation; tolerations
  may only be added, validateOnlyAddedTolerations);
- defaulting: pkg/apis/core/v1/defaults.go SetDefaults_Pod (requests from limits, restartPolicy,
  schedulerName ...), and the strategies of pkg/registry/core/pod/strategy.go (PrepareForCreate
  sets phase Pending and the SchedulingGated condition, PrepareForUpdate keeps the old status,
  PrepareForUpdate of the status strategy keeps the old spec).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ganggate.sim.quantity import QuantityError, parse_nanos
from ganggate.sim.errors import (
    Cause,
    duplicate,
    forbidden,
    invalid_value,
    not_supported,
    required,
    too_long,
)
from ganggate.sim.watch import clone

# ---- names (k8s.io/apimachinery/pkg/util/validation/validation.go) ---------------------------
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

DNS1123_LABEL_ERROR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_ERROR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUALIFIED_NAME_ERROR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def dns1123_label_errors(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        out.append(DNS1123_LABEL_ERROR)
    return out


def dns1123_subdomain_errors(value: str) -> list[str]:
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        out.append(DNS1123_SUBDOMAIN_ERROR)
    return out


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        prefix_errors: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        prefix_errors = ["prefix part " + e for e in dns1123_subdomain_errors(prefix)]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
            "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    out = list(prefix_errors)
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.match(name):
        out.append(QUALIFIED_NAME_ERROR)
    return out


def label_value_errors(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        out.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
            "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return out


# ---- object metadata ---------------------------------------------------------------------------
def validate_object_meta(obj: Mapping[str, Any], namespaced: bool, name_rule: str = "subdomain") -> list[Cause]:
    """ValidateObjectMeta: name (DNS subdomain or label), namespace presence, labels, annotations."""
    meta = obj.get("metadata") or {}
    causes: list[Cause] = []
    name = meta.get("name") or ""
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    else:
        check = dns1123_label_errors if name_rule == "label" else dns1123_subdomain_errors
        for message in check(name):
            causes.append(invalid_value("metadata.name", name, message))
    if namespaced and not meta.get("namespace"):
        causes.append(required("metadata.namespace"))
    if not namespaced and meta.get("namespace"):
        causes.append(forbidden("metadata.namespace", "not allowed on this type"))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(invalid_value("metadata.labels", labels, "must be a map of strings"))
        labels = {}
    for key, value in labels.items():
        for message in qualified_name_errors(key):
            causes.append(invalid_value("metadata.labels", key, message))
        if not isinstance(value, str):
            causes.append(invalid_value("metadata.labels", value, "must be a string"))
            continue
        for message in label_value_errors(value):
            causes.append(invalid_value("metadata.labels", value, message))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        causes.append(invalid_value("metadata.annotations", annotations, "must be a map of strings"))
        annotations = {}
    total = 0
    for key, value in annotations.items():
        for message in qualified_name_errors(key.lower()):
            causes.append(invalid_value("metadata.annotations", key, message))
        if not isinstance(value, str):
            causes.append(invalid_value(f"metadata.annotations[{key}]", value, "must be a string"))
            continue
        total += len(key) + len(value)
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def validate_object_meta_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateObjectMetaUpdate: name, namespace, uid and creationTimestamp are immutable."""
    new_meta, old_meta = new.get("metadata") or {}, old.get("metadata") or {}
    causes = []
    for field in ("name", "namespace", "uid", "creationTimestamp"):
        if new_meta.get(field) and new_meta.get(field) != old_meta.get(field):
            causes.append(invalid_value(f"metadata.{field}", new_meta.get(field), "field is immutable"))
    return causes


# ---- defaulting and strategies -------------------------------------------------------------------
def default_pod(pod: dict[str, Any]) -> None:
    """SetDefaults_Pod and friends (pkg/apis/core/v1/defaults.go), for the fields that matter here."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("priority", spec.get("priority", 0))
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or []:
            if not isinstance(container, dict):
                continue
            resources = container.get("resources")
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
                # SetDefaults_Pod: requests default to limits where a limit is set and the request is not.
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, amount in resources["limits"].items():
                        requests.setdefault(name, amount)
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            if "image" in container and "imagePullPolicy" not in container:
                image = str(container.get("image") or "")
                tag = image.rsplit("/", 1)[-1]
                latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
                container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"


def default_toleration_seconds(pod: dict[str, Any]) -> None:
    """The DefaultTolerationSeconds admission plugin (plugin/pkg/admission/defaulttolerationseconds),
    run on pod creation before webhooks: tolerate not-ready/unreachable NoExecute for 300 s."""
    spec = pod.setdefault("spec", {})
    tolerations = spec.setdefault("tolerations", [])
    if isinstance(tolerations, list):
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(isinstance(t, dict) and t.get("key") == key for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def prepare_pod_create(pod: dict[str, Any], now: str | None = None) -> None:
    """podStrategy.PrepareForCreate: status starts as Pending; a gated pod reads SchedulingGated.

    pkg/registry/core/pod/strategy.go applySchedulingGatedCondition adds PodScheduled=False
    reason SchedulingGated unless a PodScheduled condition is already there.
    """
    if now is None:
        from datetime import datetime, timezone

        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"phase": "Pending", "qosClass": qos_class(pod)}
    pod["status"] = status
    spec = pod.get("spec") or {}
    if spec.get("schedulingGates"):
        # podutil.UpdatePodCondition stamps lastTransitionTime when it adds the condition.
        status["conditions"] = [{
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
            "reason": "SchedulingGated",
            "message": SCHEDULING_GATED_MESSAGE,
        }]
    pod.setdefault("metadata", {})["generation"] = 1


def qos_class(pod: Mapping[str, Any]) -> str:
    """pkg/apis/core/helper/qos: Guaranteed, Burstable or BestEffort (cpu and memory only)."""
    containers = list((pod.get("spec") or {}).get("containers") or []) + list(
        (pod.get("spec") or {}).get("initContainers") or []
    )
    any_set = False
    guaranteed = True
    for container in containers:
        if not isinstance(container, dict):
            continue
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or (name in requests and str(requests[name]) != str(limits[name])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_pod_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """podStrategy.PrepareForUpdate: a main-resource update never changes status.

    The generation is bumped when the spec changes (pkg/registry/core/pod/strategy.go, KEP-5067).
    """
    new["status"] = clone(old.get("status") or {})
    meta = new.setdefault("metadata", {})
    old_generation = (old.get("metadata") or {}).get("generation", 1)
    changed = new.get("spec") != old.get("spec") and _normal(new.get("spec")) != _normal(old.get("spec"))
    meta["generation"] = old_generation + 1 if changed else old_generation


def prepare_status_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """podStatusStrategy/nodeStatusStrategy.PrepareForUpdate: a status update never changes spec.

    Metadata other than labels and annotations is kept too (ObjectMeta updates through status are
    limited to those in the real strategy's ResetObjectMetaForStatus).
    """
    new["spec"] = clone(old.get("spec") or {})
    old_meta = old.get("metadata") or {}
    meta = new.setdefault("metadata", {})
    for field in ("generation", "uid", "creationTimestamp", "ownerReferences", "finalizers", "deletionTimestamp"):
        if field in old_meta:
            meta[field] = clone(old_meta[field])
        else:
            meta.pop(field, None)


def prepare_generic_update(info_kind: str, new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """Main-resource updates of nodes and namespaces keep the old status (their strategies do)."""
    if info_kind in ("Node", "Namespace"):
        new["status"] = clone(old.get("status") or {})


def default_node(node: dict[str, Any]) -> None:
    status = node.setdefault("status", {})
    if "capacity" in status and "allocatable" not in status:
        # SetDefaults_NodeStatus: allocatable defaults to capacity.
        status["allocatable"] = clone(status["capacity"])


def default_namespace(namespace: dict[str, Any]) -> None:
    """SetDefaults_Namespace: the kubernetes.io/metadata.name label; status phase Active."""
    meta = namespace.setdefault("metadata", {})
    labels = meta.setdefault("labels", {}) if isinstance(meta.get("labels", {}), dict) else {}
    if meta.get("name"):
        labels["kubernetes.io/metadata.name"] = meta["name"]
    namespace.setdefault("spec", {"finalizers": ["kubernetes"]})
    namespace["status"] = {"phase": "Active"}


# ---- pods ------------------------------------------------------------------------------------------
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
        resources = container.get("resources") or {}
        parsed: dict[str, dict[str, int]] = {}  # exact nano-units, so comparisons are Quantity.Cmp
        for kind in ("limits", "requests"):
            values = resources.get(kind) or {}
            if not isinstance(values, dict):
                causes.append(invalid_value(f"{here}.resources.{kind}", values, "must be a map"))
                continue
            parsed[kind] = {}
            for resource, quantity in values.items():
                try:
                    amount = parse_nanos(quantity)
                except QuantityError:
                    causes.append(invalid_value(
                        f"{here}.resources.{kind}[{resource}]", quantity,
                        "quantities must match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
                    continue
                if amount < 0:
                    causes.append(invalid_value(f"{here}.resources.{kind}[{resource}]", quantity,
                                                "must be greater than or equal to 0"))
                parsed[kind][resource] = amount
        for resource, amount in (parsed.get("requests") or {}).items():
            limit = (parsed.get("limits") or {}).get(resource)
            if limit is not None and amount > limit:
                causes.append(invalid_value(
                    f"{here}.resources.requests", (resources.get("requests") or {}).get(resource),
                    f"must be less than or equal to {resource} limit of {(resources.get('limits') or {}).get(resource)}"))
            elif limit is None and "/" in resource and not resource.startswith("kubernetes.io/"):
                # Extended resources (nvidia.com/gpu) must have a limit equal to the request
                # (validateResourceRequirements: "Limit must be set for non overcommitable resources").
                causes.append(forbidden(f"{here}.resources.limits", "Limit must be set for non overcommitable resources"))
        for resource, limit in (parsed.get("limits") or {}).items():
            request = (parsed.get("requests") or {}).get(resource)
            if "/" in resource and not resource.startswith("kubernetes.io/") and request is not None and request != limit:
                causes.append(invalid_value(
                    f"{here}.resources.requests", (resources.get("requests") or {}).get(resource),
                    f"must be equal to {resource} limit of {(resources.get('limits') or {}).get(resource)}"))
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


UPDATABLE_POD_SPEC_FIELDS = ",".join([
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
])


def _normal(value: Any) -> Any:
    """Semantic equality as apiequality.Semantic.DeepEqual: empty and absent are the same."""
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [], "", False, 0) or k in ("status", "value")}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


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
        new_items = [_normal(e) for e in new.get(field) or []]
        for expression in old.get(field) or []:
            if _normal(expression) not in new_items:
                return False
    return True


def validate_pod_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePodUpdate (see the module docstring)."""
    causes = validate_object_meta_update(new, old) + validate_pod(new)
    old_spec = old.get("spec") or {}
    if new.get("spec") == old_spec:
        return causes  # ValidatePodUpdate: equal specs need no further checks
    new_spec = clone(new.get("spec") or {})
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
            isinstance(t, dict) and _normal(dict(old_toleration, tolerationSeconds=t.get("tolerationSeconds"))) == _normal(t)
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
    new_spec["schedulingGates"] = clone(old_spec.get("schedulingGates"))
    new_spec["tolerations"] = clone(old_spec.get("tolerations"))
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
            new_spec["nodeSelector"] = clone(old_spec.get("nodeSelector"))
        old_affinity = (old_spec.get("affinity") or {}).get("nodeAffinity")
        new_affinity = (new_spec.get("affinity") or {}).get("nodeAffinity")
        if _normal(old_affinity) != _normal(new_affinity):
            old_terms = _required_terms(old_spec)
            new_terms = _required_terms(new_spec) or []
            terms_path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
            if old_terms:
                if len(old_terms) != len(new_terms):
                    causes.append(invalid_value(terms_path, new_terms,
                                                "no additions/deletions to non-empty NodeSelectorTerms list are allowed"))
                else:
                    for index, (new_term, old_term) in enumerate(zip(new_terms, old_terms)):
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
    if _normal(new_spec) != _normal(old_spec):
        diff = _diff(old_spec, new_spec)
        causes.append(forbidden("spec", f"pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{diff}"))
    return causes


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """A short description of the differing top-level spec fields (the real one is a cmp.Diff)."""
    lines = ["  core.PodSpec{"]
    for key in sorted(set(old) | set(new)):
        if _normal(old.get(key)) != _normal(new.get(key)):
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


# ---- encoding as the Go types do -------------------------------------------------------------------
_OMITEMPTY_META = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")
_OMITEMPTY_SPEC = (
    "schedulingGates", "tolerations", "nodeSelector", "initContainers", "ephemeralContainers", "volumes",
    "imagePullSecrets", "hostAliases", "readinessGates", "topologySpreadConstraints", "resourceClaims",
    "overhead", "taints", "podCIDRs",
)
_OMITEMPTY_CONTAINER = ("env", "envFrom", "ports", "args", "command", "volumeMounts", "volumeDevices", "resizePolicy")
_OMITEMPTY_STATUS = ("conditions", "containerStatuses", "initContainerStatuses", "podIPs", "capacity", "allocatable",
                     "addresses", "images")


def drop_empty(obj: dict[str, Any]) -> None:
    """Drop empty optional maps and lists, as a round trip through the Go types (`omitempty`) does.

    The real server decodes into typed structs and encodes back, so `labels: {}` or
    `schedulingGates: []` are never served; clients see the field absent.
    """
    def prune(holder: Any, keys: tuple[str, ...]) -> None:
        if isinstance(holder, dict):
            for key in keys:
                if key in holder and holder[key] in ({}, [], None):
                    del holder[key]

    prune(obj.get("metadata"), _OMITEMPTY_META)
    spec = obj.get("spec")
    prune(spec, _OMITEMPTY_SPEC)
    if isinstance(spec, dict):
        for kind in ("containers", "initContainers"):
            for container in spec.get(kind) or []:
                prune(container, _OMITEMPTY_CONTAINER)
                if isinstance(container, dict):
                    prune(container.get("resources"), ("limits", "requests", "claims"))
    prune(obj.get("status"), _OMITEMPTY_STATUS)
