"""The webhook's check of workloads' pod templates (ganggate/admission/templates.py, review.decide_workload):
a Job, CronJob, JobSet or Kubeflow job whose template no pod could pass is denied with the pod's
own message and code; one whose templates pass is allowed untouched."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ganggate.admission.review import DENIED, NOT_GANG, OTHER_SCHEDULER, WORKLOAD_OK, ReviewPolicy, decide

POLICY = ReviewPolicy()
GOOD = {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "4"}
BROKEN = [
    {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "abc"},
    {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "-3"},
    {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "0"},
    {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "4",
     "scheduling.k8s.io/group-min-available": "5"},
    {"scheduling.k8s.io/group-pod-num": "4"},
    {"scheduling.k8s.io/group-name": "Train", "scheduling.k8s.io/group-pod-num": "4"},
    {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "4",
     "scheduling.k8s.io/group-timeout-seconds": "soon"},
    {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "4",
     "scheduling.k8s.io/group-topology-required": "rack/"},
]


def template(annotations: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec}}
    if annotations is not None:
        body["metadata"] = {"annotations": dict(annotations), "labels": {"app": "x"}}
    return body


def request(kind: tuple[str, str], obj: dict[str, Any], operation: str = "CREATE",
            old: dict[str, Any] | None = None) -> dict[str, Any]:
    group, name = kind
    return {"uid": "u", "kind": {"group": group, "version": "v1", "kind": name}, "operation": operation,
            "object": obj, "oldObject": old}


def job(t: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "typo"}, "spec": {"parallelism": 4, "template": t}}


def pod(t: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(t)}


@pytest.mark.parametrize("annotations", BROKEN, ids=range(len(BROKEN)))
def test_a_job_is_denied_with_exactly_the_message_and_code_its_pods_would_get(annotations):
    pod_decision = decide(request(("", "Pod"), pod(template(annotations))), POLICY)
    job_decision = decide(request(("batch", "Job"), job(template(annotations))), POLICY)
    assert pod_decision.outcome == job_decision.outcome == DENIED
    assert (job_decision.message, job_decision.code) == (pod_decision.message, pod_decision.code)
    assert job_decision.patch is None


def test_the_typo_of_the_issue_reads_as_the_pod_denial():
    decision = decide(request(("batch", "Job"), job(template(BROKEN[0]))), POLICY)
    assert decision.message == ("annotation scheduling.k8s.io/group-pod-num='abc': must be a plain decimal "
                                "integer from 1 to 10000")


def test_other_template_problems_of_pods_deny_the_job_too():
    bound = decide(request(("batch", "Job"), job(template(GOOD, nodeName="gpu-1"))), POLICY)
    assert not bound.allowed and bound.message.startswith("spec.nodeName='gpu-1' on a pod with annotation")
    both = template(None)
    both["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1", "aliyun.com/gpu-mem": "8"}}
    shared = decide(request(("batch", "Job"), job(both)), POLICY)
    assert not shared.allowed and "asks both nvidia.com/gpu" in shared.message


def test_good_plain_and_foreign_templates_are_allowed_untouched():
    assert decide(request(("batch", "Job"), job(template(GOOD))), POLICY).outcome == WORKLOAD_OK
    assert decide(request(("batch", "Job"), job(template(None))), POLICY).outcome == NOT_GANG
    volcano = decide(request(("batch", "Job"), job(template(BROKEN[0], schedulerName="volcano"))), POLICY)
    assert volcano.allowed and volcano.outcome == OTHER_SCHEDULER
    for decision in (decide(request(("batch", "Job"), job(template(GOOD))), POLICY),):
        assert decision.patch is None  # a workload is never mutated
    # Another kind, or a subresource of a Job: not the webhook's.
    assert decide(request(("apps", "Deployment"), job(template(BROKEN[0]))), POLICY).outcome == NOT_GANG
    status = dict(request(("batch", "Job"), job(template(BROKEN[0]))), subResource="status")
    assert decide(status, POLICY).outcome == NOT_GANG


def test_an_update_is_judged_on_what_it_changes():
    broken, good = job(template(BROKEN[0])), job(template(GOOD))
    # Introducing a problem is denied ...
    assert not decide(request(("batch", "Job"), broken, "UPDATE", good), POLICY).allowed
    # ... leaving one as it was (a label on a Job admitted while the webhook was down) is not,
    relabelled = copy.deepcopy(broken)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert decide(request(("batch", "Job"), relabelled, "UPDATE", broken), POLICY).outcome == WORKLOAD_OK
    # ... and changing it into another problem is.
    other = job(template(BROKEN[2]))
    assert not decide(request(("batch", "Job"), other, "UPDATE", broken), POLICY).allowed
    # DELETE is never refused.
    assert decide(request(("batch", "Job"), broken, "DELETE"), POLICY).allowed


def test_cronjobs_jobsets_and_kubeflow_jobs_are_checked_in_every_template():
    cron = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": template(BROKEN[0])}}}}
    jobset = {"kind": "JobSet", "spec": {"replicatedJobs": [
        {"template": {"spec": {"template": template(GOOD)}}}, {"template": {"spec": {"template": template(BROKEN[1])}}}]}}
    pytorch = {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
        "Master": {"template": template(GOOD)}, "Worker": {"template": template(BROKEN[2])}}}}
    expected = [decide(request(("", "Pod"), pod(template(BROKEN[i]))), POLICY).message for i in range(3)]
    got = [decide(request(kind, obj), POLICY).message for kind, obj in (
        (("batch", "CronJob"), cron), (("jobset.x-k8s.io", "JobSet"), jobset), (("kubeflow.org", "PyTorchJob"), pytorch))]
    assert got == expected
    fine = {"kind": "MPIJob", "spec": {"mpiReplicaSpecs": {"Launcher": {"template": template(None)},
                                                           "Worker": {"template": template(GOOD)}}}}
    assert decide(request(("kubeflow.org", "MPIJob"), fine), POLICY).outcome == WORKLOAD_OK


async def test_with_the_template_check_down_the_job_is_taken_and_its_refused_pods_show_on_it(tmp_path):
    """failurePolicy Ignore: the Job passes while gang-template.ganggate.io is unreachable; the pod
    webhook refuses each pod, and the Job controller says so on the Job, once, its count rising."""
    import socket

    import yaml
    from kubernetes_asyncio import client

    from ganggate.admission.server import WebhookConfig, start_webhook
    from ganggate.certs.files import TLS_CERT, TLS_KEY
    from ganggate.certs.inject import inject_ca_bundle
    from ganggate.sim import Simulator
    from tests.kubesim_support import eventually
    from tests.webhook_support import make_certs

    cert_dir = make_certs(tmp_path / "certs")
    webhook = await start_webhook(WebhookConfig(cert_file=str(cert_dir / TLS_CERT), key_file=str(cert_dir / TLS_KEY),
                                                host="127.0.0.1", port=0))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    try:
        async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim, sim.api_client() as api_client:
            mwc = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy" / "kubesim" / "webhook-url.yaml").read_text())
            mwc["webhooks"][0]["clientConfig"]["url"] = f"https://127.0.0.1:{webhook.port}/mutate"
            mwc["webhooks"][1]["clientConfig"]["url"] = f"https://127.0.0.1:{dead_port}/mutate"
            await client.AdmissionregistrationV1Api(api_client).create_mutating_webhook_configuration(mwc)
            await inject_ca_bundle(api_client, "ganggate", (cert_dir / "ca.crt").read_bytes())
            await client.BatchV1Api(api_client).create_namespaced_job(
                "default", job(template(BROKEN[0], restartPolicy="Never")))

            def failed_create() -> list[dict[str, Any]]:
                return [e for e in sim.store.list("events", "default")
                        if e["reason"] == "FailedCreate" and e["involvedObject"]["name"] == "typo"]
            (event,) = await eventually(lambda: [e for e in failed_create() if e["count"] >= 2], timeout=30)
            assert event["message"] == (
                'Error creating: admission webhook "gang-gate.ganggate.io" denied the request: annotation '
                "scheduling.k8s.io/group-pod-num='abc': must be a plain decimal integer from 1 to 10000")
            assert event["involvedObject"]["kind"] == "Job" and event["type"] == "Warning"
            assert len(failed_create()) == 1 and sim.store.list("pods", "default") == []
    finally:
        await webhook.close()
