"""batch/v1 Jobs on kubesim: defaulting, the Job controller stand-in and garbage collection."""

from __future__ import annotations

from typing import Any

import pytest

from ganggate.sim import Simulator
from tests.kubesim_support import Raw, eventually

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"


def job_manifest(name: str, *, completions: int | None = None, parallelism: int | None = None,
                 indexed: bool = False, backoff_limit: int | None = None, run_seconds: str | None = None,
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"metadata": {"annotations": dict(annotations or {})}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}}
    if run_seconds is not None:
        spec["template"]["metadata"]["annotations"]["kubesim.io/run-seconds"] = run_seconds
    for key, value in (("completions", completions), ("parallelism", parallelism), ("backoffLimit", backoff_limit)):
        if value is not None:
            spec[key] = value
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_pods(sim: Simulator, job: str) -> list[dict[str, Any]]:
    return [p for p in sim.store.list("pods", "default")
            if any(r.get("name") == job for r in p["metadata"].get("ownerReferences") or [])]


def job_status(sim: Simulator, name: str) -> dict[str, Any]:
    return (sim.store.get("jobs.batch", "default", name) or {}).get("status") or {}


def condition_types(sim: Simulator, name: str) -> set[str]:
    return {c["type"] for c in job_status(sim, name).get("conditions") or [] if c.get("status") == "True"}


async def finish(raw: Raw, pod: dict[str, Any], phase: str) -> None:
    """Write a terminal phase, as a kubelet would."""
    status, body, _ = await raw.request("PATCH", f"{PODS}/{pod['metadata']['name']}/status",
                                        {"status": {"phase": phase}}, "application/merge-patch+json")
    assert status == 200, body


async def test_defaulting_and_generated_selector(idle):
    sim, raw = idle
    status, job, _ = await raw.request("POST", JOBS, job_manifest("plain"))
    assert status == 201, job
    spec, uid = job["spec"], job["metadata"]["uid"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == "plain" and labels["controller-uid"] == uid
    assert job["metadata"]["labels"] == labels
    assert job["metadata"]["generation"] == 1


async def test_invalid_jobs_are_refused_and_nothing_is_stored(idle):
    sim, raw = idle
    always = job_manifest("always")
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    status, body, _ = await raw.request("POST", JOBS, always)
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"
    assert 'valid values: "OnFailure", "Never"' in body["message"]
    status, body, _ = await raw.request("POST", JOBS, job_manifest("idx", parallelism=2, indexed=True))
    assert status == 422 and "spec.completions: Required value: when completion mode is Indexed" in body["message"]
    assert sim.store.list("jobs") == [] and sim.store.list("pods", "default") == []


async def test_non_indexed_job_runs_to_completion(running):
    sim, raw = running
    status, _, _ = await raw.request("POST", JOBS, job_manifest("batch", completions=3, parallelism=2, run_seconds="0"))
    assert status == 201
    await eventually(lambda: "Complete" in condition_types(sim, "batch"))
    status_ = job_status(sim, "batch")
    assert status_["succeeded"] == 3 and "active" not in status_ and status_["completionTime"] and status_["startTime"]
    pods = job_pods(sim, "batch")
    assert len(pods) == 3 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    job = sim.store.get("jobs.batch", "default", "batch")
    for pod in pods:
        assert pod["metadata"]["name"].startswith("batch-") and pod["metadata"]["generateName"] == "batch-"
        assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "batch",
                                                       "uid": job["metadata"]["uid"], "controller": True,
                                                       "blockOwnerDeletion": True}]
        assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]


async def test_indexed_job_pods_carry_their_index(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("ddp", completions=3, parallelism=3, indexed=True))
    await eventually(lambda: len(job_pods(sim, "ddp")) == 3)
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in job_pods(sim, "ddp")}
    assert sorted(by_index) == ["0", "1", "2"]
    for index, pod in by_index.items():
        assert pod["metadata"]["name"].startswith(f"ddp-{index}-")
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["hostname"] == f"ddp-{index}"
        env = pod["spec"]["containers"][0]["env"]
        assert {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}} in env
    await eventually(lambda: job_status(sim, "ddp").get("active") == 3)
    for index in ("0", "2"):
        await finish(raw, by_index[index], "Succeeded")
    await eventually(lambda: job_status(sim, "ddp").get("completedIndexes") == "0,2")
    assert "Complete" not in condition_types(sim, "ddp") and job_status(sim, "ddp")["active"] == 1
    await finish(raw, by_index["1"], "Succeeded")
    await eventually(lambda: "Complete" in condition_types(sim, "ddp"))
    assert job_status(sim, "ddp")["completedIndexes"] == "0-2" and job_status(sim, "ddp")["succeeded"] == 3
    assert len(job_pods(sim, "ddp")) == 3  # nothing recreated


async def test_deleted_pod_is_replaced_with_the_same_index_and_counts_as_failed(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("rep", completions=2, parallelism=2, indexed=True))
    await eventually(lambda: len(job_pods(sim, "rep")) == 2)
    victim = next(p for p in job_pods(sim, "rep") if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1")
    status, _, _ = await raw.request("DELETE", f"{PODS}/{victim['metadata']['name']}")
    assert status == 200

    def replaced() -> bool:
        pods = job_pods(sim, "rep")
        return len(pods) == 2 and victim["metadata"]["name"] not in {p["metadata"]["name"] for p in pods}

    await eventually(replaced)
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in job_pods(sim, "rep"))
    assert indexes == ["0", "1"]
    await eventually(lambda: job_status(sim, "rep").get("failed") == 1)


