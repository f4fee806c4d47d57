"""Defaulting, the create/update strategies and the Go types' encoding of stored objects (pure).

- defaulting: pkg/apis/core/v1/defaults.go SetDefaults_Pod (requests from limits,
  restartPolicy, schedulerName ...), SetDefaults_NodeStatus, SetDefaults_Namespace, and the
  DefaultTolerationSeconds admission plugin;
- strategies: pkg/registry/core/pod/strategy.go (PrepareForCreate sets phase Pending and the
  SchedulingGated condition, PrepareForUpdate keeps the old status, PrepareForUpdate of the
  status strategy keeps the old spec);
- encoding: what a round trip through the typed structs (`omitempty`) drops.

These change the object; validation (pod_validation.py, pod_update.py, validation.py) only
reads it, after them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from typing import Any

from ganggate.sim.apimachinery.semantic import equal
from ganggate.sim.apiserver.watch import clone


# ---- defaulting and strategies -------------------------------------------------------------------
def default_pod(pod: dict[str, Any]) -> None:
    """SetDefaults_Pod and friends (pkg/apis/core/v1/defaults.go), for the fields that matter here."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    # spec.priority and spec.preemptionPolicy are the Priority admission plugin's (ganggate/sim/apiserver/admission/priority.py).
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
        from datetime import datetime

        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"phase": "Pending", "qosClass": qos_class(pod)}
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
    changed = not equal(new.get("spec"), old.get("spec"))
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
