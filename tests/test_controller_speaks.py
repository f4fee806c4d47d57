"""What the controller tells its users: the node in each GangReleased Event, plurals, operator gauges."""

from __future__ import annotations

import aiohttp

from ganggate.kube.calls import call_json
from tests.controller_support import create_pods, e2e_cluster, gang_pod, list_events, wait_for


async def bound(env, prefix, count):
    pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith(prefix + "-")]
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


async def released_events(env, count):
    events = [e for e in await list_events(env.core) if e["reason"] == "GangReleased"]
    return events if len(events) >= count else None


async def test_a_gang_released_is_told_once_on_its_first_pod_and_each_pod_records_its_node(tmp_path):
    """A gang of bare pods spread over two nodes: one GangReleased, on its first pod, naming that
    pod's node (not the other's); every pod's decision annotation names the node it was pinned to."""
    import json

    from ganggate.contract import DECISION_ANNOTATION

    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=4) as env:
        _, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod(f"wide-{i}", "wide", 2, gpus=4) for i in range(2)])
        pods = await wait_for(lambda: bound(env, "wide", 2), what="gang bound")
        node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assert len(set(node_of.values())) == 2
        for pod in pods:
            decision = json.loads(pod["metadata"]["annotations"][DECISION_ANNOTATION])
            assert decision["node"] == node_of[pod["metadata"]["name"]] and decision["pods"] == 2, decision
        (event,) = await wait_for(lambda: released_events(env, 1), what="the GangReleased event")
        assert event["involvedObject"]["name"] == "wide-0", event
        assert f"2 pods together, this one onto node {node_of['wide-0']}" in event["message"], event["message"]
        assert f"node {node_of['wide-1']}" not in event["message"], event["message"]
        await env.check(patches)


async def test_a_gang_of_one_is_one_pod_not_one_pods(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        _, patches = await env.start_controller()
        await create_pods(env.core, [gang_pod("solo-0", "solo", 1, gpus=1)])
        await wait_for(lambda: bound(env, "solo", 1), what="gang of one bound")
        (event,) = await wait_for(lambda: released_events(env, 1), what="GangReleased")
        assert "released: 1 pod, onto node" in event["message"] and "1 pods" not in event["message"], event["message"]
        await env.check(patches)


async def scrape(controller, wanted):
    """The /metrics text once every wanted line is in it."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{controller.metrics_port}/metrics") as resp:
            text = await resp.text()
    return text if all(line in text.splitlines() for line in wanted) else None


async def test_gangs_that_bypassed_the_gate_are_reported_once_and_left_alone(tmp_path):
    """No webhook: gang pods run at once; the controller says so once per gang and touches nothing."""
    from kubernetes_asyncio import client

    from ganggate.controller.status.tables import status_text

    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        await client.AdmissionregistrationV1Api(env.api).delete_mutating_webhook_configuration("ganggate")
        await create_pods(env.core, [gang_pod(f"free-{i}", "free", 4) for i in range(4)]
                          + [gang_pod("bad-0", "bad", 4, min_available=6)])
        controller, patches = await env.start_controller(metrics_port=0, bypass_settle_seconds=0.5)

        async def notices():
            events = [e for e in await list_events(env.core) if e["reason"] == "GangNotGated"]
            return events if len(events) == 5 else None

        events = await wait_for(notices, what="GangNotGated on the five pods")
        by_pod = {e["involvedObject"]["name"]: e for e in events}
        assert all(e["type"] == "Warning" for e in events)
        free = by_pod["free-0"]["message"]
        assert "4 pods of gang default/free were created without the scheduling gate" in free
        for cause in ("webhook is not installed", "namespaceSelector", "failurePolicy is Ignore"):
            assert cause in free
        bad = by_pod["bad-0"]["message"]
        assert "1 pod of gang default/bad was created" in bad and "group-min-available='6'" in bad
        await wait_for(lambda: scrape(controller, ['ganggate_gangs{state="not-gated"} 2.0',
                                                   "ganggate_gangs_not_gated_total 2.0"]), what="metrics")
        rounds = controller.rounds
        await wait_for(lambda: _true(controller.rounds >= rounds + 5), what="more rounds")
        assert all(e.get("count", 1) == 1 for e in await list_events(env.core) if e["reason"] == "GangNotGated")
        assert len([e for e in await list_events(env.core) if e["reason"] == "GangNotGated"]) == 5
        assert not patches.applied and not patches.dry_runs  # not touched
        assert all(not (p["metadata"].get("annotations") or {}).get("ganggate.io/decision")
                   for p in await env.pods("default"))
        text = await status_text(env.api)
        lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("default/")}
        assert lines["default/free"].split()[1:3] == ["not-gated", "4/4"]
        assert lines["default/bad"].split()[1] == "not-gated"


async def _true(value):
    return value


async def test_operator_gauges_free_promised_and_held_idle_gpus(tmp_path):
    """No scheduler: a released gang's GPUs are promised; binding one pod of it holds its GPUs idle."""
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8, scheduler=False) as env:
        controller, patches = await env.start_controller(metrics_port=0)
        await create_pods(env.core, [gang_pod(f"g-{i}", "g", 2, gpus=3) for i in range(2)])
        await wait_for(lambda: scrape(controller, [
            "ganggate_gpus_promised 6.0", "ganggate_gpus_free 10.0", "ganggate_gpus_held_idle 0.0",
            'ganggate_gangs{state="released"} 1.0', "ganggate_leader 1.0"]), what="promised gauges")
        pinned = {p["metadata"]["name"]: p["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                  for p in await env.pods("default")}
        await bind(env, "g-0", pinned["g-0"])
        text = await wait_for(lambda: scrape(controller, [
            "ganggate_gpus_promised 3.0", "ganggate_gpus_free 10.0", "ganggate_gpus_held_idle 3.0"]),
            what="held idle gauge")
        assert "# HELP ganggate_gpus_held_idle" in text and "# HELP ganggate_gpus_free" in text
        await bind(env, "g-1", pinned["g-1"])
        await wait_for(lambda: scrape(controller, [
            "ganggate_gpus_promised 0.0", "ganggate_gpus_free 10.0", "ganggate_gpus_held_idle 0.0",
            'ganggate_gangs{state="running"} 1.0']), what="gauges once the whole gang is bound")
        await env.check(patches)


async def bind(env, name, node):
    """Bind a pod as a scheduler would (pods/binding)."""
    await call_json(env.core.create_namespaced_pod_binding, name, "default", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


async def test_events_of_pods_without_a_uid_do_not_land_on_each_other():
    """Aggregation is per pod: two pods' Events never share (and overwrite) one Event."""
    from kubernetes_asyncio import client

    from ganggate.controller.reporting.events import EventRecorder, PodRef
    from ganggate.sim import Simulator

    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        async with sim.api_client() as api:
            core = client.CoreV1Api(api)
            recorder = EventRecorder(core)
            await recorder.send(PodRef("default", "w-0", ""), "GangReleased", "w-0 onto node node-0")
            await recorder.send(PodRef("default", "w-1", ""), "GangReleased", "w-1 onto node node-1")
            events = {e["involvedObject"]["name"]: e for e in await list_events(core)}
            assert events["w-0"]["message"] == "w-0 onto node node-0"
            assert events["w-1"]["message"] == "w-1 onto node node-1"
