"""The admission webhook's answers, through real HTTP requests to the aiohttp app."""

from __future__ import annotations

import copy
import logging

import pytest

from ganggate.admission.server import Health, Metrics, WebhookConfig, make_app, make_metrics_app
from ganggate.contract import (
    GATE_NAME,
    GROUP_MIN_AVAILABLE,
    GROUP_NAME,
    GROUP_POD_NUM,
    GROUP_TIMEOUT_SECONDS,
    GROUP_TOPOLOGY_PREFERRED,
    GROUP_TOPOLOGY_REQUIRED,
)
from tests.webhook_support import apply_response, decode_patch, gang_pod, gate_count, review


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
async def client(aiohttp_client, metrics):
    return await aiohttp_client(make_app(WebhookConfig(max_pod_num=100), metrics))


async def post(client, body):
    resp = await client.post("/mutate", json=body)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    return answer["response"]


async def test_create_valid_gang_pod_gets_the_gate(client):
    pod = gang_pod(group="ddp", pod_num="8")
    response = await post(client, review(pod))
    assert response["allowed"] is True
    assert decode_patch(response) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE_NAME}]}
    ]
    patched = apply_response(pod, response)
    assert patched["spec"]["schedulingGates"] == [{"name": GATE_NAME}]


async def test_create_keeps_other_gates(client):
    pod = gang_pod(gates=[{"name": "example.com/quota"}])
    response = await post(client, review(pod))
    patched = apply_response(pod, response)
    assert patched["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": GATE_NAME}]


async def test_create_with_null_gates_list(client):
    pod = gang_pod()
    pod["spec"]["schedulingGates"] = None
    patched = apply_response(pod, await post(client, review(pod)))
    assert patched["spec"]["schedulingGates"] == [{"name": GATE_NAME}]


async def test_min_available_within_range_is_accepted(client):
    pod = gang_pod(pod_num="8", min_available="6")
    response = await post(client, review(pod))
    assert response["allowed"] is True and gate_count(apply_response(pod, response)) == 1


async def test_reinvocation_adds_no_second_gate(client):
    pod = gang_pod()
    first = apply_response(pod, await post(client, review(pod)))
    again = await post(client, review(first))
    assert again["allowed"] is True
    assert decode_patch(again) is None
    assert gate_count(apply_response(first, again)) == 1


async def test_other_scheduler_is_left_alone_even_with_annotations(client):
    pod = gang_pod(scheduler="volcano")
    response = await post(client, review(pod))
    assert response == {"uid": response["uid"], "allowed": True}


async def test_explicit_default_scheduler_is_served(client):
    pod = gang_pod(scheduler="default-scheduler")
    assert gate_count(apply_response(pod, await post(client, review(pod)))) == 1


async def test_extra_scheduler_names_are_served(aiohttp_client):
    app = make_app(WebhookConfig(scheduler_names=("default-scheduler", "gpu-scheduler")))
    client = await aiohttp_client(app)
    pod = gang_pod(scheduler="gpu-scheduler")
    assert gate_count(apply_response(pod, await post(client, review(pod)))) == 1
    assert decode_patch(await post(client, review(gang_pod(scheduler="volcano")))) is None


async def test_pod_without_annotations_is_untouched(client):
    pod = gang_pod(group=None, pod_num=None, extra_annotations={"team": "vision"})
    response = await post(client, review(pod))
    assert response["allowed"] is True and "patch" not in response
    bare = gang_pod(group=None, pod_num=None)
    assert "annotations" not in bare["metadata"]
    assert "patch" not in await post(client, review(bare))


async def test_other_kinds_and_operations_are_untouched(client):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {GROUP_NAME: "x"}}}
    response = await post(client, review(config_map, kind="ConfigMap"))
    assert response["allowed"] is True and "patch" not in response
    pod = gang_pod(group="BAD NAME")
    for operation in ("DELETE", "CONNECT"):
        response = await post(client, review(None, operation=operation, old=pod))
        assert response["allowed"] is True and "patch" not in response
    # A subresource (pods/status) is not the pod itself.
    response = await post(client, review(pod, operation="UPDATE", old=gang_pod(), sub_resource="status"))
    assert response["allowed"] is True and "patch" not in response


