"""Round trip: a client creates pods through kubesim's API, kubesim's admission chain calls the real
ganggate webhook over TLS (configured from deploy/base), and the stored pod or the error shows it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ganggate.admission.review import OUTCOMES
from ganggate.admission.server import WebhookConfig, start_webhook
from ganggate.certs.files import TLS_CERT, TLS_KEY
from ganggate.contract import GATE_NAME
from ganggate.sim import Simulator
from tests.test_kubesim_admission import add_label
from tests.webhook_support import gang_pod, make_certs

REPO = Path(__file__).resolve().parent.parent
WEBHOOK_NAME = "gang-gate.ganggate.io"


def _answered(ganggate) -> float:
    """How many reviews the ganggate webhook answered, whatever the outcome."""
    registry = ganggate.metrics.registry
    return sum(registry.get_sample_value("ganggate_webhook_requests_total", {"outcome": o}) or 0 for o in OUTCOMES)


@pytest.fixture
async def cluster(tmp_path):
    """kubesim with deploy/base's MutatingWebhookConfiguration pointing at the real webhook by URL."""
    cert_dir = make_certs(tmp_path / "certs")
    ganggate = await start_webhook(WebhookConfig(
        cert_file=str(cert_dir / TLS_CERT), key_file=str(cert_dir / TLS_KEY), host="127.0.0.1", port=0))
    try:
        async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
            async with sim.api_client() as api_client:
                shipped = yaml.safe_load((REPO / "deploy" / "base" / "mutatingwebhookconfiguration.yaml").read_text())
                shipped["webhooks"][0]["clientConfig"] = {
                    "url": f"https://127.0.0.1:{ganggate.port}/mutate",
                    "caBundle": base64.b64encode((cert_dir / "ca.crt").read_bytes()).decode(),
                }
                admission = client.AdmissionregistrationV1Api(api_client)
                await admission.create_mutating_webhook_configuration(shipped)
                core = client.CoreV1Api(api_client)
                await core.create_namespace({"metadata": {"name": "ml"}})
                yield core, admission, ganggate
    finally:
        await ganggate.close()


def _manifest(**kwargs) -> dict:
    pod = gang_pod(**kwargs)
    del pod["metadata"]["namespace"]
    return pod


async def test_a_gang_pod_is_stored_gated_and_an_invalid_one_is_refused_with_the_webhook_message(cluster):
    core, _, _ = cluster
    await core.create_namespaced_pod("ml", _manifest(name="w-0", pod_num="2"))
    stored = await core.read_namespaced_pod("w-0", "ml")
    assert [g.name for g in stored.spec.scheduling_gates] == [GATE_NAME]

    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod("ml", _manifest(name="w-bad", pod_num="two"))
    status = json.loads(refused.value.body)
    assert 400 <= refused.value.status < 500 and status["code"] == refused.value.status
    assert status["kind"] == "Status" and status["status"] == "Failure"
    assert status["message"].startswith(f'admission webhook "{WEBHOOK_NAME}" denied the request: ')
    assert "scheduling.k8s.io/group-pod-num" in status["message"]
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("w-bad", "ml")
    assert missing.value.status == 404


async def test_a_later_mutation_reinvokes_ganggate_which_adds_the_gate_once(cluster, webhook):
    core, admission, ganggate = cluster
    labeller = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zz-labeller"},  # sorts after "ganggate": runs second
        "webhooks": [{
            "name": "labeller.example.com",
            "clientConfig": {"url": webhook.on("label", add_label("team", "vision")), "caBundle": webhook.ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }
    await admission.create_mutating_webhook_configuration(labeller)
    before = _answered(ganggate)

    await core.create_namespaced_pod("ml", _manifest(name="w-1", pod_num="2"))

    stored = await core.read_namespaced_pod("w-1", "ml")
    assert stored.metadata.labels == {"team": "vision"}
    assert [g.name for g in stored.spec.scheduling_gates] == [GATE_NAME]
    (call,) = webhook.calls_to("label")
    assert [g["name"] for g in call.request["object"]["spec"]["schedulingGates"]] == [GATE_NAME]
    # Round 0 and the IfNeeded reinvocation after the labeller's change.
    assert _answered(ganggate) - before == 2
