"""What the Job controller stand-in decides, as pure functions: pods from a template, counts, status.

Follows pkg/controller/job/job_controller.go (manageJob, syncJob's conditions, backoff limit
`failed > backoffLimit`) and pkg/controller/job/indexed_job_utils.go (completion indexes, the
`batch.kubernetes.io/job-completion-index` annotation and label, hostname `<job>-<index>`,
generateName `<job>-<index>-`, the JOB_COMPLETION_INDEX variable, completedIndexes as
"0-3,5"); pods are made as pkg/controller/controller_utils.go GetPodFromTemplate does (labels,
annotations and spec from the template, a controller ownerReference with blockOwnerDeletion).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ganggate.sim.api.batch import COMPLETION_INDEX

TERMINAL = ("Succeeded", "Failed")


def controller_ref(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's controller ownerReference, if it is a batch/v1 Job."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return ref
    return None


def pod_index(pod: Mapping[str, Any]) -> int | None:
    """getCompletionIndex: the pod's completion index annotation, or None."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def is_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """controller.FilterTerminatingPods: being deleted and not yet Succeeded or Failed."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) and \
        (pod.get("status") or {}).get("phase") not in TERMINAL


def is_ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def pod_from_template(job: Mapping[str, Any], index: int | None) -> dict[str, Any]:
    """A new pod of the job (GetPodFromTemplate, plus the index of an Indexed job)."""
    meta = job["metadata"]
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    labels = dict(template_meta.get("labels") or {})
    annotations = dict(template_meta.get("annotations") or {})
    spec = template.get("spec") or {}
    name = meta["name"]
    generate = f"{name}-"
    if index is not None:
        annotations[COMPLETION_INDEX] = str(index)
        labels[COMPLETION_INDEX] = str(index)
        generate = f"{name}-{index}-"
        spec.setdefault("hostname", f"{name}-{index}")
        variable = {"name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
        for kind in ("initContainers", "containers"):
            for container in spec.get(kind) or []:
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append(dict(variable))
    pod_meta: dict[str, Any] = {
        "generateName": generate,
        "namespace": meta.get("namespace", "default"),
        "labels": labels,
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": meta["uid"],
                             "controller": True, "blockOwnerDeletion": True}],
    }
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def format_indexes(indexes: Iterable[int]) -> str:
    """Sorted indexes as intervals: {0,1,2,3,5} -> "0-3,5" (indexed_job_utils.go succeededIndexes.String)."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        start = prev = ordered[i]
        i += 1
        while i < len(ordered) and ordered[i] == prev + 1:
            prev = ordered[i]
            i += 1
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def plan_creates(job: Mapping[str, Any], active: Sequence[Mapping[str, Any]], succeeded_indexes: set[int],
                 succeeded: int) -> list[int | None]:
    """The pods to create now: indexes for an Indexed job, None for each pod of a NonIndexed one (manageJob)."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism") or 0)
    completions = spec.get("completions")
    if spec.get("completionMode") == "Indexed":
        busy = {pod_index(p) for p in active}
        pending = [i for i in range(int(completions or 0)) if i not in succeeded_indexes and i not in busy]
        return list(pending[:max(0, parallelism - len(active))])
    if completions is None:
        want = 0 if succeeded > 0 else parallelism
    else:
        want = min(parallelism, max(0, int(completions) - succeeded))
    return [None] * max(0, want - len(active))


_Pod = TypeVar("_Pod", bound=Mapping[str, Any])


def excess_active(job: Mapping[str, Any], active: Sequence[_Pod], succeeded: int) -> list[_Pod]:
    """Active pods beyond what the job wants (parallelism lowered): highest indexes, or not-ready ones, first."""
    spec = job.get("spec") or {}
    if spec.get("completionMode") == "Indexed":
        extra = len(active) - int(spec.get("parallelism") or 0)
        by_index = sorted(active, key=lambda p: (-(pod_index(p) or 0), (p.get("metadata") or {}).get("name", "")))
        return by_index[:extra] if extra > 0 else []
    completions = spec.get("completions")
    want = int(spec.get("parallelism") or 0)
    if completions is not None:
        want = min(want, max(0, int(completions) - succeeded))
    extra = len(active) - want
    if extra <= 0 or (completions is None and succeeded > 0):
        return []
    return sorted(active, key=lambda p: (is_ready(p), (p.get("metadata") or {}).get("name", "")))[:extra]


def condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}


def is_finished(job: Mapping[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])
