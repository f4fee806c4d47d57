"""The controller end to end on kubesim with the real webhook: what a user of the cluster sees.

Every test ends with the same checker (tests/controller_support.assert_gangs_whole): no gang
partly bound, no pod bound while gated, no pod released by two PATCHes.
"""

from __future__ import annotations

from ganggate.sim.clock import ManualClock
from tests.controller_support import (
    create_pods,
    decision,
    e2e_cluster,
    gang_pod,
    is_gated,
    list_events,
    node_gpus_free,
    wait_for,
)


def names(pods):
    return sorted(p["metadata"]["name"] for p in pods)


async def events_for(env, reason, namespace="default"):
    return [e for e in await list_events(env.core, namespace) if e.get("reason") == reason]


async def test_a_100_pod_gang_waits_for_the_100th_gpu_then_starts_whole(tmp_path):
    """The seed's case: 99 free GPUs hold no GPU for a 100-GPU gang; one more node and all 100 run."""
    async with e2e_cluster(tmp_path, nodes=11, gpus_per_node=9) as env:
        controller, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod(f"w-{i:03d}", "big", 100) for i in range(100)])
        # 99 GPUs in all: the gang can never fit this cluster as it is, and is told so.
        await wait_for(lambda: events_for(env, "GangCannotFit"), what="GangCannotFit")
        # Ordinary pods keep being scheduled while the gang waits.
        await create_pods(env.core, [gang_pod("web", None, None, gpus=0)])

        async def web_bound():
            return [p for p in await env.pods() if p["metadata"]["name"] == "web" and p["spec"].get("nodeName")]

        await wait_for(web_bound, what="ordinary pod bound")
        pods = await env.pods("default")
        gang = [p for p in pods if p["metadata"]["name"].startswith("w-")]
        assert len(gang) == 100 and all(is_gated(p) for p in gang)
        assert not any(p["spec"].get("nodeName") or decision(p) for p in gang)
        assert sum((await node_gpus_free(env)).values()) == 99  # no GPU held by the waiting gang
        message = (await events_for(env, "GangCannotFit"))[0]["message"]
        assert message.startswith("needs 100 pods of 1 GPU each, but the 11 nodes it may use hold only 99 even when "
                                  "empty: it can never fit until nodes are added")

        env.log.mark("node added")
        await env.sim.add_node("gpu-extra", gpus=1)

        async def all_bound():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("w-")]
            return pods if all(p["spec"].get("nodeName") for p in pods) else None

        gang = await wait_for(all_bound, what="all 100 bound")
        decisions = [decision(p) for p in gang]
        assert len({d["id"] for d in decisions}) == 1 and {d["pods"] for d in decisions} == {100}
        assert all(d["gang"] == "default/big" and d["node"] == p["spec"]["nodeName"]
                   for d, p in zip(decisions, gang, strict=True))
        # No pod was bound before the node that completes the gang existed (as the watch saw it).
        added = env.log.marks["node added"]

        async def watch_saw_all_bound():
            records = [r for k, r in env.log.records.items() if k.startswith("default/w-")]
            return records if len(records) == 100 and all(r.seq_bound is not None for r in records) else None

        records = await wait_for(watch_saw_all_bound, what="the test's watch sees all bindings")
        assert all(r.seq_bound > added for r in records)
        assert sum(patches.applied.values()) == 100
        await env.check(patches)


async def test_two_gangs_that_fit_only_one_at_a_time_run_one_after_the_other(tmp_path):
    clock = ManualClock()
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8, clock=clock) as env:
        _, patches = await env.start_controller()
        pods = [gang_pod(f"{g}-{i}", g, 2, gpus=4, run_seconds=60) for g in ("a", "b") for i in range(2)]
        await create_pods(env.core, pods)

        async def one_gang_running():
            pods = await env.pods("default")
            running = {p["metadata"]["name"][0] for p in pods if (p.get("status") or {}).get("phase") == "Running"}
            return running if len(running) == 1 and sum(
                1 for p in pods if (p.get("status") or {}).get("phase") == "Running") == 2 else None

        first = (await wait_for(one_gang_running, what="one gang running")).pop()
        other = "b" if first == "a" else "a"
        await wait_for(lambda: events_for(env, "GangUnschedulable"), what="the other gang told why it waits")
        pods = await env.pods("default")
        assert all(is_gated(p) for p in pods if p["metadata"]["name"].startswith(other))
        await env.check(patches)

        clock.advance_to(61)  # the first gang finishes

        async def other_running():
            pods = await env.pods("default")
            return all((p.get("status") or {}).get("phase") == "Running"
                       for p in pods if p["metadata"]["name"].startswith(other))

        await wait_for(other_running, what="the second gang running")
        pods = await env.pods("default")
        assert all((p.get("status") or {}).get("phase") == "Succeeded"
                   for p in pods if p["metadata"]["name"].startswith(first))
        await env.check(patches)


