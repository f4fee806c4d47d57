"""kubesim's kubelet stand-in end to end: bound pods start, finish on the clock, free their node."""

from __future__ import annotations

import contextlib

import aiohttp

from ganggate.sim import Simulator
from ganggate.sim.clock import ManualClock
from ganggate.sim.kubelet.kubelet import run_seconds
from tests.test_kubesim_scheduler_support import (
    Api,
    bound_node,
    condition,
    pod_manifest,
    unschedulable_message,
    wait_for,
)

RUN = "kubesim.io/run-seconds"


@contextlib.asynccontextmanager
async def simulator(clock: ManualClock, **kwargs):
    async with Simulator(clock=clock, kubelet=True, **kwargs) as sim, aiohttp.ClientSession() as session:
        yield sim, Api(session, sim.url)


async def phase_is(api: Api, name: str, phase: str) -> dict:
    async def probe():
        pod = await api.pod(name)
        return pod if (pod or {}).get("status", {}).get("phase") == phase else None

    return await wait_for(probe, f"{name} to be {phase}")


async def test_running_then_succeeded_on_the_manual_clock_frees_the_gpus():
    clock = ManualClock()
    async with simulator(clock, nodes=1, gpus_per_node=8) as (sim, api):
        await api.create_pod(pod_manifest("job", gpus=8, annotations={RUN: "30.5"}))
        running = await phase_is(api, "job", "Running")
        status = running["status"]
        assert status["startTime"]
        for kind in ("Initialized", "ContainersReady", "Ready"):
            assert condition(running, kind)["status"] == "True"
        assert condition(running, "PodScheduled")["status"] == "True"  # kept by the merge patch
        (container,) = status["containerStatuses"]
        assert container["name"] == "main" and container["ready"] and "running" in container["state"]

        await api.create_pod(pod_manifest("waiting", gpus=8))
        await unschedulable_message(api, "waiting", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
        # the kubelet waits for start + run-seconds
        await wait_for(lambda: _async(clock.next_wakeup() == 30.5), "the kubelet to wait for the end")
        clock.advance_to(30)
        assert (await api.pod("job"))["status"]["phase"] == "Running"

        clock.advance_to(30.5)
        done = await phase_is(api, "job", "Succeeded")
        (container,) = done["status"]["containerStatuses"]
        assert container["state"]["terminated"]["exitCode"] == 0
        assert container["state"]["terminated"]["reason"] == "Completed"
        assert condition(done, "Ready")["status"] == "False"
        # A finished pod holds nothing: the waiting one is bound and started.
        assert await bound_node(api, "waiting") == "node-0"
        await phase_is(api, "waiting", "Running")


async def test_pods_without_run_seconds_keep_running():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("service", gpus=1))
        await phase_is(api, "service", "Running")
        assert clock.next_wakeup() is None
        clock.advance_to(10_000)
        assert (await api.pod("service"))["status"]["phase"] == "Running"


async def test_start_seconds_delay_running_on_the_clock():
    clock = ManualClock()
    async with simulator(clock, nodes=1, kubelet_start_seconds=5) as (sim, api):
        await api.create_pod(pod_manifest("slow", gpus=1, annotations={RUN: "10"}))
        await bound_node(api, "slow")
        await wait_for(lambda: _async(clock.next_wakeup() == 5), "the kubelet to wait for the start")
        assert (await api.pod("slow"))["status"].get("phase") == "Pending"
        clock.advance_to(5)
        await phase_is(api, "slow", "Running")
        await wait_for(lambda: _async(clock.next_wakeup() == 15), "the kubelet to wait for the end")
        clock.advance_to(15)
        await phase_is(api, "slow", "Succeeded")


async def _async(value):
    return value


async def test_pods_on_missing_nodes_stay_pending_until_the_node_appears():
    clock = ManualClock()
    async with simulator(clock, nodes=1, scheduler=False) as (sim, api):
        await api.create_pod(pod_manifest("ghostly", node_name="ghost"))
        await api.create_pod(pod_manifest("real", node_name="node-0"))
        await phase_is(api, "real", "Running")  # the kubelet has seen both pods by now
        assert (await api.pod("ghostly"))["status"].get("phase") == "Pending"
        await sim.add_node("ghost")
        await phase_is(api, "ghostly", "Running")


async def test_deleted_pods_are_forgotten():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("short-lived", gpus=1, annotations={RUN: "50"}))
        await phase_is(api, "short-lived", "Running")
        await wait_for(lambda: _async(clock.next_wakeup() == 50), "the kubelet to wait for the end")
        # Deleted at once (grace 0, as `kubectl delete --force --grace-period=0`): the kubelet drops its timer.
        async with api.session.delete(f"{api.url}/api/v1/namespaces/default/pods/short-lived",
                                      json={"gracePeriodSeconds": 0}) as response:
            assert response.status == 200
        await wait_for(lambda: _async(clock.next_wakeup() is None), "the kubelet to stop waiting")
        clock.advance_to(100)
        assert await api.pod("short-lived") is None


async def test_init_containers_and_sidecars_get_statuses():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        pod = pod_manifest("with-init", annotations={RUN: "1"})
        pod["spec"]["initContainers"] = [
            {"name": "setup", "image": "x"},
            {"name": "proxy", "image": "x", "restartPolicy": "Always"},
        ]
        await api.create_pod(pod)
        running = await phase_is(api, "with-init", "Running")
        states = {c["name"]: c["state"] for c in running["status"]["initContainerStatuses"]}
        assert states["setup"]["terminated"]["reason"] == "Completed"
        assert "running" in states["proxy"]


def test_run_seconds_annotation_parsing():
    def pod(value):
        return {"metadata": {"name": "p", "annotations": {RUN: value}}}

    assert run_seconds(pod("12.5")) == 12.5
    assert run_seconds(pod("0")) == 0.0
    assert run_seconds(pod("soon")) is None
    assert run_seconds(pod("-1")) is None
    assert run_seconds({"metadata": {"name": "p"}}) is None
