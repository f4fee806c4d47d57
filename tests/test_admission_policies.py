"""The ValidatingAdmissionPolicies deploy/ ships: gang annotations immutable on pod UPDATE, and a Job's
group-pod-num equal to what it runs at once. Checked on kubesim through kubernetes-asyncio and
with kubectl on `ganggate sim up`; plus the pre-1.30 component."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from ganggate.contract import GATE_NAME, GROUP_NAME, GROUP_POD_NUM
from ganggate.local.parts import POLICIES, policies_text, register_policies
from tests.kubesim_support import pod_manifest, status_of
from tests.test_manifests import match_condition, with_components

ROOT = Path(__file__).resolve().parents[1]
IMMUTABLE = "ValidatingAdmissionPolicy 'ganggate-gang-annotations-immutable'"
JOB_SIZE = "ValidatingAdmissionPolicy 'ganggate-job-gang-size'"


def job(name: str, pod_num: str | None, parallelism: int | None = None, completions: int | None = None,
        scheduler: str | None = None) -> dict[str, Any]:
    annotations = {GROUP_NAME: name} | ({GROUP_POD_NUM: pod_num} if pod_num is not None else {})
    spec: dict[str, Any] = {"template": {
        "metadata": {"annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}}
    if scheduler:
        spec["template"]["spec"]["schedulerName"] = scheduler
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def test_sim_ups_copy_is_deploys_base() -> None:
    """The package's copy (registered by `sim up`) is byte for byte deploy/base's."""
    assert policies_text() == (ROOT / "deploy" / "base" / POLICIES).read_text(encoding="utf-8")


@pytest.fixture
async def policed(sim, api):
    await register_policies(api)
    return api


async def refused(call, *args: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as error:
        await call(*args)
    return status_of(error.value)


async def test_a_job_whose_gang_size_is_not_its_parallelism_is_refused_with_both_numbers(policed):
    batch = client.BatchV1Api(policed)
    status = await refused(batch.create_namespaced_job, "default", job("ddp", "2", parallelism=4))
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        f'jobs.batch "ddp" is forbidden: {JOB_SIZE} with binding \'ganggate-job-gang-size\' denied request: '
        "the Job runs 4 pods at once (spec.parallelism=4) but its pod template's annotation "
        "scheduling.k8s.io/group-pod-num is '2': a gang starts only with all its pods, so the two must agree; "
        "set the annotation to '4', or spec.parallelism to 2")
    # Fewer completions than parallelism: the Job runs only that many at once.
    status = await refused(batch.create_namespaced_job, "default", job("few", "4", parallelism=4, completions=3))
    assert "runs 3 pods at once (spec.parallelism=4, spec.completions=3)" in status["message"]
    assert status["message"].endswith("set the annotation to '3', or spec.completions to 4")
    status = await refused(batch.create_namespaced_job, "default", job("both", "8", parallelism=4, completions=6))
    assert status["message"].endswith("set the annotation to '4', or spec.parallelism and spec.completions to 8")
    # Default parallelism is 1.
    status = await refused(batch.create_namespaced_job, "default", job("one", "3"))
    assert "runs 1 pods at once (spec.parallelism=1, spec.completions=1)" in status["message"]
    assert (await batch.list_namespaced_job("default")).items == []


async def test_jobs_that_agree_or_are_not_ganggates_are_admitted(policed):
    batch = client.BatchV1Api(policed)
    for body in (job("ok", "4", parallelism=4), job("bounded", "3", parallelism=4, completions=3),
                 job("more-completions", "2", parallelism=2, completions=10), job("paused", "4", parallelism=0),
                 job("not-a-gang", None, parallelism=3), job("volcano", "2", parallelism=5, scheduler="volcano"),
                 job("garbled", "two", parallelism=2)):  # the webhook refuses its pods, with its own reason
        await batch.create_namespaced_job("default", body)
    # An update that breaks the agreement is refused too: scaling the Job without the annotation.
    status = await refused(batch.patch_namespaced_job, "ok", "default", {"spec": {"parallelism": 2}})
    assert "the Job runs 2 pods at once" in status["message"]


async def test_gang_annotations_are_immutable_on_pod_update_and_the_release_patch_passes(policed):
    core = client.CoreV1Api(policed)
    annotations = {GROUP_NAME: "ddp", GROUP_POD_NUM: "2", "team": "a"}
    await core.create_namespaced_pod("default", pod_manifest("w-0", gates=[GATE_NAME], annotations=annotations))
    status = await refused(core.patch_namespaced_pod, "w-0", "default", {"metadata": {"annotations": {GROUP_POD_NUM: "3"}}})
    assert status["code"] == 422 and status["message"] == (
        f"pods \"w-0\" is forbidden: {IMMUTABLE} with binding 'ganggate-gang-annotations-immutable' denied request: "
        "annotation scheduling.k8s.io/group-pod-num='3': is immutable once the pod exists (was '2'); "
        "delete the pod and create it again to change its gang")
    status = await refused(core.patch_namespaced_pod, "w-0", "default", {"metadata": {"annotations": {GROUP_NAME: None}}})
    assert f"annotation {GROUP_NAME}=<absent>: is immutable once the pod exists (was 'ddp')" in status["message"]
    # Added later to a pod that had none: refused as well.
    await core.create_namespaced_pod("default", pod_manifest("plain"))
    status = await refused(core.patch_namespaced_pod, "plain", "default", {"metadata": {"annotations": {GROUP_NAME: "x"}}})
    assert f"annotation {GROUP_NAME}='x': is immutable once the pod exists (was <absent>)" in status["message"]
    # The controller's release: the gate removed, a node pinned, its decision written; other annotations change freely.
    released = await core.patch_namespaced_pod("w-0", "default", [
        {"op": "remove", "path": "/spec/schedulingGates"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": "node-1"}},
        {"op": "add", "path": "/metadata/annotations/ganggate.io~1decision", "value": "released"},
        {"op": "replace", "path": "/metadata/annotations/team", "value": "b"},
    ])
    assert released.spec.scheduling_gates is None and released.metadata.annotations[GROUP_POD_NUM] == "2"


async def test_pods_of_other_schedulers_and_system_namespaces_are_left_alone(policed):
    core = client.CoreV1Api(policed)
    await core.create_namespaced_pod("default", pod_manifest("vc", schedulerName="volcano",
                                                             annotations={GROUP_NAME: "vc", GROUP_POD_NUM: "2"}))
    await core.patch_namespaced_pod("vc", "default", {"metadata": {"annotations": {GROUP_POD_NUM: "3"}}})
    await core.create_namespaced_pod("kube-system", pod_manifest("sys", annotations={GROUP_NAME: "s"}))
    await core.patch_namespaced_pod("sys", "kube-system", {"metadata": {"annotations": {GROUP_NAME: "t"}}})
    # Read back: the changes were stored, not silently dropped.
    volcano = await core.read_namespaced_pod("vc", "default")
    assert volcano.metadata.annotations[GROUP_POD_NUM] == "3" and volcano.metadata.annotations[GROUP_NAME] == "vc"
    system = await core.read_namespaced_pod("sys", "kube-system")
    assert system.metadata.annotations[GROUP_NAME] == "t"


# --- clusters older than 1.30: the webhook checks updates itself ------------------------------------

def test_the_pre_1_30_component_sends_updates_to_the_webhook_and_drops_the_policies(tmp_path):
    objects = with_components(tmp_path, "self-signed", "webhook-update-check")
    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
    (mwc,) = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    assert mwc["webhooks"][0]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    matches = match_condition(mwc)
    def pod(annotations):
        return {"metadata": {"annotations": annotations}, "spec": {"containers": []}}
    assert matches(pod({}), pod({GROUP_NAME: "ddp"}))  # an annotation removed is still sent
    assert matches(pod({GROUP_POD_NUM: "2"}), pod({}))
    assert not matches(pod({"team": "b"}), pod({"team": "a"}))


# --- kubectl on `ganggate sim up` -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def up(tmp_path_factory):
    from tests.test_sim_up import start_up

    running = start_up(tmp_path_factory.mktemp("sim-up-policies"), "--nodes", "2")
    yield running
    running.stop()


def test_kubectl_apply_of_a_mismatched_job_is_refused_and_names_both_numbers(up, tmp_path):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job("ddp", "2", parallelism=4)))
    applied = up.kubectl("apply", "-f", str(manifest))
    assert applied.returncode != 0
    # kubectl prints a Status of reason Invalid as the real server's VAP denial reads there too.
    assert f"The jobs \"ddp\" is invalid: : {JOB_SIZE} with binding" in applied.stderr
    assert ("the Job runs 4 pods at once (spec.parallelism=4) but its pod template's annotation "
            "scheduling.k8s.io/group-pod-num is '2'") in applied.stderr
    assert "set the annotation to '4', or spec.parallelism to 2" in applied.stderr
    assert up.kubectl("get", "job", "ddp").returncode != 0
    manifest.write_text(yaml.safe_dump(job("ddp", "4", parallelism=4)))
    assert up.kubectl("apply", "-f", str(manifest)).returncode == 0


def test_kubectl_annotate_of_a_gang_pod_is_refused_by_the_api_server(up, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps(pod_manifest("w-0", annotations={GROUP_NAME: "solo", GROUP_POD_NUM: "1"},
                                                gpus=1)))
    assert up.kubectl("apply", "-f", str(manifest)).returncode == 0
    changed = up.kubectl("annotate", "--overwrite", "pod", "w-0", f"{GROUP_POD_NUM}=2")
    assert changed.returncode != 0
    assert "annotation scheduling.k8s.io/group-pod-num='2': is immutable once the pod exists (was '1')" in changed.stderr
    assert up.kubectl("annotate", "pod", "w-0", "team=a").returncode == 0