@pytest.mark.parametrize(
    "annotations, field, value, rule",
    [
        ({GROUP_NAME: "ddp"}, GROUP_POD_NUM, "<absent>", "is required"),
        ({GROUP_POD_NUM: "4"}, GROUP_NAME, "<absent>", "is required"),
        ({GROUP_MIN_AVAILABLE: "2"}, GROUP_NAME, "<absent>", "is required"),
        ({GROUP_NAME: "DDP", GROUP_POD_NUM: "4"}, GROUP_NAME, "'DDP'", "DNS-1123 label"),
        ({GROUP_NAME: "a" * 64, GROUP_POD_NUM: "4"}, GROUP_NAME, "'" + "a" * 64 + "'", "at most 63"),
        ({GROUP_NAME: "-x", GROUP_POD_NUM: "4"}, GROUP_NAME, "'-x'", "DNS-1123 label"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "0"}, GROUP_POD_NUM, "'0'", "from 1 to 100"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "101"}, GROUP_POD_NUM, "'101'", "from 1 to 100"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "four"}, GROUP_POD_NUM, "'four'", "plain decimal integer"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "04"}, GROUP_POD_NUM, "'04'", "plain decimal integer"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "-4"}, GROUP_POD_NUM, "'-4'", "plain decimal integer"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: " 4"}, GROUP_POD_NUM, "' 4'", "plain decimal integer"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "4", GROUP_MIN_AVAILABLE: "5"}, GROUP_MIN_AVAILABLE, "'5'", "from 1 to"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "4", GROUP_MIN_AVAILABLE: "0"}, GROUP_MIN_AVAILABLE, "'0'", "from 1 to"),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "4", GROUP_MIN_AVAILABLE: "x"}, GROUP_MIN_AVAILABLE, "'x'", "integer"),
    ],
)
async def test_invalid_annotations_are_denied_with_a_clear_message(client, annotations, field, value, rule):
    pod = gang_pod(group=None, pod_num=None, extra_annotations=annotations)
    response = await post(client, review(pod))
    assert response["allowed"] is False
    assert "patch" not in response
    status = response["status"]
    assert status["code"] in (400, 422)
    assert f"annotation {field}={value}" in status["message"]
    assert rule in status["message"]


async def test_bound_gang_pod_is_denied(client):
    pod = gang_pod(node_name="gpu-1")
    response = await post(client, review(pod))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert "spec.nodeName='gpu-1'" in response["status"]["message"]
    assert "cannot be gated" in response["status"]["message"]


async def test_denial_is_logged_with_namespace_name_and_reason(client, caplog):
    caplog.set_level(logging.INFO, logger="ganggate.webhook")
    await post(client, review(gang_pod(name="worker-3", group="Bad")))
    lines = [r.getMessage() for r in caplog.records if r.name == "ganggate.webhook"]
    assert len(lines) == 1
    assert "ml/worker-3" in lines[0] and GROUP_NAME in lines[0] and "'Bad'" in lines[0]


@pytest.mark.parametrize(
    "change",
    [
        {GROUP_NAME: "other"},
        {GROUP_POD_NUM: "5"},
        {GROUP_MIN_AVAILABLE: "2"},
    ],
)
async def test_update_changing_gang_annotations_is_denied(client, change):
    old = gang_pod(pod_num="4", gates=[{"name": GATE_NAME}])
    new = copy.deepcopy(old)
    new["metadata"]["annotations"].update(change)
    response = await post(client, review(new, operation="UPDATE", old=old))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    (key,) = change
    assert key in response["status"]["message"] and "immutable" in response["status"]["message"]


async def test_update_removing_gang_annotations_is_denied(client):
    old = gang_pod()
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]
    response = await post(client, review(new, operation="UPDATE", old=old))
    assert response["allowed"] is False
    assert f"annotation {GROUP_NAME}=<absent>: is immutable once the pod exists (was 'train')" in response["status"]["message"]


async def test_update_adding_gang_annotations_is_denied(client):
    old = gang_pod(group=None, pod_num=None)
    new = gang_pod(name=old["metadata"]["name"])
    response = await post(client, review(new, operation="UPDATE", old=old))
    assert response["allowed"] is False and "immutable" in response["status"]["message"]


