"""Gang preemption end to end on kubesim (real webhook, controller, Job controller, garbage
collector, PriorityClasses, graceful deletion, the eviction subresource and ganggate's own
per-gang budgets): a high-priority gang on a full cluster preempts lower-priority gangs whole
and is released pinned into their room; their Jobs recreate them gated, and they wait whole.

Needs kubesim's eviction subresource and PriorityClasses (#8, engineers A and B): skipped until
those modules exist."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from ganggate.contract import GROUP_NAME, GROUP_POD_NUM
from ganggate.core.state.pods import PREEMPTION_ANNOTATION
from tests.controller_support import GPU, JobCluster, decision, job_cluster, list_events, wait_for
from tests.gang_checker import assert_every_gang_whole_or_waiting, wait_quiet

pytest.importorskip("ganggate.sim.apiserver.eviction", reason="kubesim has no eviction subresource yet")
pytest.importorskip("ganggate.sim.apiserver.admission.priority", reason="kubesim has no PriorityClasses yet")
TIME_SCALE = 10.0  # simulated seconds per wall second: a grace period of 2 s passes in 0.2 s


def gang_job(name: str, pods: int, gpus: int, priority_class: str) -> dict:
    """An Indexed Job whose pods make one gang."""
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                            "priorityClassName": priority_class,
                            "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                "limits": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "backoffLimit": 50,
                     "template": {"metadata": {"labels": {"app": name},
                                               "annotations": {GROUP_NAME: name, GROUP_POD_NUM: str(pods)}},
                                  "spec": spec}}}


class Cluster(JobCluster):
    async def post(self, path: str, body: dict) -> dict:
        return await self.request("POST", path, body, ok=(200, 201))

    async def priority_class(self, name: str, value: int, policy: str | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                "metadata": {"name": name}, "value": value}
        if policy:
            body["preemptionPolicy"] = policy
        await self.post("/apis/scheduling.k8s.io/v1/priorityclasses", body)

    async def job(self, manifest: dict) -> None:
        await self.post("/apis/batch/v1/namespaces/default/jobs", manifest)

    async def gated(self, app: str, count: int, old_uids: set[str]) -> list[dict]:
        async def check() -> list[dict] | None:
            pods = self.pods(app)
            fresh = [p for p in pods if p["metadata"]["uid"] not in old_uids and p["spec"].get("schedulingGates")
                     and not p["spec"].get("nodeName")]
            return fresh if len(fresh) == count == len(pods) else None
        return await wait_for(check, timeout=30, what=f"{app} recreated whole and gated")


def cluster(tmp_path, *, nodes: int, **controller: Any) -> contextlib.AbstractAsyncContextManager[Cluster]:
    return job_cluster(tmp_path, Cluster, nodes=nodes, gpus_per_node=8, time_scale=TIME_SCALE, **controller)


async def test_a_high_priority_gang_preempts_two_low_priority_gangs_whole_and_takes_their_room(tmp_path):
    async with cluster(tmp_path, nodes=3) as c:
        await c.priority_class("low", 10)
        await c.priority_class("high", 1000)
        await c.job(gang_job("keep", 1, 8, "high"))  # as high as the preemptor: never a victim
        await c.running("keep", 1)
        await c.job(gang_job("low-a", 2, 4, "low"))
        await c.running("low-a", 2)
        await c.job(gang_job("low-b", 2, 4, "low"))
        low = (await c.running("low-b", 2)) + c.pods("low-a")
        victims_nodes = {p["spec"]["nodeName"] for p in low}
        assert len(victims_nodes) == 2  # the cluster is full: 24 of 24 GPUs

        await c.job(gang_job("urgent", 2, 8, "high"))
        urgent = await c.running("urgent", 2)

        assert {p["spec"]["nodeName"] for p in urgent} == victims_nodes  # pinned into the freed room
        assert all(decision(p) is not None and PREEMPTION_ANNOTATION in p["metadata"]["annotations"]
                   for p in urgent)
        old = {p["metadata"]["uid"] for p in low}
        await c.gated("low-a", 2, old)  # recreated by their Jobs, waiting whole
        await c.gated("low-b", 2, old)
        await c.running("keep", 1)
        await wait_quiet(c.sim)
        assert_every_gang_whole_or_waiting(await c.env.pods())
        events = await list_events(c.env.core)
        preempted = {e["involvedObject"]["uid"] for e in events if e["reason"] == "GangPreempted"}
        assert preempted == old
        assert any(e["reason"] == "Preempting" and "urgent" in e["involvedObject"]["name"] for e in events)
        controller = c.env.controllers[0][0]
        assert controller.metrics.preemptions._value.get() == 1


async def test_a_gang_whose_priority_class_says_never_waits_instead(tmp_path):
    async with cluster(tmp_path, nodes=1) as c:
        await c.priority_class("low", 10)
        await c.priority_class("polite", 1000, policy="Never")
        await c.job(gang_job("low-a", 2, 4, "low"))
        low = await c.running("low-a", 2)
        await c.job(gang_job("polite", 1, 8, "polite"))

        async def said_why() -> bool:
            events = await list_events(c.env.core)
            return any("preemptionPolicy is Never" in e.get("message", "") for e in events)

        await wait_for(said_why, what="the polite gang saying why it preempts nothing")
        assert {p["metadata"]["uid"] for p in await c.running("low-a", 2)} == {p["metadata"]["uid"] for p in low}


async def test_preemption_off_evicts_nothing(tmp_path):
    async with cluster(tmp_path, nodes=1, preemption="off") as c:
        await c.priority_class("low", 10)
        await c.priority_class("high", 1000)
        await c.job(gang_job("low-a", 1, 8, "low"))
        low = await c.running("low-a", 1)
        await c.job(gang_job("urgent", 1, 8, "high"))

        async def unschedulable() -> bool:
            return any(e["reason"] == "GangUnschedulable" for e in await list_events(c.env.core))

        await wait_for(unschedulable, what="the urgent gang reported unschedulable")
        assert [p["metadata"]["uid"] for p in await c.running("low-a", 1)] == [low[0]["metadata"]["uid"]]


async def test_a_budget_someone_else_made_is_honoured_and_nothing_is_evicted(tmp_path):
    async with cluster(tmp_path, nodes=1) as c:
        await c.priority_class("low", 10)
        await c.priority_class("high", 1000)
        await c.job(gang_job("low-a", 2, 4, "low"))
        low = await c.running("low-a", 2)
        await c.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "team-budget"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "low-a"}}}})
        await c.job(gang_job("urgent", 1, 8, "high"))

        async def blocked() -> list[dict]:
            return [e for e in await list_events(c.env.core) if e["reason"] == "PreemptionBlocked"]

        [event, *_] = await wait_for(blocked, what="the urgent gang told a budget refuses")
        assert "team-budget" in event["message"] and "default/low-a" in event["message"]
        assert {p["metadata"]["uid"] for p in await c.running("low-a", 2)} == {p["metadata"]["uid"] for p in low}
        assert not any(p["spec"].get("nodeName") for p in c.pods("urgent"))
