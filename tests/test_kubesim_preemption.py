"""kubesim's scheduler preemption: victims and node as DefaultPreemption chooses them.

Written from https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/ and the
code it describes, pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go and
pkg/scheduler/framework/preemption/preemption.go. The hand-built cases mirror the ones of
default_preemption_test.go (TestSelectNodesForPreemption, TestPickOneNodeForPreemption) in spirit:
one GPU resource instead of cpu/memory, the same priorities (low 0, mid 100, high 1000).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from ganggate.sim import Simulator
from ganggate.sim.scheduler import preemption
from ganggate.sim.scheduler.cache import ClusterCache, PodEntry
from ganggate.sim.simulator import node_manifest
from tests.kubesim_support import eventually, pod_manifest

NVIDIA = "nvidia.com/gpu"
LOW, MID, HIGH = 0, 100, 1000


def cache_with(nodes: dict[str, list[tuple[str, int, int, str]]], gpus: int = 8) -> tuple[ClusterCache, dict[str, Any]]:
    """Nodes of `gpus` GPUs holding pods given as (name, gpus, priority, startTime)."""
    cache = ClusterCache()
    pods: dict[str, Any] = {}
    for node, members in nodes.items():
        cache.set_node(node_manifest(node, gpus=gpus))
        for name, used, priority, start in members:
            key = f"default/{name}"
            cache.add_pod(key, PodEntry(node, {NVIDIA: used * 1000}, 0, 0, priority=priority))
            pods[key] = {"metadata": {"name": name, "namespace": "default", "labels": {"app": name.split("-")[0]}},
                         "status": {"startTime": start}}
    return cache, pods


def preemptor(gpus: int, priority: int = HIGH, policy: str = "PreemptLowerPriority") -> tuple[dict[str, Any], dict[str, int]]:
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"priority": priority, "preemptionPolicy": policy},
           "status": {}}
    return pod, {NVIDIA: gpus * 1000}


def run(cache: ClusterCache, pods: dict[str, Any], gpus: int, pdbs: list[dict[str, Any]] | None = None,
        **kwargs: Any) -> preemption.Outcome:
    pod, request = preemptor(gpus, **kwargs)
    return preemption.preempt(cache, pod, request, list(cache.index.values()), pods, pdbs or [])


T1, T2, T3 = "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z", "2024-01-01T00:00:03Z"


def test_only_lower_priority_pods_are_victims_and_the_fewest_needed() -> None:
    # SelectVictimsOnNode: remove all lower-priority pods, then reprieve the most important first.
    cache, pods = cache_with({"n1": [("a-1", 2, LOW, T1), ("a-2", 2, MID, T1), ("a-3", 4, HIGH, T1)]})
    outcome = run(cache, pods, 4)
    assert outcome.node == "n1"
    # The HIGH pod is never a victim; victims are listed most important first (MoreImportantPod).
    assert outcome.victims == ("default/a-2", "default/a-1")
    # Needing only 2 GPUs, the MID pod is reprieved and only the LOW one goes.
    assert run(cache, pods, 2).victims == ("default/a-1",)


def test_no_victims_when_nothing_is_of_lower_priority() -> None:
    cache, pods = cache_with({"n1": [("a-1", 8, HIGH, T1)]})
    outcome = run(cache, pods, 1)
    assert (outcome.node, outcome.message) == (None, preemption.NO_VICTIMS)


def test_preemption_policy_never_never_preempts() -> None:
    cache, pods = cache_with({"n1": [("a-1", 8, LOW, T1)]})
    outcome = run(cache, pods, 8, policy="Never")
    assert (outcome.node, outcome.message) == (None, "not eligible due to preemptionPolicy=Never.")


def test_the_node_with_the_lowest_highest_victim_priority_is_picked() -> None:
    # TestPickOneNodeForPreemption "machine with min highest priority pod is picked".
    cache, pods = cache_with({"n1": [("a-1", 8, MID, T1)], "n2": [("b-1", 4, LOW, T1), ("b-2", 4, LOW, T1)]})
    assert run(cache, pods, 8).node == "n2"


def test_then_the_smallest_sum_of_priorities() -> None:
    # "when highest priorities are the same, minimum sum of lower priority pods is used".
    cache, pods = cache_with({"n1": [("a-1", 4, MID, T1), ("a-2", 4, MID, T1)],
                              "n2": [("b-1", 4, MID, T1), ("b-2", 4, LOW, T1)]})
    assert run(cache, pods, 8).node == "n2"


def test_then_the_fewest_victims() -> None:
    # "when highest priority and sum are the same, minimum number of pods is used" (LOW is 0).
    cache, pods = cache_with({"n1": [("a-1", 4, MID, T1), ("a-2", 2, LOW, T1), ("a-3", 2, LOW, T1)],
                              "n2": [("b-1", 4, MID, T1), ("b-2", 4, LOW, T1)]})
    outcome = run(cache, pods, 8)
    assert outcome.node == "n2" and len(outcome.victims) == 2


def test_then_the_latest_start_of_the_highest_priority_victims() -> None:
    # "same priority, same number of victims, different start time for each machine's pod".
    cache, pods = cache_with({"n1": [("a-1", 8, MID, T1)], "n2": [("b-1", 8, MID, T3)], "n3": [("c-1", 8, MID, T2)]})
    assert run(cache, pods, 8).node == "n2"


def test_a_pdb_steers_preemption_to_the_node_with_fewer_violations() -> None:
    # filterPodsWithPDBViolation + pickOneNodeForPreemption's first rule: the budget over the
    # "a" pods allows no disruption, so node n1 would violate it even though its victims are
    # cheaper by every other rule.
    cache, pods = cache_with({"n1": [("a-1", 8, LOW, T1)], "n2": [("b-1", 8, MID, T1)]})
    budget = {"metadata": {"name": "a", "namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "a"}}},
              "status": {"disruptionsAllowed": 0}}
    assert run(cache, pods, 8).node == "n1"
    assert run(cache, pods, 8, pdbs=[budget]).node == "n2"
    # A budget with room left is no violation.
    budget["status"]["disruptionsAllowed"] = 1
    assert run(cache, pods, 8, pdbs=[budget]).node == "n1"


def test_a_pdb_violating_victim_is_reprieved_first() -> None:
    # Reprieve order: the violating pods first; here either pod frees enough, so the protected one stays.
    cache, pods = cache_with({"n1": [("a-1", 4, LOW, T1), ("b-1", 4, LOW, T1)]})
    budget = {"metadata": {"name": "a", "namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "a"}}},
              "status": {"disruptionsAllowed": 0}}
    assert run(cache, pods, 4, pdbs=[budget]).victims == ("default/b-1",)


def test_a_nominated_pod_waits_for_its_terminating_victims() -> None:
    cache, pods = cache_with({"n1": [("a-1", 8, LOW, T1)]})
    pods["default/a-1"]["metadata"]["deletionTimestamp"] = T3
    pods["default/a-1"]["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                                    "reason": "PreemptionByScheduler"}]
    pod, request = preemptor(8)
    pod["status"]["nominatedNodeName"] = "n1"
    outcome = preemption.preempt(cache, pod, request, [0], pods, [])
    assert (outcome.node, outcome.message) == (None, "not eligible due to a terminating pod on the nominated node.")


# ---- through the API, with the scheduler and the kubelet -----------------------------------------------

async def make_class(session: aiohttp.ClientSession, url: str, name: str, value: int, **extra: Any) -> None:
    async with session.post(f"{url}/apis/scheduling.k8s.io/v1/priorityclasses",
                            json={"metadata": {"name": name}, "value": value, **extra}) as response:
        assert response.status == 201, await response.text()


async def make_pod(session: aiohttp.ClientSession, url: str, name: str, gpus: int, **spec: Any) -> None:
    async with session.post(f"{url}/api/v1/namespaces/default/pods",
                            json=pod_manifest(name, gpus=gpus, **{"terminationGracePeriodSeconds": 1, **spec})) as response:
        assert response.status == 201, await response.text()


def pod_of(sim: Simulator, name: str) -> dict[str, Any]:
    return sim.store.get("pods", "default", name) or {}


async def test_a_high_priority_pod_preempts_and_runs_where_its_victim_was() -> None:
    async with Simulator(nodes=1, gpus_per_node=8, bookmark_seconds=0.2) as sim, aiohttp.ClientSession() as session:
        await make_class(session, sim.url, "high", HIGH)
        await make_pod(session, sim.url, "low", 8)
        await eventually(lambda: pod_of(sim, "low").get("status", {}).get("phase") == "Running")
        victim_uid = pod_of(sim, "low")["metadata"]["uid"]
        nominated: list[str] = []

        def nominated_then_bound() -> bool:
            pod = pod_of(sim, "urgent")
            if pod.get("status", {}).get("nominatedNodeName"):
                nominated.append(pod["status"]["nominatedNodeName"])
            return pod.get("spec", {}).get("nodeName") == "node-0"

        await make_pod(session, sim.url, "urgent", 8, priorityClassName="high")
        await eventually(nominated_then_bound, timeout=30)
        assert set(nominated) == {"node-0"}
        # ClearingNominatedNodeNameAfterBinding (beta, on in 1.35): the binding cleared it.
        assert not pod_of(sim, "urgent")["status"].get("nominatedNodeName")
        assert pod_of(sim, "low").get("metadata", {}).get("uid") != victim_uid  # gone


async def test_preemption_policy_never_waits_instead_of_preempting() -> None:
    async with Simulator(nodes=1, gpus_per_node=8, bookmark_seconds=0.2) as sim, aiohttp.ClientSession() as session:
        await make_class(session, sim.url, "polite", HIGH, preemptionPolicy="Never")
        await make_pod(session, sim.url, "low", 8)
        await eventually(lambda: pod_of(sim, "low").get("status", {}).get("phase") == "Running")
        await make_pod(session, sim.url, "polite", 8, priorityClassName="polite")
        await eventually(lambda: any(c.get("reason") == "Unschedulable"
                                     for c in pod_of(sim, "polite").get("status", {}).get("conditions", [])))
        scheduler = sim.components["Scheduler"]
        await eventually(lambda: not scheduler.busy)
        assert not pod_of(sim, "low")["metadata"].get("deletionTimestamp")
        assert not pod_of(sim, "polite")["status"].get("nominatedNodeName")
        assert scheduler.preemptions == 0
        # It is scheduled ahead of lower-priority pods once room appears.
        async with session.delete(f"{sim.url}/api/v1/namespaces/default/pods/low") as response:
            assert response.status in (200, 202)
        await eventually(lambda: pod_of(sim, "polite").get("spec", {}).get("nodeName") == "node-0", timeout=30)


async def test_a_lower_priority_pod_does_not_take_the_room_of_a_nominated_pod() -> None:
    async with Simulator(nodes=1, gpus_per_node=8, bookmark_seconds=0.2) as sim, aiohttp.ClientSession() as session:
        await make_class(session, sim.url, "high", HIGH)
        await make_pod(session, sim.url, "low", 8, terminationGracePeriodSeconds=3)
        await eventually(lambda: pod_of(sim, "low").get("status", {}).get("phase") == "Running")
        await make_pod(session, sim.url, "urgent", 8, priorityClassName="high")
        await eventually(lambda: pod_of(sim, "urgent").get("status", {}).get("nominatedNodeName") == "node-0")
        await make_pod(session, sim.url, "sneaky", 4)  # priority 0: must not take the freed GPUs
        await eventually(lambda: pod_of(sim, "urgent").get("spec", {}).get("nodeName") == "node-0", timeout=30)
        await asyncio.sleep(0)
        assert not pod_of(sim, "sneaky")["spec"].get("nodeName")
