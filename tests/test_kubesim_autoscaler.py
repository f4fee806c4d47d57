"""kubesim's cluster-autoscaler: node groups grow for unschedulable pods and shrink when unneeded,
and ProvisioningRequests are checked or provisioned all or nothing, as cluster-autoscaler does."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ganggate.sim.api import autoscaling as ar
from ganggate.sim.autoscaler import estimator
from ganggate.sim.autoscaler.nodegroups import NodeGroupError, parse_node_group
from ganggate.sim.clock import WallClock
from ganggate.sim.simulator import Simulator, node_manifest
from tests.kubectl_support import KUBECTL
from tests.kubesim_support import Raw, eventually, pod_manifest

PROVREQS = "/apis/autoscaling.x-k8s.io/v1/namespaces/default/provisioningrequests"
TEMPLATES = "/api/v1/namespaces/default/podtemplates"


def test_node_group_flag_reads_bounds_shape_and_options() -> None:
    group = parse_node_group("gpu:1:6,gpus=4,cpu=32,memory=256Gi,delay=45,fail=0.25,label=pool=a100,taint=gpu=yes:NoSchedule")
    assert (group.name, group.min_size, group.max_size, group.gpus, group.cpu, group.memory) == ("gpu", 1, 6, 4, "32", "256Gi")
    assert (group.delay_seconds, group.failure_rate, group.labels) == (45.0, 0.25, {"pool": "a100"})
    assert group.taints == ({"key": "gpu", "value": "yes", "effect": "NoSchedule"},)
    node = group.node("gpu-3")
    assert node["metadata"]["labels"][ar.NODE_GROUP_LABEL] == "gpu" and node["status"]["allocatable"]["nvidia.com/gpu"] == "4"


@pytest.mark.parametrize("text, says", [
    ("gpu", "NAME:MIN:MAX"), ("gpu:2:1", "MIN <= MAX"), ("gpu:a:3", "whole numbers"),
    ("gpu:0:3,size=4", "unknown option 'size'"), ("gpu:0:3,fail=2", "fail='2' is not a valid value"),
])
def test_a_bad_node_group_flag_says_what_to_write(text: str, says: str) -> None:
    with pytest.raises(NodeGroupError, match=says):
        parse_node_group(text)


def test_the_binpacking_estimate_adds_nodes_one_at_a_time() -> None:
    template = node_manifest("t", gpus=8)
    pods = [pod_manifest(f"p{i}", gpus=4) for i in range(5)] + [pod_manifest("big", gpus=16)]
    count, left = estimator.estimate(pods, template, limit=10)
    assert count == 3 and [p["metadata"]["name"] for p in left] == ["big"]  # 5 x 4 GPUs on 8-GPU nodes; 16 never fits
    count, left = estimator.estimate(pods[:5], template, limit=2)
    assert count == 2 and len(left) == 1  # the group's room bounds it


async def _cluster(**options: Any) -> AsyncIterator[tuple[Simulator, Raw]]:
    groups = [parse_node_group(options.pop("group", "gpu:0:4,gpus=8,delay=0.2"))]
    settings = {"scan_seconds": 0.1, "unneeded_seconds": 0.6, **options}
    async with Simulator(nodes=1, gpus_per_node=8, node_groups=groups, autoscaler_options=settings,
                         clock=WallClock(), bookmark_seconds=0.2) as sim:
        async with aiohttp.ClientSession() as session:
            yield sim, Raw(sim.url, session)


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Simulator, Raw]]:
    async for pair in _cluster():
        yield pair


def group_nodes(sim: Simulator) -> list[str]:
    return sorted(n["metadata"]["name"] for n in sim.store.list("nodes")
                  if (n["metadata"].get("labels") or {}).get(ar.NODE_GROUP_LABEL) == "gpu")


def bound(sim: Simulator, name: str) -> str | None:
    return ((sim.store.get("pods", "default", name) or {}).get("spec") or {}).get("nodeName")


async def test_unschedulable_pods_get_nodes_and_unneeded_nodes_go(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    for name in ("a", "b", "c"):
        status, _, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest(name, gpus=8))
        assert status == 201
    await eventually(lambda: all(bound(sim, n) for n in ("a", "b", "c")))
    assert len(group_nodes(sim)) == 2  # node-0 held one; the other two needed a node each, no more
    assert {bound(sim, "b"), bound(sim, "c")} <= set(group_nodes(sim)) | {"node-0"}
    for name in ("a", "b", "c"):
        await raw.request("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
    await eventually(lambda: group_nodes(sim) == [])  # empty for the unneeded time: removed, down to min 0
    assert sim.store.get("nodes", None, "node-0") is not None  # nodes of no group are never the autoscaler's


async def _template(raw: Raw, name: str, gpus: int) -> None:
    body = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
            "template": {"spec": pod_manifest("x", gpus=gpus)["spec"]}}
    status, answer, _ = await raw.request("POST", TEMPLATES, body)
    assert status == 201, answer


def _provreq(name: str, template: str, count: int, cls: str = ar.BEST_EFFORT_ATOMIC) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": {"name": name},
            "spec": {"provisioningClassName": cls, "podSets": [{"podTemplateRef": {"name": template}, "count": count}]}}


def conditions(sim: Simulator, name: str) -> dict[str, dict[str, Any]]:
    request = sim.store.get(ar.KEY, "default", name) or {}
    return {c["type"]: c for c in (request.get("status") or {}).get("conditions") or []}


async def test_an_atomic_request_is_provisioned_whole_or_not_at_all(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    await _template(raw, "worker", 8)
    assert (await raw.request("POST", PROVREQS, _provreq("too-big", "worker", 6)))[0] == 201  # 1 + 4 nodes hold 5
    await eventually(lambda: conditions(sim, "too-big").get(ar.PROVISIONED, {}).get("reason") == ar.CAPACITY_NOT_FOUND)
    assert conditions(sim, "too-big")[ar.ACCEPTED]["status"] == "True"
    assert group_nodes(sim) == []  # all or nothing: no node for a part of it
    assert (await raw.request("POST", PROVREQS, _provreq("fits", "worker", 4)))[0] == 201
    await eventually(lambda: conditions(sim, "fits").get(ar.PROVISIONED, {}).get("status") == "True")
    assert conditions(sim, "fits")[ar.PROVISIONED]["reason"] == ar.CAPACITY_PROVISIONED  # asked for, not found
    await eventually(lambda: len(group_nodes(sim)) == 3)  # node-0 holds one of the four
    assert conditions(sim, "too-big")[ar.PROVISIONED]["status"] == "False"


async def test_check_capacity_books_what_is_there_and_the_booking_expires() -> None:
    async for sim, raw in _cluster(reservation_seconds=0.5):
        await _template(raw, "worker", 8)
        assert (await raw.request("POST", PROVREQS, _provreq("check", "worker", 2, ar.CHECK_CAPACITY)))[0] == 201
        await eventually(lambda sim=sim: conditions(sim, "check").get(ar.PROVISIONED, {}).get("reason") == ar.CAPACITY_NOT_FOUND)
        assert group_nodes(sim) == []  # check-capacity never scales up
        await sim.add_node("node-1", gpus=8)
        await eventually(lambda sim=sim: conditions(sim, "check").get(ar.PROVISIONED, {}).get("reason") == ar.CAPACITY_FOUND)
        expired = await eventually(lambda sim=sim: conditions(sim, "check").get(ar.BOOKING_EXPIRED))
        assert (expired["status"], expired["reason"]) == ("True", ar.BOOKING_EXPIRED_REASON)


async def test_provisioning_requests_are_validated_and_their_spec_is_immutable(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    bad = _provreq("bad", "worker", 0)
    status, body, _ = await raw.request("POST", PROVREQS, bad)
    assert status == 422 and "spec.podSets[0].count" in body["message"]
    assert (await raw.request("POST", PROVREQS, _provreq("ok", "worker", 1, ar.CHECK_CAPACITY)))[0] == 201
    patch = {"spec": {"provisioningClassName": ar.BEST_EFFORT_ATOMIC}}
    status, body, _ = await raw.request("PATCH", f"{PROVREQS}/ok", patch, "application/merge-patch+json")
    assert status == 422 and "Value is immutable" in body["message"]
    status, body, _ = await raw.request("GET", "/apis/autoscaling.x-k8s.io/v1")
    assert {r["name"] for r in body["resources"]} >= {"provisioningrequests", "provisioningrequests/status"}


PROVREQ_YAML = """\
apiVersion: v1
kind: PodTemplate
metadata: {name: worker}
template:
  spec:
    containers:
    - name: main
      image: busybox:1.36
      resources: {limits: {nvidia.com/gpu: "8"}}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: train}
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  podSets:
  - podTemplateRef: {name: worker}
    count: 3
