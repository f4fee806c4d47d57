"""batch/v1 Jobs as the API server stores them: defaulting, strategy and validation (pure).

- defaulting: pkg/apis/batch/v1/defaults.go SetDefaults_Job (completions and parallelism 1 when
  both are unset, parallelism 1, backoffLimit 6, completionMode NonIndexed, suspend false,
  podReplacementPolicy TerminatingOrFailed; a Job without labels takes its template's labels,
  which, as defaulting also runs when the object is read back from etcd, include the generated ones);
- strategy: pkg/registry/batch/job/strategy.go (PrepareForCreate clears the status, sets generation
  1 and generateSelector: the `batch.kubernetes.io/controller-uid` and `batch.kubernetes.io/job-name`
  labels, and their legacy `controller-uid`/`job-name` twins, on the template, and a selector on the
  uid; PrepareForUpdate keeps the status and bumps generation when the spec changes; the status
  strategy keeps the spec; DefaultGarbageCollectionPolicy orphans the pods of a batch/v1 Job
  deleted without a propagationPolicy);
- validation: pkg/apis/batch/validation/validation.go ValidateJob / ValidateJobUpdate, the essentials;
  podFailurePolicy and podReplacementPolicy in full (registry.job_failure_policy).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from ganggate.sim.api.batch import (  # re-exported for the strategies' users
    CONTROLLER_UID,
    JOB_NAME,
    LEGACY_CONTROLLER_UID,
    LEGACY_JOB_NAME,
)
from ganggate.sim.apimachinery.errors import Cause, invalid_value, not_supported, required
from ganggate.sim.apiserver.registry import job_failure_policy
from ganggate.sim.apiserver.validation import validate_object_meta
from ganggate.sim.apiserver.watch import clone

MAX_INDEXED = 100000  # completionsHardLimit / parallelismLimitForHighCompletions
DEFAULT_DELETE_POLICY = "Orphan"
_MODES = ["NonIndexed", "Indexed"]


def default_job(job: dict[str, Any]) -> None:
    """SetDefaults_Job."""
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    job_failure_policy.default(spec)
    template = spec.get("template")
    if isinstance(template, dict):
        labels = (template.get("metadata") or {}).get("labels")
        meta = job.setdefault("metadata", {})
        if labels and not meta.get("labels"):
            meta["labels"] = dict(labels)


def prepare_create(job: dict[str, Any]) -> None:
    """jobStrategy.PrepareForCreate: empty status, generation 1, the generated selector and labels."""
    meta = job.setdefault("metadata", {})
    meta.setdefault("uid", str(uuid.uuid4()))  # FillObjectMetaSystemFields runs before the strategy
    job["status"] = {}
    meta["generation"] = 1
    spec = job.get("spec")
    if isinstance(spec, dict) and not spec.get("manualSelector") and isinstance(spec.get("template"), dict):
        template_meta = spec["template"].setdefault("metadata", {})
        labels = template_meta.setdefault("labels", {})
        generated = {CONTROLLER_UID: meta["uid"], JOB_NAME: meta.get("name", ""),
                     LEGACY_CONTROLLER_UID: meta["uid"], LEGACY_JOB_NAME: meta.get("name", "")}
        labels.update(generated)
        if spec.get("selector") is None:
            spec["selector"] = {"matchLabels": {CONTROLLER_UID: meta["uid"]}}
    default_job(job)  # read back from storage: a Job without labels takes the template's


def prepare_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """jobStrategy.PrepareForUpdate: keep the status; a changed spec bumps generation."""
    new["status"] = clone(old.get("status") or {})
    meta = new.setdefault("metadata", {})
    generation = (old.get("metadata") or {}).get("generation", 1)
    meta["generation"] = generation + (1 if _normal(new.get("spec")) != _normal(old.get("spec")) else 0)


def prepare_status_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """jobStatusStrategy.PrepareForUpdate: a status update keeps the spec."""
    new["spec"] = clone(old.get("spec") or {})


def _normal(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _non_negative(spec: Mapping[str, Any], field: str) -> list[Cause]:
    value = spec.get(field)
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return [invalid_value(f"spec.{field}", value, "must be greater than or equal to 0")]
    return []


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """metav1.LabelSelectorAsSelector(...).Matches for matchLabels and matchExpressions."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def validate(job: Mapping[str, Any]) -> list[Cause]:
    """ValidateJob, the essentials."""
    causes = validate_object_meta(job, namespaced=True)
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return causes + [required("spec")]
    for field in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        causes += _non_negative(spec, field)
    mode = spec.get("completionMode") or "NonIndexed"
    if mode not in _MODES:
        causes.append(not_supported("spec.completionMode", mode, _MODES))
    if mode == "Indexed":
        completions = spec.get("completions")
        if completions is None:
            causes.append(required("spec.completions", "when completion mode is Indexed"))
        elif isinstance(completions, int) and completions > MAX_INDEXED:
            causes.append(invalid_value("spec.completions", completions,
                                        f"must be less than or equal to {MAX_INDEXED} when completion mode is Indexed"))
        parallelism = spec.get("parallelism")
        if isinstance(parallelism, int) and parallelism > MAX_INDEXED:
            causes.append(invalid_value("spec.parallelism", parallelism,
                                        f"must be less than or equal to {MAX_INDEXED} when completion mode is Indexed"))
    selector = spec.get("selector")
    template = spec.get("template")
    if not isinstance(template, dict):
        return causes + [required("spec.template")]
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict):
        causes.append(required("spec.selector"))
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(invalid_value("spec.selector", selector, "empty selector is invalid for deployment"))
    elif not _selector_matches(selector, labels):
        causes.append(invalid_value("spec.template.metadata.labels", labels, "`selector` does not match template `labels`"))
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return causes + [required("spec.template.spec")]
    causes += job_failure_policy.validate(spec)
    policy = pod_spec.get("restartPolicy") or ""
    if policy in ("", "Always"):
        causes.append(required("spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"'))
    elif policy not in ("OnFailure", "Never"):
        causes.append(not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"]))
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(required("spec.template.spec.containers"))
    else:
        for index, container in enumerate(containers):
            here = f"spec.template.spec.containers[{index}]"
            if not isinstance(container, dict):
                causes.append(invalid_value(here, container, "must be an object"))
                continue
            if not container.get("name"):
                causes.append(required(f"{here}.name"))
            if not container.get("image"):
                causes.append(required(f"{here}.image"))
    return causes


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateJobUpdate: selector, template, completions and completionMode are immutable."""
    causes = validate(new)
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    for field in ("selector", "template", "completionMode", "completions", "backoffLimitPerIndex", "manualSelector"):
        if _normal(new_spec.get(field)) != _normal(old_spec.get(field)):
            causes.append(invalid_value(f"spec.{field}", new_spec.get(field), "field is immutable"))
    return causes
