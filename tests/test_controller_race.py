"""The race between ungating and binding, end to end on kubesim with the real webhook.

The scheduler is off so that the test decides who binds first: an ordinary pod that is
already schedulable must never be able to take the room a released gang was planned into.
"""

from __future__ import annotations

from ganggate.kube.calls import call_json

from tests.controller_support import create_pods, e2e_cluster, gang_pod, is_gated, list_events, wait_for


async def bind(env, name: str, node: str) -> None:
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    await call_json(env.core.create_namespaced_pod_binding, name, "default", body)


async def event_messages(env, reason: str) -> list[str]:
    return [e["message"] for e in await list_events(env.core) if e.get("reason") == reason]


async def test_a_gang_is_not_released_into_room_a_pending_pod_could_take(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8, scheduler=False, kubelet=False) as env:
        await create_pods(env.core, [gang_pod("web", None, None, gpus=4)])  # ordinary, pending
        _, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod(f"job-{i}", "job", 2, gpus=4) for i in range(2)])

        waits = await wait_for(lambda: event_messages(env, "GangWaiting"), what="GangWaiting")
        assert any("default/web" in m and "partly bound" in m for m in waits)
        assert all(is_gated(p) for p in await env.pods() if p["metadata"]["name"].startswith("job-"))

        # The ordinary pod wins the node: the gang, which no longer fits, stays whole and gated.
        await bind(env, "web", "node-0")
        await wait_for(lambda: event_messages(env, "GangUnschedulable"), what="GangUnschedulable")
        assert all(is_gated(p) for p in await env.pods() if p["metadata"]["name"].startswith("job-"))

        # The room comes back: now the whole gang is released, and both pods can be bound. (No kubelet
        # here to finish a graceful deletion: the pod is removed at once, as with --force --grace-period=0.)
        await call_json(env.core.delete_namespaced_pod, "web", "default", grace_period_seconds=0)

        async def released():
            pods = [p for p in await env.pods() if p["metadata"]["name"].startswith("job-")]
            return pods if pods and not any(is_gated(p) for p in pods) else None

        for pod in await wait_for(released, what="gang released"):
            await bind(env, pod["metadata"]["name"], "node-0")
        await env.check(patches)
