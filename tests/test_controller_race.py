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

        async def waits_for_web():  # (an earlier GangWaiting may say only "1 of 2 pods exist")
            return [m for m in await event_messages(env, "GangWaiting") if "default/web" in m and "partly bound" in m]

        assert await wait_for(waits_for_web, what="GangWaiting naming default/web")
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


async def test_room_taken_between_the_plan_and_the_nominations_is_seen_before_any_gate_goes(tmp_path):
    """A pod bound where the plan counted on room, unseen when the gang was planned (as when the
    scheduler binds faster than the controller's watch shows it): the release sees it once the
    watch shows the nominations, removes no gate, and the gang is planned again, whole, elsewhere."""
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8, scheduler=False, kubelet=False) as env:
        controller, patches = await env.start_controller()
        real_release = controller.releaser.release
        taken: list[str] = []

        async def release_after_a_bind(request):
            if not taken:  # the first plan: fill the node of its first member behind the controller's back
                node = next(n for n in request.placement.values() if n)
                taken.append(node)
                squatter = gang_pod("squatter", None, None, gpus=8)
                squatter["spec"]["nodeName"] = node
                await create_pods(env.core, [squatter])
            return await real_release(request)

        controller.releaser.release = release_after_a_bind
        await create_pods(env.core, [gang_pod(f"job-{i}", "job", 2, gpus=4) for i in range(2)])

        async def released():
            pods = [p for p in await env.pods() if p["metadata"]["name"].startswith("job-")]
            return pods if len(pods) == 2 and not any(is_gated(p) for p in pods) else None

        pods = await wait_for(released, what="gang released")
        other = ({"node-0", "node-1"} - set(taken)).pop()
        assert {p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in pods} == {other}
        assert controller.metrics.plans_lost_before_release._value.get() == 1
        assert not any(p["status"].get("nominatedNodeName") == taken[0] for p in pods)
        for pod in pods:
            await bind(env, pod["metadata"]["name"], other)
        await env.check(patches)