async def test_heterogeneous_gang_and_a_min_available_gang(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        _, patches = await env.start_controller()
        launcher = gang_pod("mpi-launcher", "mpi", 5, gpus=0, cpu="2")
        workers = [gang_pod(f"mpi-worker-{i}", "mpi", 5, gpus=2) for i in range(4)]
        await create_pods(env.core, [launcher] + workers)

        async def mpi_bound():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("mpi-")]
            return pods if len(pods) == 5 and all(p["spec"].get("nodeName") for p in pods) else None

        mpi = await wait_for(mpi_bound, what="heterogeneous gang bound")
        assert len({decision(p)["id"] for p in mpi}) == 1
        # 8 GPUs left: a gang of 4 x 4 GPUs that may start with 2 starts with 2.
        await create_pods(env.core, [gang_pod(f"elastic-{i}", "elastic", 4, gpus=4, min_available=2)
                                     for i in range(4)])

        async def elastic_started():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("elastic-")]
            bound = [p for p in pods if p["spec"].get("nodeName")]
            return pods if len(bound) == 2 else None

        elastic = await wait_for(elastic_started, what="min-available gang started with 2")
        first_ids = {decision(p)["id"] for p in elastic if not is_gated(p)}
        assert len(first_ids) == 1 and sum(1 for p in elastic if is_gated(p)) == 2
        await env.check(patches)

        # The heterogeneous gang ends: the extras are released as room appears.
        for pod in mpi:
            await env.core.delete_namespaced_pod(pod["metadata"]["name"], "default", grace_period_seconds=0)

        async def elastic_all_bound():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("elastic-")]
            return pods if all(p["spec"].get("nodeName") for p in pods) else None

        elastic = await wait_for(elastic_all_bound, what="extras released one by one")
        ids = {p["metadata"]["name"]: decision(p)["id"] for p in elastic}
        assert sum(1 for i in ids.values() if i in first_ids) == 2  # the extras came by later decisions

        await env.check(patches)


async def test_events_say_why_a_gang_waits_conflicts_and_is_released(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        _, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod("half-0", "half", 3)])
        await create_pods(env.core, [gang_pod("mix-0", "mix", 2), gang_pod("mix-1", "mix", 3)])
        await create_pods(env.core, [gang_pod(f"ok-{i}", "ok", 2) for i in range(2)])

        async def all_events():
            got = {(e["reason"], e["involvedObject"]["name"]) for e in await list_events(env.core)}
            want = {("GangWaiting", "half-0"), ("GangConflict", "mix-0"), ("GangConflict", "mix-1"),
                    ("GangReleased", "ok-0")}
            return want <= got

        await wait_for(all_events, what="events for every gang")
        events = {(e["reason"], e["involvedObject"]["name"]): e for e in await list_events(env.core)}
        waiting = events[("GangWaiting", "half-0")]
        assert waiting["message"] == "1 of 3 pods exist" and waiting["type"] == "Normal"
        conflict = events[("GangConflict", "mix-0")]
        assert conflict["type"] == "Warning" and "scheduling.k8s.io/group-pod-num" in conflict["message"]
        assert "mix-0" in conflict["message"] and "mix-1" in conflict["message"]
        released = events[("GangReleased", "ok-0")]
        assert ("GangReleased", "ok-1") not in events  # the gang is told once, on its first pod
        assert "default/ok" in released["message"] and released["source"]["component"] == "ganggate-controller"
        assert all(is_gated(p) for p in await env.pods("default") if p["metadata"]["name"].startswith("mix-"))
        # The waiting gang completes: its pods run, and it is told once per pod, not per round.
        await create_pods(env.core, [gang_pod(f"half-{i}", "half", 3) for i in (1, 2)])

        async def half_bound():
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("half-")]
            return len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)

        await wait_for(half_bound, what="completed gang bound")
        assert all(e.get("count", 1) <= 2 for e in await list_events(env.core) if e["reason"] == "GangWaiting")
        await env.check(patches)


async def test_released_pods_not_bound_in_time_are_recreated_only_if_owned(tmp_path):
    """--on-bind-timeout=recreate deletes a released, unbound pod only when a controller owns it.

    No Job controller or garbage collector here: the owning Job is named but not created (the
    garbage collector would delete its orphaned pod first)."""
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8, scheduler=False, controllers=False) as env:
        _, patches = await env.start_controller(on_bind_timeout="recreate", bind_timeout_seconds=0.5)
        await create_pods(env.core, [gang_pod("owned", "job", 2, owner="trainer"), gang_pod("bare", "job", 2)])

        async def owned_gone():
            return [p["metadata"]["name"] for p in await env.pods("default")] == ["bare"]

        await wait_for(owned_gone, what="the owned pod deleted")
        timeouts = {e["involvedObject"]["name"]: e for e in await events_for(env, "GangBindTimeout")}
        assert "deleting it so its controller recreates it" in timeouts["owned"]["message"]
        assert "not deleted: it has no owning controller" in timeouts["bare"]["message"]
        assert timeouts["bare"]["type"] == "Warning"
        await env.check(patches)


async def test_free_placement_and_the_count_baseline_leave_node_choice_to_the_scheduler(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        controller, patches = await env.start_controller(placement="free")
        await create_pods(env.core, [gang_pod(f"free-{i}", "free", 2, gpus=2) for i in range(2)])

        async def gang_bound(prefix, count):
            pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith(prefix)]
            return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None

        for pod in await wait_for(lambda: gang_bound("free-", 2), what="free-placement gang bound"):
            assert "kubernetes.io/hostname" not in (pod["spec"].get("nodeSelector") or {})
            assert decision(pod)["node"] in ("node-0", "node-1")  # the plan is still recorded
        await env.stop_controller(controller)

        _, count_patches = await env.start_controller(policy="count")
        await create_pods(env.core, [gang_pod(f"count-{i}", "count", 3, gpus=2) for i in range(3)])
        for pod in await wait_for(lambda: gang_bound("count-", 3), what="count-policy gang bound"):
            assert decision(pod)["node"] is None and not pod["spec"].get("nodeSelector")
        await env.check(patches, count_patches)