async def test_other_updates_pass_untouched(client):
    pod = gang_pod(gates=[{"name": GATE_NAME}])
    # The controller removing the gate and pinning a node.
    released = copy.deepcopy(pod)
    released["spec"]["schedulingGates"] = []
    released["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-1"}
    # Labels and other annotations changing.
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"] = {"phase": "warmup"}
    relabelled["metadata"]["annotations"]["ganggate.io/decision"] = "released"
    for new in (released, relabelled):
        response = await post(client, review(new, operation="UPDATE", old=pod))
        assert response == {"uid": response["uid"], "allowed": True}


async def test_update_of_other_schedulers_pod_is_not_policed(client):
    old = gang_pod(scheduler="volcano")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][GROUP_NAME] = "renamed"
    assert (await post(client, review(new, operation="UPDATE", old=old)))["allowed"] is True


async def test_dry_run_gets_the_same_answer(client):
    pod = gang_pod()
    uid = "6f9b3c1e-0000-4000-8000-000000000001"
    real = await post(client, review(pod, uid=uid))
    dry = await post(client, review(pod, uid=uid, dry_run=True))
    assert real == dry
    bad = gang_pod(pod_num="0")
    assert await post(client, review(bad, uid=uid)) == await post(client, review(bad, uid=uid, dry_run=True))


async def test_response_echoes_uid_and_version(client):
    body = review(gang_pod(), uid="abc-123")
    resp = await client.post("/mutate", json=body)
    answer = await resp.json()
    assert (answer["apiVersion"], answer["kind"], answer["response"]["uid"]) == (
        "admission.k8s.io/v1", "AdmissionReview", "abc-123")


