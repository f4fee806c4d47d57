"""Restarts that do not fail Jobs: the DisruptionTarget condition ganggate writes on a pod before it
deletes it, and whether a Job's podFailurePolicy ignores such a pod. Pure: no I/O.

Kubernetes marks a pod it is about to delete for a disruption with the pod condition
`DisruptionTarget` (k8s.io/api/core/v1 types.go: "the pod is about to be terminated due to a
disruption (such as preemption, eviction API or garbage-collection)"): the Eviction API
(pkg/registry/core/pod/storage/eviction.go addConditionAndDeletePod, reason
EvictionByEvictionAPI), the taint manager (pkg/controller/tainteviction, DeletionByTaintManager),
the scheduler's preemption (pkg/scheduler/framework/preemption, PreemptionByScheduler) and the
pod GC (DeletionByPodGC) set it, through the status subresource, before the delete. The Job
controller matches a failed pod's conditions against the Job's podFailurePolicy
(pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy; rules in order, the first match
decides), so a rule `onPodConditions: [{type: DisruptionTarget}] -> Ignore` keeps such pods out of
the backoffLimit (job_controller.go: an Ignore match is not added to uncounted failures).

ganggate deletes a gang's members to restart it whole (member loss, a bind timeout's recreate):
it writes the condition first, with reason `DeletionByGanggate`, so that the same rule covers
its restarts. Gang preemption evicts through the Eviction API, which writes its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ganggate.core.state.losses import GANGGATE_REASON

CONDITION = "DisruptionTarget"
#: The exit code a container killed at the end of its grace period reports (SIGKILL): what an
#: onExitCodes rule sees of a deleted pod that did not exit on SIGTERM.
KILLED_EXIT_CODE = 137
RULE_YAML = 'podFailurePolicy: {rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget, status: "True"}]}]}'


def condition_patch(message: str, now: str) -> dict[str, Any]:
    """The strategic merge patch of a pod's status that adds DisruptionTarget=True (conditions
    merge by type, as the eviction and the taint manager write theirs)."""
    return {"status": {"conditions": [{"type": CONDITION, "status": "True", "reason": GANGGATE_REASON,
                                       "message": message[:1024], "lastTransitionTime": now}]}}


def _code_rule_matches(requirement: Mapping[str, Any], code: int) -> bool:
    values = requirement.get("values") or []
    operator = requirement.get("operator")
    return (operator == "In" and code in values) or (operator == "NotIn" and code not in values)


def restart_advice(job: Mapping[str, Any]) -> str | None:
    """None when the Job's podFailurePolicy ignores a pod ganggate deletes (its first rule that
    would match such a pod, a DisruptionTarget=True condition and, if killed, exit code 137, is
    Ignore); else what the user should change, in one sentence."""
    spec = job.get("spec") or {}
    rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
    for index, rule in enumerate(rules):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            if _code_rule_matches(rule["onExitCodes"], KILLED_EXIT_CODE) and action != "Ignore":
                return (f"its podFailurePolicy rule {index} ({action} on exit codes) also matches a pod killed at "
                        f"the end of its grace period (exit code {KILLED_EXIT_CODE}) and comes before any rule "
                        f"that ignores {CONDITION}: put a rule `onPodConditions: [{{type: {CONDITION}}}] -> "
                        "Ignore` first")
            continue
        patterns = rule.get("onPodConditions") or []
        if any(p.get("type") == CONDITION and p.get("status", "True") == "True" for p in patterns):
            if action == "Ignore":
                return None
            return (f"its podFailurePolicy rule {index} says {action} for {CONDITION}: make it Ignore (or put an "
                    "Ignore rule for it first)")
    limit = spec.get("backoffLimit", 6)
    return (f"each restart counts every deleted pod against its backoffLimit ({limit}); add to the Job's spec "
            f"{RULE_YAML} (it needs restartPolicy: Never), so that restarts are not counted as failures")
