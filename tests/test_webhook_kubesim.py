"""End to end: kubesim's API server calls the real HTTPS webhook, configured with the shipped
deploy/kubesim/webhook-url.yaml and a caBundle injected by `certs inject`; and the same contract with
the gate by policy (deploy/components/gate-by-policy), where the API server gates and checks gang pods
itself: every test runs against both (the `gate_by` fixture)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from ganggate.admission.server import WebhookConfig, start_webhook
from ganggate.certs.files import TLS_CERT, TLS_KEY
from ganggate.certs.inject import inject_ca_bundle
from ganggate.contract import GATE_NAME, GROUP_MIN_AVAILABLE, GROUP_NAME
from ganggate.local.parts import gate_by_policy_webhook, register_gate_policies, register_policies
from tests.gate_contract import DENIED, VAP_PREFIX, WEBHOOK_PREFIX, webhook_message
from tests.kubectl_support import KUBECTL
from tests.webhook_support import gang_pod, make_certs

pytest.importorskip("ganggate.sim.simulator")
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ganggate.sim import Simulator

REPO = Path(__file__).resolve().parent.parent


def gates(pod) -> list[str]:
    return [g.name for g in (pod.spec.scheduling_gates or [])]


async def kubectl(kubeconfig: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", kubeconfig, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(params=["webhook", "policy"])
def gate_by(request) -> str:
    """Who gates gang pods: the webhook (the default install) or the API server (the gate by policy)."""
    return request.param


def refusal_prefix(gate_by: str, name: str) -> str:
    """What the API server's message says before the webhook's own denial message."""
    return WEBHOOK_PREFIX if gate_by == "webhook" else f'pods "{name}" is forbidden: {VAP_PREFIX}'


@pytest.fixture
async def cluster(tmp_path, gate_by):
    """kubesim with the webhook registered from the shipped manifest, and with the gate by policy the
    component's policies (the webhook then gets shared-GPU pods without gang annotations only);
    yields (sim, core, webhook)."""
    cert_dir = make_certs(tmp_path / "certs")
    webhook = await start_webhook(WebhookConfig(cert_file=str(cert_dir / TLS_CERT), key_file=str(cert_dir / TLS_KEY),
                                                host="127.0.0.1", port=0))
    gates = "MutatingAdmissionPolicy=true" if gate_by == "policy" else None
    try:
        async with Simulator(nodes=2, scheduler=False, kubelet=False, feature_gates=gates) as sim:
            async with sim.api_client() as api_client:
                mwc = yaml.safe_load((REPO / "deploy" / "kubesim" / "webhook-url.yaml").read_text())
                mwc["webhooks"][0]["clientConfig"]["url"] = f"https://127.0.0.1:{webhook.port}/mutate"
                if gate_by == "policy":
                    await register_gate_policies(api_client)
                    mwc = gate_by_policy_webhook(mwc)
                await client.AdmissionregistrationV1Api(api_client).create_mutating_webhook_configuration(mwc)
                await register_policies(api_client)  # the pod UPDATE checks, deploy/base's policies
                await inject_ca_bundle(api_client, "ganggate", (cert_dir / "ca.crt").read_bytes())
                core = client.CoreV1Api(api_client)
                await core.create_namespace({"metadata": {"name": "ml"}})
                yield sim, core, webhook
    finally:
        await webhook.close()


def strip(pod: dict) -> dict:
    del pod["metadata"]["namespace"]
    return pod


async def test_gang_pods_are_gated_and_others_are_not(cluster):
    sim, core, _ = cluster
    created = await core.create_namespaced_pod("ml", strip(gang_pod(name="w-0", pod_num="2")))
    assert gates(created) == [GATE_NAME]
    stored = await core.read_namespaced_pod("w-0", "ml")
    assert gates(stored) == [GATE_NAME]
    ordinary = await core.create_namespaced_pod("ml", strip(gang_pod(name="plain", group=None, pod_num=None)))
    assert gates(ordinary) == []
    volcano = await core.create_namespaced_pod("ml", strip(gang_pod(name="vc", scheduler="volcano")))
    assert gates(volcano) == []
    other_gate = strip(gang_pod(name="w-1", pod_num="2", gates=[{"name": "example.com/quota"}]))
    assert gates(await core.create_namespaced_pod("ml", other_gate)) == ["example.com/quota", GATE_NAME]


async def test_invalid_gang_pods_are_refused_with_the_reason(cluster):
    _, core, _ = cluster
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod("ml", strip(gang_pod(name="bad", pod_num="4", min_available="6")))
    assert refused.value.status in (400, 422)
    message = json.loads(refused.value.body)["message"]
    assert f"annotation {GROUP_MIN_AVAILABLE}='6'" in message
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("bad", "ml")


async def test_annotations_are_immutable_but_the_gate_can_be_removed(cluster):
    _, core, _ = cluster
    await core.create_namespaced_pod("ml", strip(gang_pod(name="w-0", group="ddp", pod_num="1")))
    with pytest.raises(ApiException) as refused:
        await core.patch_namespaced_pod("w-0", "ml", [{"op": "remove", "path": "/metadata/annotations"}])
    assert refused.value.status == 422  # ValidatingAdmissionPolicy ganggate-gang-annotations-immutable
    assert (f"annotation {GROUP_NAME}=<absent>: is immutable once the pod exists (was 'ddp')"
            in json.loads(refused.value.body)["message"])
    # What the controller does: remove the gate (and pin a node), plus annotate its decision.
    released = await core.patch_namespaced_pod("w-0", "ml", [
        {"op": "remove", "path": "/spec/schedulingGates"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": "node-1"}},
        {"op": "add", "path": "/metadata/annotations/ganggate.io~1decision", "value": "released"},
    ])
    assert gates(released) == [] and released.metadata.annotations[GROUP_NAME] == "ddp"


async def test_dry_run_answers_the_same_and_stores_nothing(cluster):
    _, core, _ = cluster
    dry = await core.create_namespaced_pod("ml", strip(gang_pod(name="dry")), dry_run="All")
    assert gates(dry) == [GATE_NAME]
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("dry", "ml")
    assert missing.value.status == 404


async def test_a_webhook_outage_blocks_gang_pods_only(cluster, gate_by):
    _, core, webhook = cluster
    await webhook.close()
    plain = await core.create_namespaced_pod("ml", strip(gang_pod(name="plain", group=None, pod_num=None)))
    assert plain.metadata.name == "plain"
    if gate_by == "webhook":
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_pod("ml", strip(gang_pod(name="w-0")))
        assert "gang-gate.ganggate.io" in refused.value.body
    else:
        # With the gate by policy a webhook outage blocks no gang pod: the API server gates it, and still
        # refuses a broken one with the webhook's message.
        assert gates(await core.create_namespaced_pod("ml", strip(gang_pod(name="w-0")))) == [GATE_NAME]
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_pod("ml", strip(gang_pod(name="bad", pod_num="0")))
        assert json.loads(refused.value.body)["message"] == refusal_prefix(gate_by, "bad") + (
            "annotation scheduling.k8s.io/group-pod-num='0': must be a plain decimal integer from 1 to 10000")
        # What still needs the webhook: a pod asking a shared GPU without gang annotations (a gang of one).
        shared = strip(gang_pod(name="inference", group=None, pod_num=None))
        shared["spec"]["containers"][0]["resources"] = {"limits": {"aliyun.com/gpu-mem": "4"}}
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_pod("ml", shared)
        assert "gang-gate.ganggate.io" in refused.value.body
    # Ordinary updates go on too (the condition never sends pods without gang annotations).
    await core.patch_namespaced_pod("plain", "ml", {"metadata": {"labels": {"x": "y"}}})


async def test_examples_with_kubectl(cluster, gate_by):
    sim, core, _ = cluster
    code, out, err = await kubectl(sim.kubeconfig, "-n", "ml", "apply", "-f", str(REPO / "examples" / "mpi-gang-pods.yaml"))
    assert code == 0, err
    pods = (await core.list_namespaced_pod("ml")).items
    assert sorted(p.metadata.name for p in pods) == ["mpi-launcher", "mpi-worker-0", "mpi-worker-1", "mpi-worker-2"]
    assert all(gates(p) == [GATE_NAME] for p in pods)
    code, out, err = await kubectl(sim.kubeconfig, "-n", "ml", "apply", "-f", str(REPO / "examples" / "invalid-gang-pod.yaml"))
    assert code != 0
    if gate_by == "webhook":
        assert 'admission webhook "gang-gate.ganggate.io" denied the request' in err
    else:
        assert VAP_PREFIX in err
    assert f"annotation {GROUP_MIN_AVAILABLE}='6'" in err


async def test_every_denial_of_the_contract_has_the_webhooks_message(cluster, gate_by):
    """Each pod the webhook refuses at creation is refused, and nothing stored, with the same message
    whoever checks it."""
    _, core, _ = cluster
    for body in DENIED:
        name = body["metadata"]["name"]
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_pod("ml", body)
        status = json.loads(refused.value.body)
        assert refused.value.status == 422 and status["reason"] == "Invalid", name
        expected = webhook_message(body)
        if gate_by == "policy" and status["message"].startswith(WEBHOOK_PREFIX):
            assert POLICY_WEBHOOK_CASES.get(name), name  # a shared-GPU pod without gang annotations
            assert status["message"] == WEBHOOK_PREFIX + expected
        else:
            assert status["message"] == refusal_prefix(gate_by, name) + expected, name
    assert (await core.list_namespaced_pod("ml")).items == []


#: With the gate by policy the webhook still gets the shared-GPU pods without gang annotations.
POLICY_WEBHOOK_CASES = {"shared-fraction": True, "shared-and-whole": True, "shared-bound": True}
