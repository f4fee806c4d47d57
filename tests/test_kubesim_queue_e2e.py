"""kubesim's scheduler competes as kube-scheduler 1.35 does, end to end on 2 nodes x 8 GPUs with
the default gates (pods over HTTP; no timed assertions: each wait polls with a generous deadline,
and bench/bench_queue.py measures how fast):

- a failed pod whose nomination cannot be honoured loses it, and an equal-priority pod then binds
  into that room;
- a pod that failed many times binds when room frees, before its backoff ends, when nothing
  else is queued (SchedulerPopFromBackoffQ);
- removing a nomination retries the pods it kept out, with no other event.
"""

from __future__ import annotations

import contextlib

import aiohttp

from ganggate.sim import Simulator
from tests.test_kubesim_scheduler_support import Api, bound_node, pod_manifest, wait_for

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@contextlib.asynccontextmanager
async def cluster(**kwargs):
    async with Simulator(nodes=2, gpus_per_node=8, kubelet=False, **kwargs) as sim, aiohttp.ClientSession() as session:
        yield sim, Api(session, sim.url), sim.components["Scheduler"]


async def nominate(api: Api, name: str, node: str | None) -> None:
    await api.patch(f"/api/v1/namespaces/default/pods/{name}/status", {"status": {"nominatedNodeName": node}}, MERGE_PATCH)


async def force_delete(api: Api, name: str) -> None:
    """Delete at once (no kubelet here to finish a graceful deletion)."""
    async with api.session.delete(f"{api.url}/api/v1/namespaces/default/pods/{name}",
                                  json={"gracePeriodSeconds": 0}) as response:
        assert response.status in (200, 202), await response.text()


async def fill(api: Api) -> None:
    """node-0: 6 of 8 GPUs used; node-1: full."""
    await api.create_pod(pod_manifest("used", gpus=6, node_name="node-0"))
    await api.create_pod(pod_manifest("full", gpus=8, node_name="node-1"))


async def test_a_failed_nominated_pod_loses_its_nomination_and_an_equal_priority_pod_binds_into_the_room():
    async with cluster() as (sim, api, scheduler):
        await fill(api)
        await api.create_pod(pod_manifest("nominated", gpus=4, gated=True))
        await nominate(api, "nominated", "node-0")
        await api.patch("/api/v1/namespaces/default/pods/nominated", [{"op": "remove", "path": "/spec/schedulingGates"}],
                        JSON_PATCH)

        async def cleared():
            pod = await api.pod("nominated")
            return pod["metadata"]["resourceVersion"] if not pod["status"].get("nominatedNodeName") else None

        await wait_for(cleared, "the failed pod's nomination to be cleared")
        assert scheduler.nominated.get("default/nominated") is None
        await api.create_pod(pod_manifest("next", gpus=2))
        assert await bound_node(api, "next") == "node-0"
        assert not (await api.pod("nominated"))["spec"].get("nodeName")


async def test_a_pod_that_failed_many_times_binds_before_its_backoff_ends_when_room_frees():
    async with cluster() as (sim, api, scheduler):
        await api.create_pod(pod_manifest("blocker", gpus=8, node_name="node-0"))
        await api.create_pod(pod_manifest("full", gpus=8, node_name="node-1"))
        await api.create_pod(pod_manifest("waiter", gpus=4))
        key = "default/waiter"
        for attempt in range(1, 5):  # each deleted assigned pod retries it (NodeResourcesFit), and it fails again
            await wait_for(lambda attempt=attempt: _async(key in scheduler.queue.unschedulable
                                                          and scheduler.queue.pods[key].attempts >= attempt),
                           f"attempt {attempt}")
            await api.create_pod(pod_manifest(f"churn-{attempt}", cpu="1", node_name="node-0"))
            await force_delete(api, f"churn-{attempt}")
        await wait_for(lambda: _async(key in scheduler.queue.unschedulable and scheduler.queue.pods[key].attempts >= 5),
                       "the fifth failure")
        queued = scheduler.queue.pods[key]
        backoff_ends = scheduler.queue.backoff_until(queued)  # 1 s doubled per attempt: 10 s (the cap)
        await force_delete(api, "blocker")
        assert await bound_node(api, "waiter") == "node-0"
        bound_at = scheduler.queue._now()
        assert bound_at < backoff_ends, "popped from backoffQ, not after its backoff"


async def test_removing_a_nomination_retries_the_pods_it_kept_out_with_no_other_event():
    async with cluster() as (sim, api, scheduler):
        await fill(api)
        await api.create_pod(pod_manifest("holder", gpus=2, gated=True))  # stays gated: never scheduled
        await nominate(api, "holder", "node-0")
        await wait_for(lambda: _async(scheduler.nominated.get("default/holder") is not None), "the nomination seen")
        await api.create_pod(pod_manifest("small", gpus=2))
        await wait_for(lambda: _async("default/small" in scheduler.queue.unschedulable), "small kept out")
        await nominate(api, "holder", None)

        def seen_cleared():
            holder = scheduler._pods.store.get("default/holder") or {}
            return not holder.get("status", {}).get("nominatedNodeName")

        await wait_for(lambda: _async(seen_cleared()), "the scheduler to see the nomination removed")
        # The same informer event moved it (updatePodInSchedulingQueue), not a later flush.
        assert "default/small" not in scheduler.queue.unschedulable
        assert await bound_node(api, "small") == "node-0"


async def _async(value):
    return value
