"""What the kubelet stand-in writes: pod statuses (running, finished, failed, killed) and its annotations.

Statuses follow pkg/kubelet/status/generate.go (conditions) and pkg/kubelet/kubelet_pods.go
(getPhase: a pod whose containers have all stopped is Succeeded when all exited 0, else Failed,
whatever the restartPolicy once the pod is terminal; with restartPolicy Never a container exit
ends the pod; otherwise the container restarts, restartCount and lastState recording the exit).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from ganggate.sim.api.kubesim import (  # re-exported: the kubelet, the replay and tests use them
    FAIL_AFTER_ANNOTATION,
    FAIL_EXIT_CODE_ANNOTATION,
    FAIL_REASON_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
)
from ganggate.sim.client.informers import object_key

log = logging.getLogger(__name__)

# A container killed at the end of its grace period: SIGKILL, 128 + 9, reason Error (as containerd reports it).
KILLED_EXIT_CODE = 137


def _seconds(pod: Mapping, annotation: str) -> float | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if raw is None:
        return None
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        log.warning("ignoring %s=%r on %s: not a number", annotation, raw, object_key(pod))
        return None
    if not value.is_finite() or value < 0:
        return None
    return float(value)


def run_seconds(pod: Mapping) -> float | None:
    """The pod's `kubesim.io/run-seconds` (a decimal number >= 0), or None (runs forever)."""
    return _seconds(pod, RUN_SECONDS_ANNOTATION)


def fail_after_seconds(pod: Mapping) -> float | None:
    """The pod's `kubesim.io/fail-after-seconds` (a decimal number >= 0), or None (never fails)."""
    return _seconds(pod, FAIL_AFTER_ANNOTATION)


def fail_exit(pod: Mapping) -> tuple[str, int]:
    """The (reason, exit code) a requested failure ends the container with: Error 1 unless annotated
    (`OOMKilled` defaults to 137)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    reason = str(annotations.get(FAIL_REASON_ANNOTATION) or "Error")
    default = KILLED_EXIT_CODE if reason == "OOMKilled" else 1
    try:
        code = int(str(annotations.get(FAIL_EXIT_CODE_ANNOTATION, default)).strip())
    except ValueError:
        code = default
    return reason, code if code != 0 else default


def _condition(kind: str, status: bool, when: str, reason: str | None = None) -> dict:
    condition = {"type": kind, "status": "True" if status else "False", "lastProbeTime": None, "lastTransitionTime": when}
    if reason:
        condition["reason"] = reason
    return condition


def running_status(pod: Mapping, when: str) -> dict:
    """The status patch of a pod whose containers all started (phase Running, Ready)."""
    spec = pod.get("spec") or {}
    containers = [
        {
            "name": c.get("name"),
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"kubesim://{object_key(pod)}/{c.get('name')}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": when}},
        }
        for c in spec.get("containers") or []
    ]
    init = []
    for c in spec.get("initContainers") or []:
        sidecar = c.get("restartPolicy") == "Always"  # KEP-753: keeps running alongside
        state = {"running": {"startedAt": when}} if sidecar else {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": when, "finishedAt": when}
        }
        init.append(
            {
                "name": c.get("name"),
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"kubesim://{object_key(pod)}/{c.get('name')}",
                "ready": sidecar,
                "started": sidecar,
                "restartCount": 0,
                "state": state,
            }
        )
    status = {
        "phase": "Running",
        "startTime": when,
        "conditions": [
            _condition("PodReadyToStartContainers", True, when),
            _condition("Initialized", True, when),
            _condition("ContainersReady", True, when),
            _condition("Ready", True, when),
        ],
        "containerStatuses": containers,
    }
    if init:
        status["initContainerStatuses"] = init
    return {"status": status}


def terminated_status(pod: Mapping, when: str, exit_code: int = 0, reason: str = "Completed") -> dict:
    """The status patch of a pod whose containers all exited (Succeeded when exit code 0, else Failed)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    started = status.get("startTime") or when
    previous = {c.get("name"): c for c in status.get("containerStatuses") or []}

    def terminated(c: Mapping, code: int, why: str) -> dict:
        return {
            "name": c.get("name"),
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"kubesim://{object_key(pod)}/{c.get('name')}",
            "ready": False,
            "started": False,
            "restartCount": (previous.get(c.get("name")) or {}).get("restartCount", 0),
            "state": {"terminated": {"exitCode": code, "reason": why, "startedAt": started, "finishedAt": when}},
        }

    why = "PodCompleted" if exit_code == 0 else "PodFailed"
    patch = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": [
            _condition("PodReadyToStartContainers", False, when),
            _condition("ContainersReady", False, when, why),
            _condition("Ready", False, when, why),
        ],
        "containerStatuses": [terminated(c, exit_code, reason) for c in spec.get("containers") or []],
    }
    if spec.get("initContainers"):
        patch["initContainerStatuses"] = [terminated(c, 0, "Completed") for c in spec["initContainers"]]
    return {"status": patch}


def succeeded_status(pod: Mapping, when: str) -> dict:
    """The status patch of a pod whose containers all exited 0 (phase Succeeded)."""
    return terminated_status(pod, when)


def failed_status(pod: Mapping, when: str) -> dict:
    """The status patch of a pod whose containers failed as its annotations ask (phase Failed)."""
    reason, code = fail_exit(pod)
    return terminated_status(pod, when, code, reason)


def killed_status(pod: Mapping, when: str) -> dict:
    """The status patch of a pod killed at the end of its deletion grace period (phase Failed)."""
    return terminated_status(pod, when, KILLED_EXIT_CODE, "Error")


def restarted_status(pod: Mapping, when: str) -> dict:
    """A container failure under restartPolicy OnFailure/Always: restarted in place, the pod keeps running."""
    reason, code = fail_exit(pod)
    status = pod.get("status") or {}
    started = status.get("startTime") or when
    containers = []
    for c in status.get("containerStatuses") or []:
        containers.append(dict(c, restartCount=int(c.get("restartCount", 0)) + 1,
                               state={"running": {"startedAt": when}},
                               lastState={"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                                                         "finishedAt": when}}))
    return {"status": {"containerStatuses": containers}}


def rejected_status(reason: str, message: str) -> dict:
    """The status of a pod the kubelet refused to admit (pkg/kubelet/kubelet.go rejectPod): phase Failed,
    the admit handler's reason, its message after "Pod was rejected: "; no container ever started."""
    return {"status": {"phase": "Failed", "reason": reason, "message": "Pod was rejected: " + message}}
