"""The pod templates of the workloads the webhook checks, and the check: a workload whose template
would make every one of its pods be denied is itself denied, with the pod denial's message.

A typo in a Job's `group-pod-num` ("abc", "0", "-3") is then refused at `kubectl apply`, where the
user makes it, instead of at each pod create inside the Job controller, where only the Job's
Events tell. The decision for a template is `review.decide_create` on a pod made of the template,
so the rules and messages are the pod's, by construction. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: (API group, kind) -> how to find its pod templates. Kubeflow's training jobs keep one template
#: per replica role in a map (`<framework>ReplicaSpecs`); JobSet one per replicated Job.
_REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs",
                  "XGBoostJob": "xgbReplicaSpecs", "PaddleJob": "paddleReplicaSpecs"}
WORKLOADS = {("batch", "Job"), ("batch", "CronJob"), ("jobset.x-k8s.io", "JobSet")} | {
    ("kubeflow.org", kind) for kind in _REPLICA_SPECS}


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def pod_templates(group: str, kind: str, obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, template) for each pod template of a workload of a kind in WORKLOADS."""
    found: list[tuple[str, Any]] = []
    if (group, kind) == ("batch", "Job"):
        found = [("spec.template", _get(obj, "spec", "template"))]
    elif (group, kind) == ("batch", "CronJob"):
        found = [("spec.jobTemplate.spec.template", _get(obj, "spec", "jobTemplate", "spec", "template"))]
    elif (group, kind) == ("jobset.x-k8s.io", "JobSet"):
        jobs = _get(obj, "spec", "replicatedJobs")
        found = [(f"spec.replicatedJobs[{i}].template.spec.template", _get(job, "template", "spec", "template"))
                 for i, job in enumerate(jobs if isinstance(jobs, list) else [])]
    elif group == "kubeflow.org" and kind in _REPLICA_SPECS:
        roles = _get(obj, "spec", _REPLICA_SPECS[kind])
        found = [(f"spec.{_REPLICA_SPECS[kind]}.{role}.template", _get(spec, "template"))
                 for role, spec in (roles.items() if isinstance(roles, Mapping) else [])]
    for path, template in found:
        if isinstance(template, Mapping):
            yield path, template


def pod_of(template: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a controller makes of the template, as far as the webhook's checks read it."""
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"}
    for key in ("metadata", "spec"):
        if template.get(key) is not None:
            pod[key] = template[key]
    return pod
