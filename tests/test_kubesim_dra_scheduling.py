"""kubesim's DRA path as a user sees it: the resourceclaim controller, the scheduler's DynamicResources
plugin and the kubelet (shared claims, allocationMode All, claims freed, a pod bound by hand that
has no allocation, DRAExtendedResource on and off)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from tests.kubesim_support import Raw, eventually

V1 = "/apis/resource.k8s.io/v1/namespaces/default"


def request(count: int | None = None, mode: str = "ExactCount") -> dict:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "allocationMode": mode}
    if count is not None:
        exactly["count"] = count
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def pod(name: str, *, claim: str | None = None, template: str | None = None, gpus: int = 0, node: str | None = None) -> dict:
    container: dict = {"name": "c", "image": "busybox", "resources": {}}
    spec: dict = {"containers": [container]}
    if claim or template:
        ref = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
        spec["resourceClaims"] = [{"name": "gpus", **ref}]
        container["resources"]["claims"] = [{"name": "gpus"}]
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def sim_and_raw(**kw: Any):
    sim = Simulator(nodes=2, gpus_per_node=4, dra_product="NVIDIA H100 80GB HBM3", bookmark_seconds=0.2, **kw)
    await sim.start()
    session = aiohttp.ClientSession()
    return sim, session, Raw(sim.url, session)


async def get(raw: Raw, path: str) -> Any:
    status, body, _ = await raw.request("GET", path)
    return body if status == 200 else None


async def phase(raw: Raw, name: str) -> str | None:
    body = await get(raw, f"/api/v1/namespaces/default/pods/{name}")
    return body and body["status"].get("phase")


async def test_a_shared_claim_is_reserved_for_each_of_its_pods_and_deallocated_when_none_is_left() -> None:
    sim, session, raw = await sim_and_raw()
    try:
        await raw.request("POST", f"{V1}/resourceclaims", {"metadata": {"name": "shared"}, "spec": request(2)})
        for name in ("a", "b"):
            await raw.request("POST", "/api/v1/namespaces/default/pods", pod(name, claim="shared"))
        await eventually(lambda: _all_running(raw, "a", "b"), timeout=30)
        claim = await get(raw, f"{V1}/resourceclaims/shared")
        assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["a", "b"]
        assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
        a, b = [await get(raw, f"/api/v1/namespaces/default/pods/{n}") for n in ("a", "b")]
        assert a["spec"]["nodeName"] == b["spec"]["nodeName"]  # where the claim's devices are
        for name in ("a", "b"):
            await raw.request("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")

        async def deallocated() -> bool:
            status = (await get(raw, f"{V1}/resourceclaims/shared")).get("status") or {}
            return not status.get("allocation") and not status.get("reservedFor")
        await eventually(deallocated, timeout=30)
    finally:
        await session.close()
        await sim.stop()


async def _all_running(raw: Raw, *names: str) -> bool:
    return all([await phase(raw, n) == "Running" for n in names])


async def test_all_mode_takes_every_device_of_a_node_and_a_second_waits_for_them() -> None:
    sim, session, raw = await sim_and_raw()
    try:
        await raw.request("POST", f"{V1}/resourceclaimtemplates", {"metadata": {"name": "all"},
                                                                    "spec": {"spec": request(mode="All")}})
        for name in ("x", "y", "z"):
            await raw.request("POST", "/api/v1/namespaces/default/pods", pod(name, template="all"))
        await eventually(lambda: _count_running(raw, ("x", "y", "z"), 2), timeout=30)
        pods = [await get(raw, f"/api/v1/namespaces/default/pods/{n}") for n in ("x", "y", "z")]
        waiting = [p for p in pods if p["status"].get("phase") != "Running"][0]
        condition = [c for c in waiting["status"].get("conditions", []) if c["type"] == "PodScheduled"][0]
        assert condition["message"] == "0/2 nodes are available: 2 cannot allocate all claims."
        claims = (await get(raw, f"{V1}/resourceclaims"))["items"]
        assert sorted(len(c["status"]["allocation"]["devices"]["results"]) for c in claims
                      if (c.get("status") or {}).get("allocation")) == [4, 4]
        running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        await raw.request("DELETE", f"/api/v1/namespaces/default/pods/{running[0]}?gracePeriodSeconds=0")
        await eventually(lambda: _count_running(raw, (waiting["metadata"]["name"],), 1), timeout=30)
    finally:
        await session.close()
        await sim.stop()


async def _count_running(raw: Raw, names: tuple[str, ...], wanted: int) -> bool:
    return sum([await phase(raw, n) == "Running" for n in names]) == wanted


async def test_the_kubelet_does_not_start_a_pod_whose_claim_is_not_allocated() -> None:
    sim, session, raw = await sim_and_raw()
    try:
        await raw.request("POST", f"{V1}/resourceclaimtemplates", {"metadata": {"name": "one"}, "spec": {"spec": request(1)}})
        await raw.request("POST", "/api/v1/namespaces/default/pods", pod("by-hand", template="one", node="node-0"))
        await raw.request("POST", "/api/v1/namespaces/default/pods", pod("scheduled", template="one"))
        await eventually(lambda: _all_running(raw, "scheduled"), timeout=30)
        assert await phase(raw, "by-hand") == "Pending"
        by_hand = await get(raw, "/api/v1/namespaces/default/pods/by-hand")
        assert by_hand["status"]["resourceClaimStatuses"][0]["resourceClaimName"].startswith("by-hand-gpus-")
    finally:
        await session.close()
        await sim.stop()


@pytest.mark.parametrize("gate", [True, False])
async def test_plain_gpu_requests_use_dra_devices_only_with_dra_extended_resource(gate: bool) -> None:
    sim, session, raw = await sim_and_raw(feature_gates=f"DRAExtendedResource={str(gate).lower()}")
    try:
        await raw.request("POST", "/api/v1/namespaces/default/pods", pod("plain", gpus=2))
        if gate:
            await eventually(lambda: _all_running(raw, "plain"), timeout=30)
            body = await get(raw, "/api/v1/namespaces/default/pods/plain")
            name = body["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            claim = await get(raw, f"{V1}/resourceclaims/{name}")
            assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
        else:
            async def refused() -> bool:
                body = await get(raw, "/api/v1/namespaces/default/pods/plain")
                return any(c.get("message") == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
                           for c in body["status"].get("conditions", []))
            await eventually(refused, timeout=30)
    finally:
        await session.close()
        await sim.stop()


async def test_a_higher_priority_dra_pod_does_not_preempt_for_devices() -> None:
    sim, session, raw = await sim_and_raw()
    try:
        await raw.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                          {"metadata": {"name": "high"}, "value": 1000})
        await raw.request("POST", f"{V1}/resourceclaimtemplates", {"metadata": {"name": "four"}, "spec": {"spec": request(4)}})
        for name in ("low-0", "low-1"):
            await raw.request("POST", "/api/v1/namespaces/default/pods", pod(name, template="four"))
        await eventually(lambda: _all_running(raw, "low-0", "low-1"), timeout=30)
        high = pod("high", template="four")
        high["spec"]["priorityClassName"] = "high"
        await raw.request("POST", "/api/v1/namespaces/default/pods", high)

        async def refused() -> bool:
            body = await get(raw, "/api/v1/namespaces/default/pods/high")
            return any(c.get("message") == "0/2 nodes are available: 2 cannot allocate all claims."
                       for c in body["status"].get("conditions", []))
        await eventually(refused, timeout=30)
        body = await get(raw, "/api/v1/namespaces/default/pods/high")
        assert not body["status"].get("nominatedNodeName")
        assert await _all_running(raw, "low-0", "low-1")  # nobody was evicted for devices it would not free
    finally:
        await session.close()
        await sim.stop()


async def test_a_claim_another_client_allocated_pins_its_pod_and_its_devices_are_nobody_elses() -> None:
    """As 1.35: an allocated claim is only checked against its nodeSelector and reserved for the
    pod; its devices are in use for every other pod; the scheduler's finalizer goes on the claims it
    allocates; a claim allocated but never reserved is not deallocated by the resourceclaim
    controller, and one whose last reservation goes is, once it carries the finalizer."""
    sim, session, raw = await sim_and_raw()
    try:
        await raw.request("POST", f"{V1}/resourceclaims", {"metadata": {"name": "ahead"}, "spec": request(4)})
        claim = await get(raw, f"{V1}/resourceclaims/ahead")
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node-1", "device": f"gpu-{i}"} for i in range(4)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}}}
        status, body, _ = await raw.request("PUT", f"{V1}/resourceclaims/ahead/status", claim)
        assert status == 200, body
        # All of node-1's devices are taken: a pod asking 1 GPU goes to node-0, never node-1.
        await raw.request("POST", f"{V1}/resourceclaims", {"metadata": {"name": "other"}, "spec": request(1)})
        await raw.request("POST", "/api/v1/namespaces/default/pods", pod("other", claim="other"))
        await eventually(lambda: _all_running(raw, "other"), timeout=30)
        assert (await get(raw, "/api/v1/namespaces/default/pods/other"))["spec"]["nodeName"] == "node-0"
        other = await get(raw, f"{V1}/resourceclaims/other")
        assert "resource.kubernetes.io/delete-protection" in other["metadata"]["finalizers"]
        # Still allocated, reserved for no pod: left alone.
        assert (await get(raw, f"{V1}/resourceclaims/ahead"))["status"]["allocation"]
        # Its pod is bound where the allocation says and reserves it; nothing is reallocated.
        await raw.request("POST", "/api/v1/namespaces/default/pods", pod("pinned", claim="ahead"))
        await eventually(lambda: _all_running(raw, "pinned"), timeout=30)
        assert (await get(raw, "/api/v1/namespaces/default/pods/pinned"))["spec"]["nodeName"] == "node-1"
        ahead = await get(raw, f"{V1}/resourceclaims/ahead")
        assert [r["name"] for r in ahead["status"]["reservedFor"]] == ["pinned"]
        assert ahead["status"]["allocation"]["devices"] == claim["status"]["allocation"]["devices"]
        # Its pod gone: the reservation goes; without the finalizer the allocation stays.
        await raw.request("DELETE", "/api/v1/namespaces/default/pods/pinned?gracePeriodSeconds=0")

        async def unreserved() -> bool:
            return not ((await get(raw, f"{V1}/resourceclaims/ahead")).get("status") or {}).get("reservedFor")
        await eventually(unreserved, timeout=30)
        assert (await get(raw, f"{V1}/resourceclaims/ahead"))["status"]["allocation"]
        # The scheduler's claim, its pod gone, is deallocated and loses its finalizer.
        await raw.request("DELETE", "/api/v1/namespaces/default/pods/other?gracePeriodSeconds=0")

        async def released() -> bool:
            body = await get(raw, f"{V1}/resourceclaims/other")
            return not (body.get("status") or {}).get("allocation") and not body["metadata"].get("finalizers")
        await eventually(released, timeout=30)
    finally:
        await session.close()
        await sim.stop()
