"""kubesim's resource.k8s.io/v1 kinds: what a user sees creating, reading and changing them
(validation, defaults, the immutable claim spec, the status subresource, the gated field)."""

from __future__ import annotations

from typing import Any

import pytest

from ganggate.sim import Simulator
from tests.kubesim_support import Raw

V1 = "/apis/resource.k8s.io/v1"


def claim(name: str = "c", **exactly: Any) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", **exactly}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}}}


def device_class(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}], **spec}}


def messages(body: Any) -> list[str]:
    return [f"{c['field']}: {c['message']}" for c in body["details"]["causes"]]


async def test_discovery_lists_the_four_kinds(raw: Raw) -> None:
    status, body, _ = await raw.request("GET", V1)
    assert status == 200
    assert {r["name"] for r in body["resources"]} >= {"deviceclasses", "resourceclaims", "resourceclaims/status",
                                                       "resourceclaimtemplates", "resourceslices"}


async def test_a_claim_is_defaulted_and_its_spec_is_immutable(raw: Raw) -> None:
    status, body, _ = await raw.request("POST", f"{V1}/namespaces/default/resourceclaims", claim())
    assert status == 201, body
    assert body["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    body["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    status, body, _ = await raw.request("PUT", f"{V1}/namespaces/default/resourceclaims/c", body)
    assert status == 422
    assert any("field is immutable" in m for m in messages(body))


async def test_bad_claims_are_refused_with_each_reason(raw: Raw) -> None:
    bad = claim(allocationMode="All", count=2, selectors=[{"cel": {"expression": "device."}}])
    bad["spec"]["devices"]["requests"].append({"name": "gpu"})
    status, body, _ = await raw.request("POST", f"{V1}/namespaces/default/resourceclaims", bad)
    assert status == 422
    found = "\n".join(messages(body))
    assert "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'" in found
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in found
    assert "spec.devices.requests[1].name: Duplicate value" in found
    assert "exactly one of `exactly` or `firstAvailable` is required" in found
    status, _, _ = await raw.request("GET", f"{V1}/namespaces/default/resourceclaims/c")
    assert status == 404  # nothing was stored


async def test_claim_status_allocation_and_reservations(raw: Raw) -> None:
    await raw.request("POST", f"{V1}/namespaces/default/resourceclaims", claim())
    status_path = f"{V1}/namespaces/default/resourceclaims/c/status"
    reserve_only = {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}}
    status, body, _ = await raw.request("PATCH", status_path, reserve_only, "application/merge-patch+json")
    assert status == 422 and "may not be specified when `allocated` is not set" in "\n".join(messages(body))
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-0", "device": "gpu-0"}
    allocation = {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-0"]}]}]}}
    status, body, _ = await raw.request("PATCH", status_path, {"status": {"allocation": allocation, **reserve_only["status"]}},
                                        "application/merge-patch+json")
    assert status == 200, body
    assert body["status"]["reservedFor"][0]["uid"] == "u1"
    moved = {"status": {"allocation": {**allocation, "devices": {"results": [{**result, "device": "gpu-1"}]}}}}
    status, body, _ = await raw.request("PATCH", status_path, moved, "application/merge-patch+json")
    assert status == 422 and any("status.allocation" in m and "immutable" in m for m in messages(body))


async def test_slice_needs_one_node_field_and_unique_devices(raw: Raw) -> None:
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
           "spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu", "int": 1}}},
                                {"name": "gpu-0"}]}}
    status, body, _ = await raw.request("POST", f"{V1}/resourceslices", bad)
    assert status == 422
    found = "\n".join(messages(body))
    assert "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required" in found
    assert "exactly one value must be specified" in found
    assert "spec.devices[1].name: Duplicate value" in found


async def test_pod_claims_must_name_a_template_or_claim_and_containers_must_name_them(raw: Raw) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"resourceClaims": [{"name": "gpu"}],
                    "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "other"}]}}]}}
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", pod)
    assert status == 422
    found = "\n".join(messages(body))
    assert "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`" in found
    assert 'Not found: "other"' in found


@pytest.mark.parametrize("gate", [False, True])
async def test_extended_resource_name_needs_its_feature_gate(gate: bool) -> None:
    import aiohttp

    gates = f"DRAExtendedResource={str(gate).lower()}"
    async with Simulator(nodes=0, scheduler=False, kubelet=False, controllers=False, feature_gates=gates) as simulator:
        async with aiohttp.ClientSession() as session:
            status, body, _ = await Raw(simulator.url, session).request(
                "POST", f"{V1}/deviceclasses", device_class(extendedResourceName="nvidia.com/gpu"))
    assert status == 201, body
    assert body["spec"].get("extendedResourceName") == ("nvidia.com/gpu" if gate else None)


def test_dra_flags_that_do_not_go_together_are_one_line_errors(tmp_path) -> None:
    import subprocess
    import sys

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ganggate", "sim", *argv, "--kubeconfig-out", str(tmp_path / "kc")],
                              capture_output=True, text=True, timeout=120)

    serve = run("serve", "--port", "0", "--dra-product", "NVIDIA B200")
    assert (serve.returncode, serve.stdout) == (2, "error: --dra-product needs --dra\n")
    up = run("up", "--dra", "--gpu-mem-per-card", "16Gi")
    assert up.returncode == 2
    assert up.stderr == "error: --dra publishes whole GPUs: leave out --gpu-mem-per-card and --alibaba-nodes\n"
