"""kubesim's node lifecycle: condition taints, taint-based eviction, pod GC of deleted nodes (ManualClock).

Written from https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#taint-based-evictions
(not-ready / unreachable NoExecute taints; the DefaultTolerationSeconds admission plugin gives every
pod 300 s of toleration; an untolerated NoExecute taint evicts at once), the pod disruption
conditions (DisruptionTarget reasons DeletionByTaintManager, DeletionByPodGC) and
https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-garbage-collection.
"""

from __future__ import annotations

import asyncio

from ganggate.sim.clock import ManualClock
from tests.kubesim_lifecycle_support import gone, pod_where, simulator, sleeper_at
from tests.test_kubesim_scheduler_support import condition, pod_manifest, wait_for


def _running(pod):
    return (pod.get("status") or {}).get("phase") == "Running"


def _terminating(pod):
    return bool(pod["metadata"].get("deletionTimestamp"))


async def _taints(sim, name, expected):
    async def probe():
        node = sim.store.get("nodes", None, name)
        return {(t["key"], t["effect"]) for t in (node.get("spec") or {}).get("taints") or []} == expected
    await wait_for(probe, f"{name} taints {expected}")


async def test_not_ready_node_taints_and_evicts_after_the_default_300_seconds():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("p"))
        pod = await pod_where(api, "p", _running, "p to run")
        assert {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300} in pod["spec"]["tolerations"]
        await sim.set_node_ready("node-0", "False")
        await _taints(sim, "node-0", {("node.kubernetes.io/not-ready", "NoSchedule"),
                                      ("node.kubernetes.io/not-ready", "NoExecute")})
        await sleeper_at(clock, 300)
        clock.advance_to(299)
        await asyncio.sleep(0.1)
        assert not _terminating(await api.pod("p"))
        clock.advance_to(300)
        evicted = await pod_where(api, "p", _terminating, "p to be evicted")
        target = condition(evicted, "DisruptionTarget")
        assert (target["status"], target["reason"]) == ("True", "DeletionByTaintManager")
        # NotReady, not unreachable: the kubelet still runs and kills it after its grace period.
        await sleeper_at(clock, 330)
        clock.advance_to(330)
        await gone(api, "p")


async def test_an_untolerated_no_execute_taint_evicts_at_once():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        short = pod_manifest("short", tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                                    "effect": "NoExecute", "tolerationSeconds": 0}])
        forever = pod_manifest("forever", tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                                        "effect": "NoExecute"}])
        await api.create_pod(short)
        await api.create_pod(forever)
        await pod_where(api, "short", _running, "short to run")
        await pod_where(api, "forever", _running, "forever to run")
        await sim.set_node_ready("node-0", "False")
        await pod_where(api, "short", _terminating, "short to be evicted at once")
        clock.advance_to(10_000)
        await gone(api, "short")
        assert not _terminating(await api.pod("forever"))


async def test_unreachable_node_pods_stay_terminating_until_the_node_is_deleted():
    clock = ManualClock()
    async with simulator(clock, nodes=2, gpus_per_node=1) as (sim, api):
        await api.create_pod(pod_manifest("p", gpus=1, node_name="node-0"))
        await pod_where(api, "p", _running, "p to run")
        await sim.set_node_ready("node-0", "Unknown")
        await _taints(sim, "node-0", {("node.kubernetes.io/unreachable", "NoSchedule"),
                                      ("node.kubernetes.io/unreachable", "NoExecute")})
        await sleeper_at(clock, 300)
        clock.advance_to(300)
        await pod_where(api, "p", _terminating, "p to be evicted")
        clock.advance_to(1000)  # its kubelet is not reporting: nobody confirms the kill
        await asyncio.sleep(0.2)
        assert await api.pod("p") is not None
        await sim.delete_node("node-0")
        await sleeper_at(clock, 1040)  # pod GC's 40 s quarantine
        clock.advance_to(1040)
        await gone(api, "p")


async def test_ready_again_removes_the_taints_and_cancels_the_eviction():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("p"))
        await pod_where(api, "p", _running, "p to run")
        await sim.set_node_ready("node-0", "Unknown")
        await sleeper_at(clock, 300)
        await sim.set_node_ready("node-0", "True")
        await _taints(sim, "node-0", set())
        await wait_for(lambda: _none(clock.next_wakeup()), "the eviction to be cancelled")
        clock.advance_to(600)
        await asyncio.sleep(0.1)
        assert not _terminating(await api.pod("p"))


async def test_deleting_a_node_removes_its_pods():
    clock = ManualClock()
    async with simulator(clock, nodes=2) as (sim, api):
        await api.create_pod(pod_manifest("here", node_name="node-0"))
        await api.create_pod(pod_manifest("there", node_name="node-1"))
        await pod_where(api, "here", _running, "here to run")
        await sim.delete_node("node-0")
        await sleeper_at(clock, 40)  # pod GC's quarantine: the node might only be late in its informer
        clock.advance_to(39)
        await asyncio.sleep(0.1)
        assert await api.pod("here") is not None
        clock.advance_to(40)
        await gone(api, "here")
        assert _running(await api.pod("there"))


async def _none(value):
    return value is None
