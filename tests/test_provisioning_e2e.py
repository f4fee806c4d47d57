"""`--autoscaling provisioning-request`: a gang larger than the cluster asks cluster-autoscaler
(kubesim's stand-in) for room with one ProvisioningRequest, starts whole once the nodes join, and
the request is removed; without it the gang waits and nobody is asked."""

from __future__ import annotations

from ganggate.core.policy.provisioning import ATOMIC, CONSUME_ANNOTATION
from ganggate.sim.autoscaler.nodegroups import parse_node_group
from tests.controller_support import (
    assert_gangs_whole, create_pods, decision, e2e_cluster, gang_pod, list_events, wait_for,
)

PROVREQS = ("autoscaling.x-k8s.io", "v1", "default", "provisioningrequests")


def _cluster(tmp_path, **options):
    groups = [parse_node_group("gpu:0:4,gpus=8,delay=0.5")]
    settings = {"scan_seconds": 0.2, "unneeded_seconds": 3600, **options}
    return e2e_cluster(tmp_path, nodes=1, gpus_per_node=8, node_groups=groups, autoscaler_options=settings)


async def _requests(env) -> list[dict]:
    return list(env.sim.store.list("provisioningrequests.autoscaling.x-k8s.io", "default"))


async def test_a_gang_larger_than_the_cluster_gets_nodes_and_starts_whole(tmp_path):
    async with _cluster(tmp_path) as env:
        await env.start_controller(autoscaling="provisioning-request")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])

        async def bound():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("w-")]
            return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

        requests = await wait_for(lambda: _requests(env), what="a ProvisioningRequest")
        assert [r["metadata"]["name"] for r in requests] == ["ganggate-train"]
        spec = requests[0]["spec"]
        assert spec["provisioningClassName"] == ATOMIC and spec["podSets"][0]["count"] == 3
        pods = await wait_for(bound, what="the gang bound on the new nodes")
        assert_gangs_whole(pods, env.log)
        assert len({p["spec"]["nodeName"] for p in pods}) == 3  # node-0 and two nodes of the group
        assert all(p["metadata"]["annotations"][CONSUME_ANNOTATION] == "ganggate-train" for p in pods)
        assert len({decision(p)["id"] for p in pods}) == 1  # one decision: released together
        await wait_for(lambda: _none_left(env), what="the request deleted")
        reasons = {e["reason"] for e in await list_events(env.core)}
        assert {"ProvisioningRequested", "ProvisioningProvisioned"} <= reasons


async def _none_left(env) -> bool:
    return not await _requests(env) and not list(env.sim.store.list("podtemplates", "default"))


async def test_without_autoscaling_nobody_is_asked(tmp_path):
    async with _cluster(tmp_path) as env:
        await env.start_controller()
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])

        async def unschedulable():
            return [e for e in await list_events(env.core) if e.get("reason") in ("GangUnschedulable", "GangCannotFit")]

        await wait_for(unschedulable, what="the gang waits")
        assert await _requests(env) == []
        assert len(list(env.sim.store.list("nodes"))) == 1  # gated pods are invisible to the autoscaler


async def test_a_restarted_controller_keeps_the_one_request(tmp_path):
    # the request stays pending: the group cannot hold the gang, so no release ends the test early
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8, node_groups=[parse_node_group("gpu:0:1,gpus=8,delay=0.5")],
                           autoscaler_options={"scan_seconds": 0.2}) as env:
        first, _ = await env.start_controller(autoscaling="provisioning-request")
        await create_pods(env.core, [gang_pod(f"w-{i}", "big", 3, gpus=8) for i in range(3)])
        await wait_for(lambda: _requests(env), what="a ProvisioningRequest")
        await env.stop_controller(first)
        await env.start_controller(autoscaling="provisioning-request")

        async def told_twice():
            events = [e for e in await list_events(env.core) if e.get("reason") == "ProvisioningRequested"]
            return events if sum(e.get("count", 1) for e in events) >= 2 or len(events) >= 2 else None

        events = await wait_for(told_twice, what="the second controller finds the request")
        assert any("made before" in e["message"] for e in events)
        assert [r["metadata"]["name"] for r in await _requests(env)] == ["ganggate-big"]
