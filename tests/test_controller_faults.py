"""The controller under failure, end to end on kubesim: crashes mid-release, cut and compacted
watches, 500/429 answers, two replicas; and its metrics/health endpoints and commands.

Each pod must be released by exactly one applied PATCH, whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp

from tests.controller_support import create_pods, decision, e2e_cluster, gang_pod, is_gated, wait_for

GANGGATE = str(Path(sys.executable).with_name("ganggate"))


def gang(name, num, gpus=1, **kwargs):
    return [gang_pod(f"{name}-{i}", name, num, gpus=gpus, **kwargs) for i in range(num)]


async def bound(env, prefix, count):
    pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith(prefix + "-")]
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


async def test_a_release_cut_short_by_a_crash_is_finished_by_the_next_controller(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        first, first_patches = await env.start_controller()
        task = env.controllers[0][1]
        calls = 0

        async def crash_after_three(_key):
            nonlocal calls
            calls += 1
            if calls > 3:
                # Let the three patches already sent land, then die before sending more.
                await wait_for(lambda: _released_count(env, 3), what="three pods released")
                task.cancel()
                await asyncio.sleep(3600)

        first.releaser.before_apply = crash_after_three
        await create_pods(env.core, gang("job", 6, gpus=2))
        await wait_for(lambda: _done(task), what="first controller stopped")
        pods = await env.pods("default")
        released = [p for p in pods if not is_gated(p)]
        assert len(released) == 3 and sum(1 for p in pods if is_gated(p)) == 3
        (decision_id,) = {decision(p)["id"] for p in released}
        await env.stop_controller(first)

        _, second_patches = await env.start_controller()
        pods = await wait_for(lambda: bound(env, "job", 6), what="the whole gang bound")
        assert {decision(p)["id"] for p in pods} == {decision_id}
        assert {decision(p)["pods"] for p in pods} == {6}
        assert sum(first_patches.applied.values()) == 3 and sum(second_patches.applied.values()) == 3
        await env.check(first_patches, second_patches)


async def _released_count(env, count):
    return sum(1 for r in env.log.records.values() if r.seq_ungated is not None) >= count


async def _done(task):
    return task.done()


async def test_cut_watches_compaction_500_and_429_lose_or_double_nothing(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        controller, patches = await env.start_controller()
        await wait_for(lambda: _true(controller.synced), what="controller synced")
        env.sim.faults.fail(verb="patch", resource="pods", status=500, count=3)
        env.sim.faults.fail(verb="patch", resource="pods", status=429, count=2, retry_after=1)
        await create_pods(env.core, gang("a", 4))
        await wait_for(lambda: bound(env, "a", 4), what="gang a bound despite 500 and 429")
        metrics = controller.metrics.render().decode()
        assert 'ganggate_api_errors_total{code="500",verb="patch"} 3.0' in metrics
        assert 'ganggate_api_errors_total{code="429",verb="patch"} 2.0' in metrics

        env.sim.faults.cut_watches()
        await create_pods(env.core, gang("b", 4))
        await wait_for(lambda: bound(env, "b", 4), what="gang b bound after the watches were cut")

        # Watches come back slowly; meanwhile gang c is created and history compacted, so the
        # watch resumes from a resourceVersion that is gone (410) and must list again.
        relists = controller.pods.relists
        env.sim.faults.latency(1.5, verb="watch", resource="pods")
        env.sim.faults.cut_watches()
        await create_pods(env.core, gang("c", 4, gpus=2))
        env.sim.faults.compact()
        env.sim.faults.clear()
        env.sim.faults.fail(verb="list", resource="pods", status=429, count=1, retry_after=0)
        await wait_for(lambda: bound(env, "c", 4), what="gang c bound after history was compacted")
        assert controller.pods.relists > relists  # the 410 made it list again
        assert all(n == 1 for n in patches.applied.values()) and len(patches.applied) == 12
        await env.check(patches)


async def _true(value):
    return value


async def test_two_replicas_release_each_gang_once_and_fail_over(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        settings = dict(leader_election=True, lease_duration_seconds=3.0, renew_seconds=0.3)
        a, a_patches = await env.start_controller(identity="replica-a", **settings)
        b, b_patches = await env.start_controller(identity="replica-b", **settings)
        leader = await wait_for(lambda: _leader(a, b), what="a leader")
        await create_pods(env.core, gang("one", 4) + gang("two", 3, gpus=2))
        await wait_for(lambda: bound(env, "one", 4), what="gang one bound")
        await wait_for(lambda: bound(env, "two", 3), what="gang two bound")
        follower = b if leader is a else a
        assert not follower.is_leader

        await env.stop_controller(leader)  # gives the lease up
        await wait_for(lambda: _true(follower.is_leader), what="the other replica takes over")
        await create_pods(env.core, gang("three", 3, gpus=2))
        await wait_for(lambda: bound(env, "three", 3), what="gang three bound by the new leader")
        from kubernetes_asyncio import client

        lease = await client.CoordinationV1Api(env.api).read_namespaced_lease("ganggate-controller", "ganggate-system")
        assert lease.spec.holder_identity == follower.identity and lease.spec.lease_transitions >= 1
        total = a_patches.applied + b_patches.applied
        assert len(total) == 10 and set(total.values()) == {1}
        await env.check(a_patches, b_patches)


async def _leader(a, b):
    leaders = [c for c in (a, b) if c.is_leader]
    assert len(leaders) <= 1, "two leaders at once"
    return leaders[0] if leaders else None


async def test_metrics_health_and_readiness_over_http(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        controller, patches = await env.start_controller(metrics_port=0)
        await create_pods(env.core, gang("m", 2))
        await wait_for(lambda: bound(env, "m", 2), what="gang bound")
        base = f"http://127.0.0.1:{controller.metrics_port}"

        async def scraped():
            async with aiohttp.ClientSession() as session:
                async with session.get(base + "/metrics") as resp:
                    text = await resp.text()
            return text if 'ganggate_gangs{state="running"} 1.0' in text else None

        text = await wait_for(scraped, what="gang counted as running")
        assert "ganggate_pods_released_total 2.0" in text
        assert 'ganggate_releases_total{kind="new"} 1.0' in text
        assert "ganggate_release_duration_seconds_count 1.0" in text
        async with aiohttp.ClientSession() as session:
            for path in ("/healthz", "/readyz"):
                async with session.get(base + path) as resp:
                    assert resp.status == 200, path
        await env.check(patches)


async def test_the_controller_and_status_commands(tmp_path):
    """`ganggate controller` as its own process releases a gang; `ganggate status` shows it."""
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        env_vars = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = await asyncio.create_subprocess_exec(
            GANGGATE, "controller", "--kubeconfig", env.sim.kubeconfig, "--no-leader-election",
            "--metrics-port", "0", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=env_vars)
        try:
            await create_pods(env.core, gang("cli", 2, gpus=4) + gang("wait", 3, gpus=8)[:2])
            await wait_for(lambda: bound(env, "cli", 2), timeout=60, what="gang released by the command")
        finally:
            proc.terminate()
            await proc.wait()
        status = await asyncio.create_subprocess_exec(
            GANGGATE, "status", "--kubeconfig", env.sim.kubeconfig, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env_vars)
        out, err = await status.communicate()
        assert status.returncode == 0, err.decode()
        lines = {line.split()[0]: line for line in out.decode().splitlines() if line.strip()}
        assert lines["default/cli"].split()[1:4] == ["running", "2/2", "8"]
        assert lines["default/wait"].split()[1:3] == ["incomplete", "2/3"]
        assert "GangWaiting: 2 of 3 pods exist" in lines["default/wait"]
        assert lines["node-0"].split()[2] == "8"
        await env.check()

        bad = await asyncio.create_subprocess_exec(
            GANGGATE, "controller", "--kubeconfig", env.sim.kubeconfig, "--max-in-flight", "0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await bad.communicate()
        assert bad.returncode == 2 and b"max_in_flight" in err


async def test_a_leader_that_cannot_renew_stops_deciding_until_it_holds_the_lease_again(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        controller, patches = await env.start_controller(identity="solo", leader_election=True,
                                                         lease_duration_seconds=1.5, renew_seconds=0.2)
        await wait_for(lambda: _true(controller.is_leader), what="leadership")
        env.sim.faults.fail(resource="leases", status=500, count=100000)
        await wait_for(lambda: _true(not controller.is_leader), what="leadership lost")
        rounds = controller.rounds
        await create_pods(env.core, gang("late", 2))
        await wait_for(lambda: _true(("default", "late") in controller.state.gangs
                                     and controller.state.gangs[("default", "late")].state == "waiting"),
                       what="the controller sees the complete gang")
        for _ in range(2):  # the decision loop has gone round with the gang in view
            seen = controller._last_loop
            await wait_for(lambda seen=seen: _true(controller._last_loop != seen), what="a loop iteration")
        assert controller.rounds == rounds
        assert all(is_gated(p) for p in await env.pods("default"))
        env.sim.faults.clear()
        await wait_for(lambda: bound(env, "late", 2), what="released once the lease is held again")
        await env.check(patches)


async def test_the_commands_refuse_a_missing_kubeconfig_clearly(tmp_path):
    for command in ("status", "controller"):
        proc = await asyncio.create_subprocess_exec(
            GANGGATE, command, "--kubeconfig", str(tmp_path / "missing"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        assert proc.returncode == 1 and b"error: kubeconfig " in err and b"missing does not exist" in err, (command, err)
        assert b"Traceback" not in err and b"current-context" not in err, (command, err)


async def test_the_commands_say_what_to_do_when_no_cluster_is_configured(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    for command in ("status", "controller"):
        proc = await asyncio.create_subprocess_exec(
            GANGGATE, command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        _, err = await proc.communicate()
        assert proc.returncode == 1, (command, err)
        assert err.decode().splitlines() == [
            "error: no cluster to talk to: pass --kubeconfig FILE, set KUBECONFIG, or run inside a cluster "
            "(`ganggate sim up --kubeconfig-out FILE` starts a local one)"], (command, err)


async def test_a_release_cut_short_by_api_errors_is_rolled_forward_by_the_same_controller(tmp_path):
    """Pods whose patch failed lose their promise at once, so the next round finishes the
    decision (the bind timeout is an hour here: waiting for it would never finish)."""
    from ganggate.kube.calls import ApiCallError

    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        controller, patches = await env.start_controller(bind_timeout_seconds=3600.0)
        failed: set[str] = set()

        async def fail_each_late_pod_once(key):
            if key[-1] in "345" and key not in failed:
                failed.add(key)
                raise ApiCallError(500, "InternalError", "injected: etcd leader changed")

        controller.releaser.before_apply = fail_each_late_pod_once
        await create_pods(env.core, gang("job", 6, gpus=2))
        pods = await wait_for(lambda: bound(env, "job", 6), what="the whole gang bound")
        assert failed == {"default/job-3", "default/job-4", "default/job-5"}
        assert len({decision(p)["id"] for p in pods}) == 1  # one decision, finished
        assert sum(patches.applied.values()) == 6
        await env.check(patches)
