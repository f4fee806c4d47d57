"""ProvisioningRequests, the pure part: the pods a request stands for, its conditions, and what a
loop of the autoscaler decides for it (cluster-autoscaler/provisioningrequest: pods/pods.go,
conditions/conditions.go, checkcapacity/, besteffortatomic/provisioning_class.go)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ganggate.sim.api import autoscaling as ar


def condition(request: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (request.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return item
    return None


def is_true(request: Mapping[str, Any], kind: str) -> bool:
    found = condition(request, kind)
    return bool(found and found.get("status") == "True")


def with_condition(request: Mapping[str, Any], kind: str, status: bool, reason: str, message: str,
                   now: str) -> list[dict[str, Any]] | None:
    """AddOrUpdateCondition: the request's conditions with this one set, or None if nothing changes
    (the transition time moves only when the status does, as apimeta.SetStatusCondition)."""
    conditions = [dict(c) for c in (request.get("status") or {}).get("conditions") or []]
    wanted = {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
              "observedGeneration": (request.get("metadata") or {}).get("generation") or 1, "lastTransitionTime": now}
    for index, existing in enumerate(conditions):
        if existing.get("type") == kind:
            if all(existing.get(k) == wanted[k] for k in ("status", "reason", "message", "observedGeneration")):
                return None
            if existing.get("status") == wanted["status"]:
                wanted["lastTransitionTime"] = existing.get("lastTransitionTime") or now
            conditions[index] = wanted
            return conditions
    return conditions + [wanted]


def is_active(request: Mapping[str, Any]) -> bool:
    """Still the autoscaler's to act on: neither Failed nor BookingExpired."""
    return not (is_true(request, ar.FAILED) or is_true(request, ar.BOOKING_EXPIRED))


def is_booked(request: Mapping[str, Any]) -> bool:
    """ShouldCapacityBeBooked: Provisioned, and neither Failed nor BookingExpired."""
    return is_active(request) and is_true(request, ar.PROVISIONED)


def _seconds_since(stamp: str | None, now: float) -> float:
    if not stamp:
        return 0.0
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return now - moment.timestamp()


def booking_expired(request: Mapping[str, Any], now: float, reservation_seconds: float = ar.RESERVATION_SECONDS) -> bool:
    """Provisioned for longer than the reservation time (checkcapacity/processor.go)."""
    provisioned = condition(request, ar.PROVISIONED)
    return bool(provisioned and provisioned.get("status") == "True"
                and _seconds_since(provisioned.get("lastTransitionTime"), now) > reservation_seconds)


def expired(request: Mapping[str, Any], now: float, expiration_seconds: float = ar.EXPIRATION_SECONDS) -> bool:
    """Not provisioned within the expiration time since it was created."""
    created = (request.get("metadata") or {}).get("creationTimestamp")
    return not is_true(request, ar.PROVISIONED) and _seconds_since(created, now) > expiration_seconds


def pods_of(request: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The pods a request stands for, made from its PodTemplates (pods.go PodsForProvisioningRequest),
    each carrying the consume annotations; None while a template it names is missing."""
    meta = request.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name")
    pods: list[dict[str, Any]] = []
    for index, pod_set in enumerate((request.get("spec") or {}).get("podSets") or []):
        template = templates.get(f"{namespace}/{(pod_set.get('podTemplateRef') or {}).get('name')}")
        if template is None:
            return None
        spec = (template.get("template") or {}).get("spec") or {}
        labels = dict(((template.get("template") or {}).get("metadata") or {}).get("labels") or {})
        for copy_index in range(int(pod_set.get("count") or 0)):
            pods.append({
                "metadata": {"name": f"{name}-{index}-{copy_index}", "namespace": namespace, "labels": labels,
                             "annotations": {ar.CONSUME_ANNOTATION: name,
                                             ar.CLASS_ANNOTATION: (request.get("spec") or {}).get("provisioningClassName")}},
                "spec": copy.deepcopy(spec),
            })
    return pods
