"""Pure reading of the cluster during a replay: job pods to build, job progress, settledness.

The replay labels every pod with its job; from the pods as the API server holds them this module
tells how far each job has got and whether the cluster has settled (nothing left for the
scheduler, the kubelet or the gate controller to do at this instant of simulated time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ganggate.contract import (
    GATE_NAME,
    GROUP_NAME,
    GROUP_POD_NUM,
    GROUP_TOPOLOGY_PREFERRED,
    GROUP_TOPOLOGY_REQUIRED,
)
from ganggate.contract import GROUP_TIMEOUT_SECONDS as GROUP_TIMEOUT
from ganggate.core.fit.nodematch import HOSTNAME_LABEL
from ganggate.core.fit.resources import GPU
from ganggate.replay.results.metrics import JobProgress
from ganggate.replay.traces.format import Job

if TYPE_CHECKING:
    from ganggate.replay.run.scenario import Background

JOB_LABEL = "replay.ganggate.io/job"
CLAIM_ENTRY = "gpus"  # the pod's spec.resourceClaims entry of its GPUs (with --dra)
INDEX_LABEL = "replay.ganggate.io/index"
PRIORITY_ANNOTATION = "replay.ganggate.io/priority"
TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_manifest(job: Job, index: int, namespace: str, *, gang: bool = True, timeout_seconds: int | None = None,
                 dra: bool = False) -> dict:
    """Pod `index` of a job: its resources, its job label and (for a gang) the gang annotations,
    with timeout_seconds its group-timeout-seconds.

    With `dra` the pod's GPUs are a ResourceClaim made from the template `gpu_claim_template`
    names (as examples/dra/ddp-job.yaml asks), not nvidia.com/gpu.

    The same pods are created in every mode; without the webhook the annotations are inert.
    """
    requests: dict[str, str] = {"cpu": job.cpu_per_pod, "memory": job.memory_per_pod}
    limits: dict[str, str] = {}
    claims: list[dict[str, str]] = []
    if job.gpus_per_pod and dra:
        claims = [{"name": CLAIM_ENTRY, "resourceClaimTemplateName": claim_template_name(job.gpus_per_pod)}]
    elif job.gpus_per_pod:
        # Extended resources must have request == limit (pkg/apis/core/validation).
        requests[GPU] = limits[GPU] = str(job.gpus_per_pod)
    annotations = {PRIORITY_ANNOTATION: str(job.priority)}
    if gang:
        annotations[GROUP_NAME] = job.job_id
        annotations[GROUP_POD_NUM] = str(job.pods)
        if job.topology_required:
            annotations[GROUP_TOPOLOGY_REQUIRED] = job.topology_required
        if job.topology_preferred:
            annotations[GROUP_TOPOLOGY_PREFERRED] = job.topology_preferred
        if timeout_seconds is not None:
            annotations[GROUP_TIMEOUT] = str(timeout_seconds)
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    if claims:  # the container uses the pod's claim (core/v1 ResourceRequirements.claims)
        resources["claims"] = [{"name": CLAIM_ENTRY}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job.job_id}-{index}",
            "namespace": namespace,
            "labels": {JOB_LABEL: job.job_id, INDEX_LABEL: str(index)},
            "annotations": annotations,
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "worker", "image": "ganggate/replay-worker", "resources": resources}],
            **({"activeDeadlineSeconds": job.deadline_seconds} if job.deadline_seconds else {}),
            **({"resourceClaims": claims} if claims else {}),
        },
    }


def claim_template_name(gpus: int) -> str:
    return f"replay-gpus-{gpus}"


def gpu_claim_template(gpus: int, namespace: str) -> dict:
    """The ResourceClaimTemplate of `gpus` whole GPUs of NVIDIA's DeviceClass (one per GPU count
    and namespace; each pod that names it gets a claim of its own from it)."""
    from ganggate.sim.kubelet.dradriver import DEVICE_CLASS

    request = {"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "count": gpus}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": claim_template_name(gpus), "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def allocated_devices(claims: Iterable[Mapping]) -> dict[str, int]:
    """Pod name -> devices allocated to the claims reserved for it (a claim shared by several pods
    counts for each; the replay's claims are one per pod)."""
    devices: dict[str, int] = {}
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for ref in status.get("reservedFor") or []:
            if ref.get("resource") == "pods":
                name = str(ref.get("name") or "")
                devices[name] = devices.get(name, 0) + len(results)
    return devices


def background_pod(pod: Background, namespace: str) -> dict:
    """A long-running ordinary pod pinned to its node (something else using GPUs there)."""
    resources = {"cpu": pod.cpu, "memory": pod.memory}
    limits = {GPU: str(pod.gpus)} if pod.gpus else {}
    if pod.gpus:
        resources[GPU] = str(pod.gpus)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": namespace, "labels": {"app": pod.name}},
        "spec": {
            "nodeSelector": {HOSTNAME_LABEL: pod.node},
            "containers": [{"name": "main", "image": "inference-server",
                            "resources": {"requests": resources, **({"limits": limits} if limits else {})}}],
        },
    }