async def test_failures_beyond_backoff_limit_fail_the_job(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("flaky", completions=1, parallelism=2, backoff_limit=1))
    await eventually(lambda: len(job_pods(sim, "flaky")) == 1)  # parallelism is capped by completions
    first = job_pods(sim, "flaky")[0]
    await finish(raw, first, "Failed")
    await eventually(lambda: len(job_pods(sim, "flaky")) == 2)  # the failed pod stays, a replacement runs
    # the controller writes the count in the status after it creates the replacement (syncJob: manage
    # pods, then update the status), so wait for the count rather than read it at once
    await eventually(lambda: job_status(sim, "flaky").get("failed") == 1)
    assert not condition_types(sim, "flaky") & {"Failed"}
    second = next(p for p in job_pods(sim, "flaky") if p["metadata"]["uid"] != first["metadata"]["uid"])
    await finish(raw, second, "Failed")
    await eventually(lambda: "Failed" in condition_types(sim, "flaky"))
    failed = next(c for c in job_status(sim, "flaky")["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and failed["message"] == "Job has reached the specified backoff limit"
    assert job_status(sim, "flaky")["failed"] == 2 and "active" not in job_status(sim, "flaky")
    assert len(job_pods(sim, "flaky")) == 2  # no third attempt


async def test_backoff_limit_exceeded_deletes_the_active_pods(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("gang", completions=3, parallelism=3, indexed=True, backoff_limit=0))
    await eventually(lambda: len(job_pods(sim, "gang")) == 3)
    await finish(raw, job_pods(sim, "gang")[0], "Failed")
    await eventually(lambda: "Failed" in condition_types(sim, "gang"))
    await eventually(lambda: [p["status"]["phase"] for p in job_pods(sim, "gang")] == ["Failed"])


async def test_parallelism_can_be_lowered_and_pods_are_deleted(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("wide", completions=4, parallelism=4, indexed=True))
    await eventually(lambda: len(job_pods(sim, "wide")) == 4)
    status, job, _ = await raw.request("PATCH", f"{JOBS}/wide", {"spec": {"parallelism": 2}}, "application/merge-patch+json")
    assert status == 200 and job["metadata"]["generation"] == 2
    await eventually(lambda: len(job_pods(sim, "wide")) == 2)
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in job_pods(sim, "wide"))
    assert indexes == ["0", "1"]
    status, body, _ = await raw.request("PATCH", f"{JOBS}/wide", {"spec": {"completions": 5}}, "application/merge-patch+json")
    assert status == 422 and "spec.completions: Invalid value: 5: field is immutable" in body["message"]


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
async def test_deleting_a_job_deletes_its_pods(idle, policy):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("gone", completions=2, parallelism=2))
    await eventually(lambda: len(job_pods(sim, "gone")) == 2)
    status, _, _ = await raw.request("DELETE", f"{JOBS}/gone", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                               "propagationPolicy": policy})
    assert status == 200
    if policy == "Foreground":
        assert job_pods(sim, "gone") == []  # the owner waited for its dependents
    await eventually(lambda: job_pods(sim, "gone") == [])
    assert sim.store.get("jobs.batch", "default", "gone") is None


async def test_a_job_deleted_without_a_policy_orphans_its_pods(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, job_manifest("orphaner", completions=2, parallelism=2))
    await eventually(lambda: len(job_pods(sim, "orphaner")) == 2)
    names = {p["metadata"]["name"] for p in job_pods(sim, "orphaner")}
    status, _, _ = await raw.request("DELETE", f"{JOBS}/orphaner")
    assert status == 200
    pods = {p["metadata"]["name"]: p for p in sim.store.list("pods", "default")}
    assert names <= set(pods) and all("ownerReferences" not in pods[n]["metadata"] for n in names)
    status, body, _ = await raw.request("DELETE", f"{JOBS}/x", {"propagationPolicy": "Sometimes"})
    assert status == 404  # the object is looked up first
    await raw.request("POST", JOBS, job_manifest("x"))
    status, body, _ = await raw.request("DELETE", f"{JOBS}/x", {"propagationPolicy": "Sometimes"})
    assert status == 422 and 'Unsupported value: "Sometimes"' in body["message"]
    assert sim.store.get("jobs.batch", "default", "x") is not None


async def test_pods_of_a_job_that_no_longer_exists_are_collected(idle):
    sim, raw = idle
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "never", "uid": "0000", "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    for body in (bare, pod):
        assert (await raw.request("POST", PODS, body))[0] == 201
    await eventually(lambda: sim.store.get("pods", "default", "stray") is None)
    assert sim.store.get("pods", "default", "bare") is not None


class GatingChain:
    """An admission chain that gates every pod, as the ganggate webhook gates gang pods."""

    async def admit(self, *, operation: str, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        if operation == "CREATE":
            obj.setdefault("spec", {})["schedulingGates"] = [{"name": "scheduling.k8s.io/group-gate"}]
        return obj


async def test_job_pods_go_through_admission(idle):
    sim, raw = idle
    sim.server.set_admission(GatingChain())
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": "gate"}, "webhooks": [{
                  "name": "gate.example.com", "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
                  "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}
    status, body, _ = await raw.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config)
    assert status == 201, body
    await raw.request("POST", JOBS, job_manifest("gated", completions=2, parallelism=2, indexed=True))
    await eventually(lambda: len(job_pods(sim, "gated")) == 2)
    assert all(p["spec"]["schedulingGates"] == [{"name": "scheduling.k8s.io/group-gate"}] for p in job_pods(sim, "gated"))
