"""--node-lost-after end to end (issue #19): a gang with a member on a node whose Ready condition
went Unknown is restarted whole once the flag's seconds have passed, on kubesim with the real
webhook, controller, Job controller and node lifecycle controller (whose taint eviction would
wait for the pods' 300 s unreachable toleration)."""

from __future__ import annotations

from tests.controller_support import job_cluster, wait_for
from tests.test_gang_lifecycle_e2e import Env, gang_job


async def test_a_gang_with_a_member_on_a_lost_node_is_restarted_whole_on_the_ready_nodes(tmp_path):
    async with job_cluster(tmp_path, Env, nodes=3, gpus_per_node=4, time_scale=1.0, node_lost_after_seconds=1.0) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 2, 4))
        first = await c.running("train", 2)
        lost = first[0]["spec"]["nodeName"]
        await c.sim.set_node_ready(lost, "Unknown")

        async def broken() -> list[dict] | None:
            return await c.events("GangBroken") or None  # on the pod (the Job hears it too)
        [event] = await wait_for(broken, what="a GangBroken event for the lost node")
        assert "(NodeLost: its node has not been Ready for longer than --node-lost-after)" in event["message"]
        assert "restarting: deleting 2 pods" in event["message"]
        old = {p["metadata"]["uid"] for p in first}

        async def again() -> list[dict] | None:
            pods = [p for p in c.pods("train") if p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp") and p["metadata"]["uid"] not in old]
            return pods if len(pods) == 2 else None
        pods = await wait_for(again, what="the gang running again, whole, on the ready nodes")
        assert lost not in {p["spec"]["nodeName"] for p in pods}
        # The pod on the lost node was marked before its delete, as Kubernetes' own disruptions are.
        stuck = c.sim.store.get("pods", "default", first[0]["metadata"]["name"])
        assert stuck is not None and stuck["metadata"].get("deletionTimestamp")
        assert any(x.get("type") == "DisruptionTarget" and x.get("reason") == "DeletionByGanggate"
                   for x in stuck["status"].get("conditions") or [])
