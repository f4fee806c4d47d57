"""A Job's podFailurePolicy and podReplacementPolicy as the API server validates and defaults them (pure).

- validation: pkg/apis/batch/validation/validation.go validatePodFailurePolicy,
  validatePodFailurePolicyRule(OnExitCodes|OnPodConditions), validatePodReplacementPolicy, and
  validateJobSpec's "only Never is supported when podFailurePolicy is specified";
- defaulting: pkg/apis/batch/v1/defaults.go (an onPodConditions pattern's status defaults to
  True; podReplacementPolicy to Failed with a podFailurePolicy, else TerminatingOrFailed).

FailIndex needs backoffLimitPerIndex, which kubesim does not model: refused, as the API server
refuses it without that field. The Job controller's reading of the policy is
ganggate.sim.controllers.pod_failure_policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import (
    Cause,
    duplicate,
    invalid_omitted,
    invalid_value,
    not_supported,
    required,
    too_many,
)

ACTIONS = ["Count", "FailJob", "Ignore"]  # supportedPodFailurePolicyActions, sorted (sets.List)
OPERATORS = ["In", "NotIn"]
CONDITION_STATUSES = ["False", "True", "Unknown"]
REPLACEMENT_POLICIES = ["Failed", "TerminatingOrFailed"]
MAX_RULES = 20  # maxPodFailurePolicyRules
MAX_PATTERNS = 20  # maxPodFailurePolicyOnPodConditionsPatterns
MAX_VALUES = 255  # maxPodFailurePolicyOnExitCodesValues


def default(spec: dict[str, Any]) -> None:
    """SetDefaults_Job's part: an onPodConditions pattern without a status means True."""
    policy = spec.get("podFailurePolicy")
    if not isinstance(policy, dict):
        return
    for rule in policy.get("rules") or []:
        if isinstance(rule, dict):
            for pattern in rule.get("onPodConditions") or []:
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"


def validate(spec: Mapping[str, Any]) -> list[Cause]:
    """validatePodFailurePolicy, validatePodReplacementPolicy and the restartPolicy rule."""
    causes: list[Cause] = []
    policy = spec.get("podFailurePolicy")
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None:
        if policy is not None and replacement != "Failed":
            causes.append(not_supported("spec.podReplacementPolicy", replacement, ["Failed"]))
        elif policy is None and replacement not in REPLACEMENT_POLICIES:
            causes.append(not_supported("spec.podReplacementPolicy", replacement, REPLACEMENT_POLICIES))
    if policy is None:
        return causes
    if not isinstance(policy, dict):
        return causes + [invalid_value("spec.podFailurePolicy", policy, "must be an object")]
    restart = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
    if restart == "OnFailure":
        causes.append(invalid_value("spec.template.spec.restartPolicy", restart,
                                    'only "Never" is supported when podFailurePolicy is specified'))
    rules = policy.get("rules")
    if not isinstance(rules, list):
        return causes + [required("spec.podFailurePolicy.rules")]
    if len(rules) > MAX_RULES:
        causes.append(too_many("spec.podFailurePolicy.rules", len(rules), MAX_RULES))
    names = _container_names(spec)
    for i, rule in enumerate(rules):
        causes += _validate_rule(rule if isinstance(rule, dict) else {}, f"spec.podFailurePolicy.rules[{i}]", spec, names)
    return causes


def _container_names(spec: Mapping[str, Any]) -> set[str]:
    pod = (spec.get("template") or {}).get("spec") or {}
    return {name for key in ("containers", "initContainers") for c in pod.get(key) or []
            if isinstance(c, dict) and isinstance(name := c.get("name"), str)}


def _validate_rule(rule: Mapping[str, Any], path: str, spec: Mapping[str, Any], names: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    action = rule.get("action")
    if not action:
        causes.append(required(f"{path}.action", f"valid values: {_quoted(ACTIONS)}"))
    elif action == "FailIndex":
        if spec.get("backoffLimitPerIndex") is None:
            causes.append(invalid_value(f"{path}.action", action, "requires the backoffLimitPerIndex to be set"))
    elif action not in ACTIONS:
        causes.append(not_supported(f"{path}.action", action, ACTIONS))
    exit_codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
    if exit_codes is not None:
        causes += _validate_exit_codes(exit_codes if isinstance(exit_codes, dict) else {}, f"{path}.onExitCodes", names)
    if conditions:
        causes += _validate_conditions(conditions, f"{path}.onPodConditions")
    if exit_codes is not None and conditions:
        causes.append(invalid_omitted(path, "specifying both OnExitCodes and OnPodConditions is not supported"))
    if exit_codes is None and not conditions:
        causes.append(invalid_omitted(path, "specifying one of OnExitCodes and OnPodConditions is required"))
    return causes


def _validate_exit_codes(requirement: Mapping[str, Any], path: str, names: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    operator = requirement.get("operator")
    if not operator:
        causes.append(required(f"{path}.operator", f"valid values: {_quoted(OPERATORS)}"))
    elif operator not in OPERATORS:
        causes.append(not_supported(f"{path}.operator", operator, OPERATORS))
    name = requirement.get("containerName")
    if name is not None and name not in names:
        causes.append(invalid_value(f"{path}.containerName", name,
                                    "must be one of the container or initContainer names in the pod template"))
    values = requirement.get("values") or []
    if not values:
        causes.append(invalid_value(f"{path}.values", values, "at least one value is required"))
    elif len(values) > MAX_VALUES:
        causes.append(too_many(f"{path}.values", len(values), MAX_VALUES))
    seen: set[int] = set()
    for j, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append(invalid_value(f"{path}.values[{j}]", value, "must not be 0 for the In operator"))
        if value in seen:
            causes.append(duplicate(f"{path}.values[{j}]", value))
        seen.add(value)
    if any(a > b for a, b in zip(values, values[1:], strict=False)):
        causes.append(invalid_value(f"{path}.values", values, "must be ordered"))
    return causes


def _validate_conditions(patterns: list[Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    if len(patterns) > MAX_PATTERNS:
        causes.append(too_many(path, len(patterns), MAX_PATTERNS))
    for j, pattern in enumerate(patterns):
        pattern = pattern if isinstance(pattern, dict) else {}
        if not pattern.get("type"):
            causes.append(required(f"{path}[{j}].type", ""))
        status = pattern.get("status")
        if not status:
            causes.append(required(f"{path}[{j}].status", f"valid values: {_quoted(CONDITION_STATUSES)}"))
        elif status not in CONDITION_STATUSES:
            causes.append(not_supported(f"{path}[{j}].status", status, CONDITION_STATUSES))
    return causes


def _quoted(values: list[str]) -> str:
    """Go's %q of a []string: ["Count" "FailJob" "Ignore"]."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"