@pytest.mark.parametrize(
    "raw, needle",
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'"review"', "JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}', "apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Review", "request": {"uid": "u"}}', "kind"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "uid"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}', "uid"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", '
         b'"kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": [1]}}', "object"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", '
         b'"kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": '
         b'{"metadata": {"annotations": "x"}}}}', "annotations"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", '
         b'"kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "UPDATE", "object": {}}}', "oldObject"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", '
         b'"kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": '
         b'{"metadata": {"annotations": {"scheduling.k8s.io/group-name": "a"}}, "spec": {"schedulerName": [1]}}}}',
         "schedulerName"),
        (b"", "not JSON"),
    ],
)
async def test_malformed_bodies_get_400_and_the_server_goes_on(client, raw, needle):
    resp = await client.post("/mutate", data=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    body = await resp.json()
    assert body["code"] == 400 and needle in body["message"]
    # Still serving.
    assert (await post(client, review(gang_pod())))["allowed"] is True


async def test_health_and_readiness(client):
    for path in ("/healthz", "/readyz"):
        resp = await client.get(path)
        assert resp.status == 200 and await resp.text() == "ok"


async def test_metrics_count_outcomes_and_latency(client, metrics, aiohttp_client):
    scrape = await aiohttp_client(make_metrics_app(metrics, Health(ready=True)))
    await post(client, review(gang_pod()))
    await post(client, review(gang_pod(pod_num="x")))
    await post(client, review(gang_pod(group=None, pod_num=None)))
    await client.post("/mutate", data=b"nope")
    text = await (await scrape.get("/metrics")).text()
    assert 'ganggate_webhook_requests_total{outcome="gated"} 1.0' in text
    assert 'ganggate_webhook_requests_total{outcome="denied"} 1.0' in text
    assert 'ganggate_webhook_requests_total{outcome="not_gang"} 1.0' in text
    assert 'ganggate_webhook_requests_total{outcome="malformed"} 1.0' in text
    assert "ganggate_webhook_request_duration_seconds_count 4.0" in text


async def test_the_admission_app_does_not_serve_metrics(client):
    assert (await client.get("/metrics")).status == 404


async def test_the_metrics_app_reports_readiness(aiohttp_client, metrics):
    health = Health()
    scrape = await aiohttp_client(make_metrics_app(metrics, health))
    assert (await scrape.get("/readyz")).status == 503
    health.ready = True
    assert (await scrape.get("/readyz")).status == 200
    assert (await scrape.get("/healthz")).status == 200
    assert (await scrape.post("/mutate", json={})).status in (404, 405)


async def test_each_app_has_its_own_metrics(aiohttp_client):
    first_metrics, second_metrics = Metrics(), Metrics()
    first = await aiohttp_client(make_app(WebhookConfig(), first_metrics))
    await aiohttp_client(make_app(WebhookConfig(), second_metrics))
    await post(first, review(gang_pod()))
    first_scrape = await aiohttp_client(make_metrics_app(first_metrics, Health()))
    second_scrape = await aiohttp_client(make_metrics_app(second_metrics, Health()))
    assert 'ganggate_webhook_requests_total{outcome="gated"} 1.0' in await (await first_scrape.get("/metrics")).text()
    text = await (await second_scrape.get("/metrics")).text()
    assert 'ganggate_webhook_requests_total{outcome="gated"} 0.0' in text


async def test_documented_denial_messages_are_the_real_ones(aiohttp_client):
    """docs/webhook.md quotes every denial message; each must be what the webhook answers."""
    import re
    from pathlib import Path

    client = await aiohttp_client(make_app(WebhookConfig()))  # the default --max-pod-num

    text = (Path(__file__).resolve().parent.parent / "docs" / "webhook.md").read_text()
    section = text.split("## Denial messages", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| [^|]+ \| `(.+)` \|$", section, flags=re.M)
    assert len(documented) == 17
    created = [gang_pod(pod_num=None), gang_pod(group=None, pod_num="4"),
               gang_pod(group=None, pod_num=None, min_available="2"), gang_pod(group="Train"),
               gang_pod(pod_num="0"), gang_pod(pod_num="4", min_available="5"), gang_pod(node_name="gpu-1")]
    timeout_bad, timeout_alone = gang_pod(), gang_pod(group=None, pod_num=None)
    timeout_bad["metadata"]["annotations"][GROUP_TIMEOUT_SECONDS] = "soon"
    timeout_alone["metadata"].setdefault("annotations", {})[GROUP_TIMEOUT_SECONDS] = "60"
    created += [timeout_bad, timeout_alone]
    topology_bad = gang_pod()
    topology_bad["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = "rack/"
    created.append(topology_bad)
    bodies = [review(pod) for pod in created]
    old = gang_pod(name="u")
    changed, removed = copy.deepcopy(old), copy.deepcopy(old)
    changed["metadata"]["annotations"][GROUP_POD_NUM] = "8"
    del removed["metadata"]["annotations"]
    bodies += [review(changed, operation="UPDATE", old=old), review(removed, operation="UPDATE", old=old)]
    plain = gang_pod(name="a", group=None, pod_num=None)
    bodies.append(review(gang_pod(name="a", group="ddp"), operation="UPDATE", old=plain))
    in_rack, in_block = gang_pod(name="t"), gang_pod(name="t")
    in_rack["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = "example.com/rack"
    in_block["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = "example.com/block"
    bodies.append(review(in_block, operation="UPDATE", old=in_rack))
    for limits, node in (({"aliyun.com/gpu-mem": "eight"}, None),
                         ({"aliyun.com/gpu-mem": "4", "nvidia.com/gpu": "1"}, None),
                         ({"aliyun.com/gpu-mem": "4"}, "gpu-1")):  # GPU sharing (docs/gpu-sharing.md)
        sharing = gang_pod(group=None, pod_num=None, node_name=node)
        sharing["spec"]["containers"][0].update(name="main", resources={"limits": limits})
        bodies.append(review(sharing))
    preferred = gang_pod(name="p")
    preferred["metadata"]["annotations"][GROUP_TOPOLOGY_PREFERRED] = "example.com/rack"
    assert (await post(client, review(preferred)))["allowed"] is True
    actual = {(await post(client, body))["status"]["message"] for body in bodies}
    assert set(documented) == actual


async def test_denial_of_a_generated_name_pod_is_logged_by_its_prefix(client, caplog):
    """Job pods arrive with metadata.generateName and no name yet."""
    caplog.set_level(logging.INFO, logger="ganggate.webhook")
    pod = gang_pod(pod_num="0")
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "ddp-train-3-"
    body = review(pod)
    body["request"].pop("name", None)
    assert (await post(client, body))["allowed"] is False
    (line,) = [r.getMessage() for r in caplog.records if r.name == "ganggate.webhook"]
    assert line.startswith("denied ml/ddp-train-3-<generated>: annotation " + GROUP_POD_NUM)
