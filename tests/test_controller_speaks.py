"""What the controller tells its users: the node in each GangReleased Event, plurals, operator gauges."""

from __future__ import annotations

import aiohttp

from tests.controller_support import create_pods, e2e_cluster, gang_pod, list_events, wait_for


async def bound(env, prefix, count):
    pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith(prefix + "-")]
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


async def released_events(env, count):
    events = [e for e in await list_events(env.core) if e["reason"] == "GangReleased"]
    return events if len(events) >= count else None


async def test_each_gang_released_event_names_the_node_of_its_own_pod(tmp_path):
    """A gang spread over two nodes: every pod's Event names the node that pod was pinned to."""
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=4) as env:
        _, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod(f"wide-{i}", "wide", 2, gpus=4) for i in range(2)])
        pods = await wait_for(lambda: bound(env, "wide", 2), what="gang bound")
        node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assert len(set(node_of.values())) == 2
        events = await wait_for(lambda: released_events(env, 2), what="two GangReleased events")
        for event in events:
            pod_name = event["involvedObject"]["name"]
            others = set(node_of.values()) - {node_of[pod_name]}
            assert f"onto node {node_of[pod_name]}" in event["message"], event["message"]
            assert not any(f"node {other}" in event["message"] for other in others), event["message"]
        await env.check(patches)


async def test_a_gang_of_one_is_one_pod_not_one_pods(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        _, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod("solo-0", "solo", 1, gpus=1)])
        await wait_for(lambda: bound(env, "solo", 1), what="gang of one bound")
        (event,) = await wait_for(lambda: released_events(env, 1), what="GangReleased")
        assert "1 pod " in event["message"] and "1 pods" not in event["message"], event["message"]
        await env.check(patches)
