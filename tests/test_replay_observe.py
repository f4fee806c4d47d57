"""Pure reading of replay pods, and the webhook registration the replay and demo use."""

from __future__ import annotations

import base64

from ganggate.contract import GATE_NAME, GROUP_NAME, parse_gang
from ganggate.core.fit.resources import GPU, pod_requests
from ganggate.local.parts import webhook_configuration
from ganggate.replay.run.observe import JOB_LABEL, pod_manifest, progress, view
from ganggate.replay.traces.format import Job

JOB = Job("train", 0, 3, 2, "4", "16Gi", 60, 5)


def test_pod_manifest_is_a_gang_member_asking_for_its_resources():
    pod = pod_manifest(JOB, 1, "default")
    assert pod["metadata"]["name"] == "train-1"
    assert pod["metadata"]["labels"][JOB_LABEL] == "train"
    gang = parse_gang(pod["metadata"]["annotations"])
    assert (gang.name, gang.pod_num) == ("train", 3)
    requests = pod_requests(pod)
    assert requests[GPU] == 2000 and requests["cpu"] == 4000 and requests["memory"] == 16 * 2**30 * 1000
    assert GROUP_NAME not in pod_manifest(JOB, 0, "default", gang=False)["metadata"]["annotations"]


def test_zero_gpu_pods_ask_for_no_gpu():
    pod = pod_manifest(Job("cpu", 0, 1, 0, "1", "1Gi", 60), 0, "default")
    assert GPU not in pod_requests(pod)
    assert "limits" not in pod["spec"]["containers"][0]["resources"]


def pod(job, node=None, phase="Pending", gated=False):
    spec = {"nodeName": node} if node else {}
    if gated:
        spec["schedulingGates"] = [{"name": GATE_NAME}]
    return {"metadata": {"labels": {JOB_LABEL: job}}, "spec": spec, "status": {"phase": phase}}


def test_view_and_progress():
    assert view({"metadata": {"name": "other"}, "spec": {}}) is None
    gated = view(pod("train", gated=True))
    assert gated.gated and not gated.bound
    pods = [view(p) for p in (
        pod("train", "n1", "Running"),
        pod("train", "n2", "Pending"),
        pod("train", gated=True),
        pod("done", "n1", "Succeeded"),
        pod("stranger", "n1", "Running"),
    )]
    jobs = {"train": JOB, "done": Job("done", 0, 1, 1, "1", "1Gi", 1)}
    result = progress(jobs, pods)
    assert (result["train"].bound, result["train"].running, result["train"].pods) == (2, 1, 3)
    assert (result["done"].bound, result["done"].running) == (0, 0)
    assert "stranger" not in result


def test_webhook_configuration_is_deploys_url_form_with_our_url_and_ca():
    config = webhook_configuration("https://127.0.0.1:4321", b"-----PEM-----")
    webhook, templates = config["webhooks"]
    for hook in (webhook, templates):
        assert hook["clientConfig"] == {
            "url": "https://127.0.0.1:4321/mutate",
            "caBundle": base64.b64encode(b"-----PEM-----").decode(),
        }
        assert hook["matchConditions"]
    assert (webhook["failurePolicy"], templates["failurePolicy"]) == ("Fail", "Ignore")


def test_webhook_configuration_without_match_conditions_keeps_the_rest():
    exact = webhook_configuration("https://127.0.0.1:1", b"ca")
    lean = webhook_configuration("https://127.0.0.1:1", b"ca", match_conditions=False)
    for hook in exact["webhooks"]:
        hook.pop("matchConditions")
    assert all("matchConditions" not in hook for hook in lean["webhooks"])
    assert lean == exact
