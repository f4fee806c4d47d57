"""The same gang scenarios, run for an annotation gang and for a PodGroup gang (Kubernetes' own
gang API, on a cluster whose API serves it and whose scheduler does not gang-schedule it): each
runs whole, two that do not fit together never deadlock, a gang short of pods waits gated, and one
larger than the cluster is told it can never fit. The PodGroup's PodGroupInitiallyScheduled
condition says what happened."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ganggate.contract import GROUP_NAME
from ganggate.kube.calls import call_json
from tests.controller_support import decision, e2e_cluster, gang_pod, is_gated, list_events, wait_for

KINDS = ["annotations", "podgroup"]
GATES = "GenericWorkload=true"  # the API and the pod field
SCHEDULER_GATES = "GenericWorkload=false"  # a scheduler that does not gang-schedule PodGroups


class Gangs:
    """Makes gangs of one kind and reads them back as a user would."""

    def __init__(self, env: Any, kind: str) -> None:
        from kubernetes_asyncio import client

        self.env, self.kind = env, kind
        self.custom = client.CustomObjectsApi(env.api)

    async def make(self, name: str, size: int, *, gpus: int = 4, pods: int | None = None,
                   run_seconds: float | None = None) -> None:
        if self.kind == "podgroup":
            body = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}
            await call_json(self.custom.create_namespaced_custom_object, "scheduling.k8s.io", "v1beta1", "default",
                            "podgroups", body)
        for index in range(size if pods is None else pods):
            await self.add(name, size, index, gpus=gpus, run_seconds=run_seconds)

    async def add(self, name: str, size: int, index: int, *, gpus: int = 4, run_seconds: float | None = None) -> None:
        if self.kind == "annotations":
            pod = gang_pod(f"{name}-{index}", name, size, gpus=gpus, run_seconds=run_seconds)
        else:
            pod = gang_pod(f"{name}-{index}", None, None, gpus=gpus, run_seconds=run_seconds)
            pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        await call_json(self.env.core.create_namespaced_pod, "default", pod)

    async def members(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for pod in await self.env.pods("default"):
            name = ((pod["metadata"].get("annotations") or {}).get(GROUP_NAME)
                    or (pod["spec"].get("schedulingGroup") or {}).get("podGroupName"))
            if name:
                out.setdefault(name, []).append(pod)
        return out

    async def condition(self, name: str) -> dict | None:
        if self.kind != "podgroup":
            return {"status": "n/a"}
        body = await call_json(self.custom.get_namespaced_custom_object, "scheduling.k8s.io", "v1beta1", "default",
                               "podgroups", name)
        return next(iter((body.get("status") or {}).get("conditions") or []), None)

    async def bound_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per gang: pods bound and still running; pods ever bound (finished ones keep their node)."""
        members = await self.members()
        ever = {name: sum(1 for p in pods if p["spec"].get("nodeName")) for name, pods in members.items()}
        running = {name: sum(1 for p in pods if p["spec"].get("nodeName")
                             and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
                   for name, pods in members.items()}
        return running, ever

    async def released_as_one(self, name: str) -> None:
        """Every pod of the gang was released by one decision (the record ganggate writes on each)."""
        ids = {(decision(p) or {}).get("id") for p in (await self.members())[name]}
        assert len(ids) == 1 and None not in ids, f"gang {name}: decisions {ids}"


async def _event(env: Any, reason: str, pod: str) -> dict | None:
    return next((e for e in await list_events(env.core) if e.get("reason") == reason
                 and (e.get("involvedObject") or {}).get("name") == pod), None)


@pytest.fixture(params=KINDS)
async def gangs(request, tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8, feature_gates=GATES,
                           scheduler_feature_gates=SCHEDULER_GATES) as env:
        await env.start_controller()
        yield Gangs(env, request.param)


async def test_a_gang_runs_whole(gangs):
    await gangs.make("a", 4)
    await wait_for(lambda: _bound(gangs, "a", 4), what="the gang bound whole")
    pods = (await gangs.members())["a"]
    assert not any(is_gated(p) for p in pods)
    await gangs.released_as_one("a")
    condition = await wait_for(lambda: gangs.condition("a"), what="the PodGroup's condition")
    assert condition["status"] in ("True", "n/a")
    await gangs.env.check()


async def test_two_gangs_that_fit_only_one_at_a_time_never_deadlock(gangs):
    for index in range(4):  # interleaved, as two Jobs' pods arrive
        for name in ("a", "b"):
            if index == 0 and gangs.kind == "podgroup":
                await gangs.make(name, 4, pods=0, run_seconds=1)
            await gangs.add(name, 4, index, run_seconds=1)
    seen: set[str] = set()
    deadline = time.monotonic() + 90
    while seen != {"a", "b"}:  # one runs whole, then the other
        running, ever = await gangs.bound_counts()
        assert not (running.get("a") and running.get("b")), f"both gangs hold GPUs: {running}"
        seen |= {name for name, count in ever.items() if count == 4}
        assert time.monotonic() < deadline, f"only {sorted(seen)} ran"
    for name in ("a", "b"):
        await gangs.released_as_one(name)
    await gangs.env.check()


async def test_a_gang_short_of_pods_waits_gated_then_runs_whole(gangs):
    await gangs.make("a", 4, pods=3)
    await wait_for(lambda: _event(gangs.env, "GangWaiting", "a-0"), what="GangWaiting")
    pods = (await gangs.members())["a"]
    assert all(is_gated(p) and not p["spec"].get("nodeName") for p in pods)
    if gangs.kind == "podgroup":
        condition = await wait_for(lambda: gangs.condition("a"), what="the PodGroup's condition")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    await gangs.add("a", 4, 3)
    await wait_for(lambda: _bound(gangs, "a", 4), what="the gang bound whole")


async def test_a_gang_larger_than_the_cluster_is_told_it_can_never_fit(gangs):
    await gangs.make("big", 5)  # 5 pods of 4 GPUs; the cluster has 2 nodes of 8
    event = await wait_for(lambda: _event(gangs.env, "GangCannotFit", "big-0"), what="GangCannotFit")
    assert "can never fit" in event["message"]
    assert not any(p["spec"].get("nodeName") for p in (await gangs.members())["big"])
    if gangs.kind == "podgroup":
        condition = await wait_for(lambda: _cannot_fit(gangs), what="the PodGroup's condition")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")


async def _cannot_fit(gangs: Gangs) -> dict | None:
    condition = await gangs.condition("big")
    return condition if condition and "GangCannotFit" in condition.get("message", "") else None


async def _bound(gangs: Gangs, name: str, count: int) -> bool:
    return sum(1 for p in (await gangs.members()).get(name, []) if p["spec"].get("nodeName")) >= count



async def test_ganggate_and_the_schedulers_own_gang_plugin_together_still_run_a_podgroup_whole(tmp_path):
    """--podgroups=gate on a cluster whose scheduler gang-schedules PodGroups: ganggate releases
    the gang, then the scheduler's plugin sees all of it at once and places it in one cycle."""
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8, feature_gates=GATES) as env:
        await env.start_controller(podgroups="gate", native_gang_scheduling=True)
        gangs = Gangs(env, "podgroup")
        await gangs.make("a", 4)
        await wait_for(lambda: _bound(gangs, "a", 4), what="the gang bound whole")
        await gangs.released_as_one("a")
        condition = await wait_for(lambda: gangs.condition("a"), what="the PodGroup's condition")
        assert condition["status"] == "True"


async def test_a_pod_naming_a_podgroup_on_a_cluster_without_the_api_is_told_why_it_waits(tmp_path):
    """GenericWorkload off: the webhook gated the pod for its PodGroup, then the API server dropped
    spec.schedulingGroup; the pod is in no gang, and says so."""
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        await env.start_controller()
        pod = gang_pod("early-0", None, None, gpus=1)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "early"}
        created = await call_json(env.core.create_namespaced_pod, "default", pod)
        assert "schedulingGroup" not in created["spec"] and is_gated(created)
        told = await wait_for(lambda: _event(env, "PodGroupFieldDropped", "early-0"), what="PodGroupFieldDropped")
        assert told["type"] == "Warning" and "'early'" in told["message"]
