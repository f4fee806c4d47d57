"""kubesim's Workload and PodGroup API (scheduling.k8s.io/v1beta1, the 1.37 shape) behind
GenericWorkload, the pod's spec.schedulingGroup, and its scheduler's gang scheduling of PodGroups
with the scheduler's GenericWorkload (1.37 merged GangScheduling into it; GangScheduling=false
turns the plugin off): what a user sees through the API."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from tests.kubesim_support import eventually

PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"
WORKLOADS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/workloads"
PODS = "/api/v1/namespaces/default/pods"


def podgroup(name: str, min_count: int | None = 4, **spec: Any) -> dict:
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"schedulingPolicy": policy, **spec}}


def pod(name: str, group: str | None, gpus: int = 4) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "m", "image": "x",
                                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class Api:
    def __init__(self, sim: Simulator, session: aiohttp.ClientSession) -> None:
        self.sim, self.session = sim, session

    async def __call__(self, method: str, path: str, body: Any = None, content_type: str = "application/json"):
        headers = {"Content-Type": content_type}
        async with self.session.request(method, self.sim.url + path, json=body, headers=headers) as response:
            return response.status, await response.json(content_type=None)

    async def bound(self) -> dict[str, str | None]:
        _, body = await self("GET", PODS)
        return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in body["items"]}


async def _cluster(gates: str, scheduler_gates: str = "", **kwargs: Any):
    sim = Simulator(nodes=2, feature_gates=gates, scheduler_feature_gates=scheduler_gates, kubelet=False,
                    controllers=False, **kwargs)
    await sim.start()
    session = aiohttp.ClientSession()
    return sim, session, Api(sim, session)


@pytest.fixture
async def api_on():
    sim, session, api = await _cluster("GenericWorkload=true", scheduler=False)
    yield api
    await session.close()
    await sim.stop()


async def test_without_the_gate_the_api_is_not_served_and_the_pod_field_is_dropped():
    sim, session, api = await _cluster("", scheduler=False)
    try:
        _, group = await api("GET", "/apis/scheduling.k8s.io")
        assert [v["version"] for v in group["versions"]] == ["v1"]
        status, _ = await api("POST", PODGROUPS, podgroup("train"))
        assert status == 404
        status, created = await api("POST", PODS, pod("w-0", "train"))
        assert status == 201 and "schedulingGroup" not in created["spec"]
    finally:
        await session.close()
        await sim.stop()


async def test_podgroups_and_workloads_are_validated(api_on):
    api = api_on
    _, resources = await api("GET", "/apis/scheduling.k8s.io/v1beta1")
    assert {r["name"] for r in resources["resources"]} == {"workloads", "podgroups", "podgroups/status"}
    status, created = await api("POST", PODGROUPS, podgroup("train"))
    assert status == 201 and created["spec"]["disruptionMode"] == {"single": {}}
    for bad, field in ((podgroup("zero", 0), "spec.schedulingPolicy.gang.minCount"),
                       ({**podgroup("both"), "spec": {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}}},
                        "spec.schedulingPolicy"),
                       (podgroup("topo", 2, schedulingConstraints={"topology": [{"key": "rack"}]}),
                        "spec.schedulingConstraints")):
        status, body = await api("POST", PODGROUPS, bad)
        assert status == 422 and body["details"]["causes"][0]["field"] == field, body
    workload = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "job"},
                "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}},
                                               {"name": "workers", "schedulingPolicy": {"basic": {}}}]}}
    status, body = await api("POST", WORKLOADS, workload)
    assert status == 422 and "Duplicate value" in body["message"]
    workload["spec"]["podGroupTemplates"].pop()
    status, _ = await api("POST", WORKLOADS, workload)
    assert status == 201


async def test_min_count_may_change_the_policy_and_priority_may_not(api_on):
    api = api_on
    await api("POST", PODGROUPS, podgroup("train", priority=10))
    merge = "application/merge-patch+json"
    status, body = await api("PATCH", f"{PODGROUPS}/train", {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
                             merge)
    assert status == 200 and body["metadata"]["generation"] == 2
    status, body = await api("PATCH", f"{PODGROUPS}/train", {"spec": {"priority": 20}}, merge)
    assert status == 422 and "field is immutable" in body["message"]
    status, body = await api("PATCH", f"{PODGROUPS}/train",
                             {"spec": {"schedulingPolicy": {"gang": None, "basic": {}}}}, merge)
    assert status == 422
    condition = {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    status, body = await api("PATCH", f"{PODGROUPS}/train/status",
                             {"status": {"conditions": [condition]}, "spec": {"priority": 99}}, merge)
    assert status == 200 and body["spec"]["priority"] == 10 and body["status"]["conditions"][0]["status"] == "True"


async def test_the_pod_field_is_checked_and_immutable(api_on):
    api = api_on
    status, body = await api("POST", PODS, pod("bad", "Not_A_Name"))
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.schedulingGroup.podGroupName"
    status, created = await api("POST", PODS, pod("w-0", "train"))
    assert status == 201 and created["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    created["spec"]["schedulingGroup"] = {"podGroupName": "other"}
    status, body = await api("PUT", f"{PODS}/w-0", created)
    assert status == 422 and "pod updates may not change fields" in body["message"]


async def _condition(api: Api, name: str) -> dict | None:
    _, body = await api("GET", f"{PODGROUPS}/{name}")
    return next(iter((body.get("status") or {}).get("conditions") or []), None)


async def test_the_scheduler_gang_schedules_a_podgroup_whole_or_not_at_all():
    sim, session, api = await _cluster("GenericWorkload=true")
    try:
        await api("POST", PODGROUPS, podgroup("train", 4))
        for i in range(3):
            await api("POST", PODS, pod(f"train-{i}", "train", gpus=2))
        await api("POST", PODS, pod("plain", None, gpus=0))  # an ordinary pod goes on as ever
        await eventually(lambda: _is_bound(api, "plain"))
        assert all(node is None for name, node in (await api.bound()).items() if name.startswith("train"))
        await api("POST", PODS, pod("train-3", "train", gpus=2))  # minCount pods exist: all placed in one cycle
        await eventually(lambda: _all_bound(api, "train", 4))
        condition = await eventually(lambda: _condition(api, "train"))
        assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
        # 8 GPUs are left (over two nodes): a group of 3 x 4 GPUs cannot be placed whole, so none of it binds
        await api("POST", PODGROUPS, podgroup("big", 3))
        for i in range(3):
            await api("POST", PODS, pod(f"big-{i}", "big"))
        condition = await eventually(lambda: _condition(api, "big"))
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert "needs 3 pods placed together" in condition["message"]
        assert all(node is None for name, node in (await api.bound()).items() if name.startswith("big"))
    finally:
        await session.close()
        await sim.stop()


async def test_without_gang_scheduling_in_the_scheduler_podgroup_pods_bind_one_by_one():
    sim, session, api = await _cluster("GenericWorkload=true", scheduler_gates="GangScheduling=false")
    try:
        await api("POST", PODGROUPS, podgroup("big", 5))
        for i in range(5):
            await api("POST", PODS, pod(f"big-{i}", "big"))
        await eventually(lambda: _all_bound(api, "big", 4))  # 4 of 5 bound: what gangs are for
        assert sum(1 for n in (await api.bound()).values() if n) == 4
        assert await _condition(api, "big") is None
    finally:
        await session.close()
        await sim.stop()


async def _is_bound(api: Api, name: str) -> bool:
    return bool((await api.bound()).get(name))


async def _all_bound(api: Api, prefix: str, count: int) -> bool:
    return sum(1 for name, node in (await api.bound()).items() if name.startswith(prefix) and node) >= count


async def test_openapi_lists_the_group_version_only_with_the_gate_on(api_on):
    _, root = await api_on("GET", "/openapi/v3")
    assert "apis/scheduling.k8s.io/v1beta1" in root["paths"]
    _, doc = await api_on("GET", root["paths"]["apis/scheduling.k8s.io/v1beta1"]["serverRelativeURL"])
    assert "io.k8s.api.scheduling.v1beta1.PodGroup" in doc["components"]["schemas"]
    sim, session, off = await _cluster("", scheduler=False)
    try:
        _, root = await off("GET", "/openapi/v3")
        assert "apis/scheduling.k8s.io/v1beta1" not in root["paths"]
        status, _ = await off("GET", "/openapi/v3/apis/scheduling.k8s.io/v1beta1")
        assert status == 404
    finally:
        await session.close()
        await sim.stop()
