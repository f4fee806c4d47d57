"""Jobs as the owners of a replay's pods: when pods can be lost (a disruption replay), each trace job
is a batch/v1 Indexed Job, so kubesim's Job controller replaces a lost pod as in a real cluster
and ganggate's restart of a broken gang (which deletes only owned pods) has an owner to lean on.
"""

from __future__ import annotations

from typing import Any

from ganggate.replay.run.observe import JOB_LABEL, pod_manifest
from ganggate.replay.run.scenario import ReplayError
from ganggate.replay.traces.format import Job

#: A lost pod is replaced until the job has failed this many pods (then the Job gives up).
BACKOFF_LIMIT = 1000


def job_manifest(job: Job, namespace: str, *, dra: bool = False) -> dict:
    """The batch/v1 Job whose pods are the trace job's gang (the same pod as `pod_manifest`)."""
    pod = pod_manifest(job, 0, namespace, dra=dra)
    labels = {JOB_LABEL: job.job_id}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.job_id, "namespace": namespace, "labels": labels},
        "spec": {
            "completions": job.pods,
            "parallelism": job.pods,
            "completionMode": "Indexed",
            "backoffLimit": BACKOFF_LIMIT,
            "template": {"metadata": {"labels": labels, "annotations": pod["metadata"]["annotations"]},
                         "spec": pod["spec"]},
        },
    }


async def create_job(session: Any, base_url: str, job: Job, namespace: str, *, dra: bool = False) -> None:
    """Create the trace job's batch/v1 Job (the Job controller then creates its pods)."""
    async with session.post(f"{base_url}/apis/batch/v1/namespaces/{namespace}/jobs",
                            json=job_manifest(job, namespace, dra=dra)) as response:
        if response.status >= 300:
            raise ReplayError(f"creating Job {job.job_id}: HTTP {response.status}: {await response.text()}")


def job_controller_busy(sim: Any, max_pod_rv: int) -> str | None:
    """What kubesim's Job controller still has to do at this instant, or None when it is idle."""
    jc = sim.components.get("JobController")
    if jc is None:
        return None
    pods, jobs = getattr(jc, "_pods", None), getattr(jc, "_jobs", None)
    if pods is None or jobs is None or not jc.ready.is_set():
        return "job controller (syncing)"
    max_job_rv = max((int(s.obj["metadata"]["resourceVersion"]) for _, s in sim.store.iter("jobs.batch")), default=0)
    if as_rv(pods.resource_version) < max_pod_rv or as_rv(jobs.resource_version) < max_job_rv:
        return "job controller (watch)"
    if jc.has_work():
        return "job controller"
    return None


def as_rv(value: Any) -> int:
    """A resourceVersion as a number (0 when unset or not a number)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
