"""A Job's podFailurePolicy and podReplacementPolicy, as the Job controller reads them (pure).

- matching: pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy. The rules are
  tried in order and the first that matches decides: `onExitCodes` matches the first container
  (then init container) status that has terminated with a non-zero exit code, of the named
  container if `containerName` is given, whose code is In / NotIn the values;
  `onPodConditions` matches when any condition of the pod has a pattern's type and status.
  Actions: Ignore (not counted towards backoffLimit nor status.failed; the pod is replaced),
  Count (counted, the default when no rule matches), FailJob (the Job fails at once with
  condition reason PodFailurePolicy and the message below, its active pods deleted).
  A rule with an unknown action is skipped, as the switch there does.
- replacement: pkg/controller/job/job_controller.go onlyReplaceFailedPods (a Job with a
  podFailurePolicy, or podReplacementPolicy Failed, replaces a pod only once it has Failed,
  not while it terminates) and isPodFailed (under it, only phase Failed is a failure).

Validation and defaulting are the API server's (ganggate.sim.apiserver.registry.job_failure_policy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REASON = "PodFailurePolicy"  # batch.JobReasonPodFailurePolicy: the FailureTarget/Failed condition reason


@dataclass(frozen=True)
class Match:
    """matchPodFailurePolicy's answer: whether the failure counts, the action that matched
    (None: no rule did) and, for FailJob, the Job's failure message."""

    counts: bool = True
    action: str | None = None
    fail_message: str | None = None


def match(policy: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> Match:
    """matchPodFailurePolicy for a failed pod."""
    if not policy:
        return Match()
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    where = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            container = _exit_code_match(status, rule["onExitCodes"])
            if container is None:
                continue
            code = container["state"]["terminated"].get("exitCode")
            message = (f"Container {container.get('name')} for pod {where} failed with exit code {code} matching "
                       f"{action} rule at index {index}")
        elif rule.get("onPodConditions") is not None:
            condition = _condition_match(status, rule["onPodConditions"])
            if condition is None:
                continue
            message = f"Pod {where} has condition {condition.get('type')} matching {action} rule at index {index}"
        else:
            continue
        if action == "Ignore":
            return Match(False, "Ignore")
        if action == "Count":
            return Match(True, "Count")
        if action == "FailJob":
            return Match(True, "FailJob", message)
    return Match()


def _exit_code_match(status: Mapping[str, Any], requirement: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """matchOnExitCodes: containers first, then init containers."""
    for key in ("containerStatuses", "initContainerStatuses"):
        for container in status.get(key) or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated is None:
                continue  # still terminating: no exit code to match
            name = requirement.get("containerName")
            if name is not None and name != container.get("name"):
                continue
            code = terminated.get("exitCode", 0)
            values = requirement.get("values") or []
            operator = requirement.get("operator")
            if code != 0 and ((operator == "In" and code in values) or (operator == "NotIn" and code not in values)):
                return container
    return None


def _condition_match(status: Mapping[str, Any], patterns: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """matchOnPodConditions: the first of the pod's conditions some pattern matches."""
    for condition in status.get("conditions") or []:
        for pattern in patterns:
            if condition.get("type") == pattern.get("type") and condition.get("status") == pattern.get("status", "True"):
                return condition
    return None


def only_replace_failed(job: Mapping[str, Any]) -> bool:
    """onlyReplaceFailedPods: replacements wait until a pod has Failed (not while it terminates)."""
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