"""


def test_kubectl_applies_a_provisioning_request_to_sim_serve_and_sees_the_new_nodes(tmp_path: Path) -> None:
    """As a user would: `ganggate sim serve --node-group`, then kubectl with validation on."""
    kubeconfig = tmp_path / "kubeconfig"
    ganggate = str(Path(sys.executable).with_name("ganggate"))
    with open(tmp_path / "serve.log", "w") as log:
        process = subprocess.Popen([ganggate, "sim", "serve", "--port", "0", "--nodes", "1", "--kubeconfig-out",
                                    str(kubeconfig), "--node-group", "gpu:0:3,delay=0.5", "--autoscaler-scan-seconds", "0.2"],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        def kubectl(*args: str, stdin: str | None = None) -> str:
            result = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin,
                                    capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stderr
            return result.stdout

        deadline = time.monotonic() + 60
        while not (kubeconfig.exists() and "serving" in (tmp_path / "serve.log").read_text()):
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        assert "created" in kubectl("apply", "-f", "-", stdin=PROVREQ_YAML)
        jsonpath = "{range .status.conditions[*]}{.type}={.status}/{.reason} {end}"
        while "Provisioned=True/CapacityIsProvisioned" not in kubectl("get", "provreq", "train", "-o", f"jsonpath={jsonpath}"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        while len(kubectl("get", "nodes", "-l", f"{ar.NODE_GROUP_LABEL}=gpu", "-o", "name").split()) != 2:
            assert time.monotonic() < deadline  # node-0 holds one of the three pods, two new nodes the rest
            time.sleep(0.2)
        assert "unchanged" in kubectl("apply", "-f", "-", stdin=PROVREQ_YAML)
        assert "podSets" in kubectl("explain", "provisioningrequest.spec")
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_a_stockout_adds_no_node_and_backs_the_group_off() -> None:
    async for sim, raw in _cluster(group="gpu:0:4,gpus=8,delay=0.2,fail=1"):
        assert (await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("a", gpus=8)))[0] == 201
        assert (await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("b", gpus=8)))[0] == 201
        autoscaler = sim.components["Autoscaler"]
        await eventually(lambda autoscaler=autoscaler: autoscaler.stockouts >= 1)
        assert group_nodes(sim) == [] and autoscaler.scale_ups == 1  # backed off: not asked again at once
        assert sorted(p["metadata"]["name"] for p in sim.store.list("pods", "default") if not p["spec"].get("nodeName")) == ["b"]