@dataclass(frozen=True)
class PodView:
    """What the replay needs to know of one pod."""

    job_id: str
    gated: bool
    node: str | None
    phase: str
    name: str = ""
    #: The pod names ResourceClaim templates and kube-controller-manager has not yet made its claims.
    awaiting_claims: bool = False

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def bound(self) -> bool:
        return bool(self.node) and not self.finished

    @property
    def running(self) -> bool:
        return self.phase == "Running"


def view(pod: Mapping) -> PodView | None:
    """The replay's view of a pod, or None for a pod that is not one of the replay's."""
    metadata = pod.get("metadata") or {}
    job_id = (metadata.get("labels") or {}).get(JOB_LABEL)
    if not job_id:
        return None
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates") or []
    status = pod.get("status") or {}
    templated = sum(1 for c in spec.get("resourceClaims") or [] if c.get("resourceClaimTemplateName"))
    phase = status.get("phase") or "Pending"
    return PodView(
        job_id=job_id,
        gated=any(g.get("name") == GATE_NAME for g in gates if isinstance(g, Mapping)),
        node=spec.get("nodeName") or None,
        phase=phase,
        name=metadata.get("name") or "",
        awaiting_claims=(templated > len(status.get("resourceClaimStatuses") or [])
                         and phase not in TERMINAL_PHASES and not metadata.get("deletionTimestamp")),
    )


def job_nodes(pods: Iterable[PodView], job_id: str) -> tuple[str, ...]:
    """The nodes the job's running pods are on, sorted, each once."""
    return tuple(sorted({p.node for p in pods if p.job_id == job_id and p.running and p.node}))


def progress(jobs: Mapping[str, Job], pods: Iterable[PodView],
             devices: Mapping[str, int] | None = None) -> dict[str, JobProgress]:
    """Each submitted job's bound and running pod counts; with `devices` (pod name -> DRA devices
    allocated to it, `allocated_devices`) also the GPUs its bound and running pods hold."""
    bound: dict[str, int] = {}
    running: dict[str, int] = {}
    bound_gpus: dict[str, int] = {}
    running_gpus: dict[str, int] = {}
    for pod in pods:
        if pod.job_id not in jobs:
            continue
        bound[pod.job_id] = bound.get(pod.job_id, 0) + (1 if pod.bound else 0)
        running[pod.job_id] = running.get(pod.job_id, 0) + (1 if pod.running else 0)
        gpus = devices.get(pod.name, 0) if devices is not None else 0
        bound_gpus[pod.job_id] = bound_gpus.get(pod.job_id, 0) + (gpus if pod.bound else 0)
        running_gpus[pod.job_id] = running_gpus.get(pod.job_id, 0) + (gpus if pod.running else 0)
    return {
        job_id: JobProgress(
            job_id=job_id,
            pods=jobs[job_id].pods,
            gpus_per_pod=jobs[job_id].gpus_per_pod,
            bound=bound[job_id],
            running=running[job_id],
            bound_gpus=bound_gpus[job_id] if devices is not None else None,
            running_gpus=running_gpus[job_id] if devices is not None else None,
        )
        for job_id in bound
    }


def unsettled(pods: Iterable[PodView]) -> list[PodView]:
    """Pods that some component still has to act on right now: bound but not yet running
    (the kubelet's turn). Ungated unbound pods are the scheduler's and are judged by the
    caller, since a pod that fits nowhere stays unbound for good."""
    return [p for p in pods if p.bound and not p.running]


def event_rows(events: Iterable[Mapping]) -> list[tuple[str, str, str, int]]:
    """Events as `kubectl get events` lists them: (reason, object name, message, count), sorted."""
    return sorted((str(e.get("reason") or ""), str((e.get("involvedObject") or {}).get("name") or ""),
                   str(e.get("message") or ""), int(e.get("count") or 1)) for e in events)
