"""End to end: a gang larger than the cluster gets a GangCannotFit Event and says so in
`ganggate status`; a node that joins makes room for it, and it goes."""

from __future__ import annotations

from ganggate.controller.status.tables import status_text
from tests.controller_support import create_pods, e2e_cluster, gang_pod, list_events, wait_for


async def test_a_gang_larger_than_the_cluster_says_it_can_never_fit_until_a_node_joins(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        await env.start_controller()
        await create_pods(env.core, [gang_pod(f"big-{i}", "big", 3, gpus=8) for i in range(3)])

        async def cannot_fit():
            events = [e for e in await list_events(env.core) if e["reason"] == "GangCannotFit"]
            return events if len(events) == 3 else None

        events = await wait_for(cannot_fit, what="a GangCannotFit Event on each pod")
        assert {e["type"] for e in events} == {"Warning"}
        assert events[0]["message"].startswith(
            "needs 3 pods of 8 GPUs each, but the 2 nodes it may use hold only 2 even when empty: "
            "it can never fit until nodes are added")
        text = await status_text(env.api)
        (row,) = [line for line in text.splitlines() if line.startswith("default/big")]
        assert row.split()[1] == "cannot-fit" and "GangCannotFit: needs 3 pods of 8 GPUs each" in row

        await env.sim.add_node("node-9", gpus=8)

        async def bound():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("big-")]
            return pods if all(p["spec"].get("nodeName") for p in pods) else None

        await wait_for(bound, what="the gang bound once a node joined")
