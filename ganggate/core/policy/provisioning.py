"""Asking the cluster autoscaler for a gang's room: which waiting gangs need nodes, and the
ProvisioningRequest and PodTemplates that describe them (cluster-autoscaler's
autoscaling.x-k8s.io/v1 API; Kueue's provisioning admission check does the same for its
workloads). Pure: the controller's shell (ganggate.controller.autoscaling.provisioner) creates, watches and
deletes the objects.

A gang is worth a request when it is complete and still wholly gated, and the round found no
room for it (GangUnschedulable, GangCannotFit): waiting for pods already terminating is a wait
for room that is coming, not a reason to buy more. One request per gang, named after it, so
that a restarted controller or a new leader finds the one there is instead of making another.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.core.fit.resources import CPU, MEMORY, PODS
from ganggate.core.state.gangs import Gang
from ganggate.core.state.outcome import Waiting
from ganggate.core.state.pods import PodInfo

ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
CLASSES = (ATOMIC, CHECK_CAPACITY)
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
#: The reasons of a round's Waiting that say the cluster has no room for the gang as it is.
NO_ROOM = ("GangUnschedulable", "GangCannotFit")
#: The container of a PodTemplate: the autoscaler reads only requests and scheduling constraints.
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
_NAME_LIMIT = 253


@dataclass(frozen=True)
class PodSet:
    """Pods of one shape: a PodTemplate (name, spec) and how many pods it stands for."""

    template_name: str
    count: int
    spec: Mapping[str, Any]


def wants_room(waiting: Waiting, gang: Gang | None) -> bool:
    """A complete, wholly gated gang that the round found no room for."""
    return gang is not None and gang.state == "waiting" and waiting.event_reason in NO_ROOM


def request_name(gang: Gang) -> str:
    """`ganggate-<gang>`: one per gang and namespace, a DNS subdomain (a hash keeps long names unique)."""
    base = re.sub(r"[^a-z0-9.-]+", "-", f"ganggate-{gang.name}".lower()).strip("-.") or "ganggate"
    if len(base) <= _NAME_LIMIT - 8:
        return base
    digest = hashlib.sha256(gang.name.encode()).hexdigest()[:8]
    return f"{base[:_NAME_LIMIT - 9].rstrip('-.')}-{digest}"


def _quantity(resource: str, milli: int) -> str:
    """An exact quantity of a request in the core's milli-units."""
    if resource == CPU:
        return f"{milli}m"
    return str(-(-milli // 1000))  # whole units (bytes for memory), rounded up


def template_spec(pod: PodInfo) -> dict[str, Any]:
    """A pod spec with the pod's request and node selection, for the autoscaler's simulation."""
    requests = {name: _quantity(name, amount) for name, amount in sorted(pod.request.items()) if name != PODS and amount}
    limits = {name: value for name, value in requests.items() if name not in (CPU, MEMORY)}  # extended resources
    container: dict[str, Any] = {"name": "main", "image": PAUSE_IMAGE, "resources": {"requests": requests}}
    if limits:
        container["resources"]["limits"] = limits
    selection = (pod.traits.selection or {}).get("spec") or {}
    spec: dict[str, Any] = {"containers": [container]}
    for field in ("nodeSelector", "affinity", "tolerations"):
        if selection.get(field):
            spec[field] = selection[field]
    if pod.scheduler_name and pod.scheduler_name != "default-scheduler":
        spec["schedulerName"] = pod.scheduler_name
    return spec


def pod_sets(gang: Gang, name: str, pods: Iterable[PodInfo] | None = None) -> list[PodSet]:
    """The gang's live pods grouped by shape, one PodSet each, templates named `<name>-<i>`."""
    shapes: dict[str, tuple[dict[str, Any], int]] = {}
    for pod in sorted(pods if pods is not None else gang.live_pods(), key=lambda p: p.key):
        spec = template_spec(pod)
        key = repr(sorted(spec.items(), key=lambda kv: kv[0]))
        found = shapes.get(key)
        shapes[key] = (spec, (found[1] if found else 0) + 1)
    return [PodSet(f"{name[:_NAME_LIMIT - 4]}-{index}", count, spec)
            for index, (spec, count) in enumerate(shapes.values())]


def owner_references(gang: Gang) -> list[dict[str, Any]]:
    """The gang's owner (its pods' controller, a Job say), as a non-controller owner of what ganggate
    makes for it, so that garbage collection removes those with the gang; none for bare pods."""
    for pod in gang.live_pods():
        owner = pod.traits.controller_ref
        if owner and owner.get("uid"):
            return [{"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": owner.get("name"),
                     "uid": owner.get("uid"), "controller": False}]
    return []


def consume_annotations(name: str, cls: str) -> dict[str, str]:
    """What a released pod carries so that the autoscaler counts it against the booked room."""
    return {CONSUME_ANNOTATION: name, CLASS_ANNOTATION: cls}


def condition(request: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (request.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            found: Mapping[str, Any] = item
            return found
    return None


def request_outcome(request: Mapping[str, Any]) -> str:
    """"provisioned", "failed" (Failed or BookingExpired: ask again later), or "pending"."""
    for kind in ("Failed", "BookingExpired"):
        found = condition(request, kind)
        if found and found.get("status") == "True":
            return "failed"
    provisioned = condition(request, "Provisioned")
    return "provisioned" if provisioned and provisioned.get("status") == "True" else "pending"


# ---- placeholders, for autoscalers without ProvisioningRequests (Karpenter) -------------------

PLACEHOLDER_LABEL = "ganggate.io/placeholder-for"
PLACEHOLDER_PRIORITY_CLASS = "ganggate-placeholder"
#: Below every workload's priority (the default is 0), and never preempting anything itself.
PLACEHOLDER_PRIORITY = -1000000


def placeholder_priority_class() -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": PLACEHOLDER_PRIORITY_CLASS, "labels": {"app.kubernetes.io/managed-by": "ganggate"}},
            "value": PLACEHOLDER_PRIORITY, "preemptionPolicy": "Never", "globalDefault": False,
            "description": "ganggate's placeholder pods: they make the autoscaler add nodes for a waiting gang "
                           "and give way to everything else."}


def placeholder_pods(gang: Gang) -> list[tuple[str, dict[str, Any]]]:
    """(gang pod key, placeholder pod) for each live pod of the gang: its shape on a pause
    container, lowest priority, never preempting, labelled with the gang; owned (not as
    controller) by the gang's owner where it has one, so garbage collection removes them with it."""
    name = request_name(gang).replace("ganggate-", "ganggate-ph-", 1)
    owners = owner_references(gang)
    out = []
    for index, pod in enumerate(sorted(gang.live_pods(), key=lambda p: p.key)):
        spec = template_spec(pod)
        spec.update(priorityClassName=PLACEHOLDER_PRIORITY_CLASS, terminationGracePeriodSeconds=0)
        spec.setdefault("schedulerName", pod.scheduler_name or "default-scheduler")
        meta: dict[str, Any] = {"name": f"{name[:_NAME_LIMIT - 8]}-{index}", "namespace": gang.namespace,
                                "labels": {PLACEHOLDER_LABEL: gang.name[:63], "app.kubernetes.io/managed-by": "ganggate"}}
        if owners:
            meta["ownerReferences"] = owners
        out.append((pod.key, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}))
    return out


def placement_on_placeholders(pairs: list[tuple[str, str]], nodes: Mapping[str, str | None]) -> dict[str, str] | None:
    """Each gang pod on the node its placeholder was bound to, once every placeholder is bound."""
    placement = {}
    for pod_key, placeholder_key in pairs:
        node = nodes.get(placeholder_key)
        if not node:
            return None
        placement[pod_key] = node
    return placement
