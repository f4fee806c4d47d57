"""`--autoscaling provisioning-request`: a gang larger than the cluster asks cluster-autoscaler
(kubesim's stand-in) for room with one ProvisioningRequest, starts whole once the nodes join, and
the request is removed; without it the gang waits and nobody is asked."""

from __future__ import annotations

from ganggate.core.policy.provisioning import ATOMIC, CONSUME_ANNOTATION
from ganggate.sim.autoscaler.nodegroups import parse_node_group
from tests.controller_support import (
    assert_gangs_whole,
    create_pods,
    decision,
    e2e_cluster,
    gang_pod,
    list_events,
    wait_for,
)

PROVREQS = ("autoscaling.x-k8s.io", "v1", "default", "provisioningrequests")


def _cluster(tmp_path, group="gpu:0:4,gpus=8,delay=0.5", **options):
    groups = [parse_node_group(group)]
    settings = {"scan_seconds": 0.2, "unneeded_seconds": 3600, **options}
    return e2e_cluster(tmp_path, nodes=1, gpus_per_node=8, node_groups=groups, autoscaler_options=settings)


async def _bound(env) -> list[dict] | None:
    """The gang's three pods once every one is bound, else None."""
    pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith("w-")]
    return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None


async def _requests(env) -> list[dict]:
    return list(env.sim.store.list("provisioningrequests.autoscaling.x-k8s.io", "default"))


async def test_a_gang_larger_than_the_cluster_gets_nodes_and_starts_whole(tmp_path):
    async with _cluster(tmp_path) as env:
        await env.start_controller(autoscaling="provisioning-request")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])

        requests = await wait_for(lambda: _requests(env), what="a ProvisioningRequest")
        assert [r["metadata"]["name"] for r in requests] == ["ganggate-train"]
        spec = requests[0]["spec"]
        assert spec["provisioningClassName"] == ATOMIC and spec["podSets"][0]["count"] == 3
        pods = await wait_for(lambda: _bound(env), what="the gang bound on the new nodes")
        assert_gangs_whole(pods, env.log)
        assert len({p["spec"]["nodeName"] for p in pods}) == 3  # node-0 and two nodes of the group
        assert all(p["metadata"]["annotations"][CONSUME_ANNOTATION] == "ganggate-train" for p in pods)
        assert len({decision(p)["id"] for p in pods}) == 1  # one decision: released together
        await wait_for(lambda: _none_left(env), what="the request deleted")

        async def told() -> bool:  # (Events are written by the recorder, after the fact)
            return {"ProvisioningRequested", "ProvisioningProvisioned"} <= {e["reason"] for e in await list_events(env.core)}

        assert await wait_for(told, what="the ProvisioningRequested and ProvisioningProvisioned Events")


async def test_a_request_provisioned_between_two_polls_is_still_told(tmp_path, monkeypatch):
    # The controller reads a pending request every POLL_SECONDS; the nodes can join and the gang
    # start before the next read. Here no periodic read comes in time at all: the last look,
    # before the controller deletes the request, must tell the user.
    async def no_read_in_time(self, key, asked, now):
        return None

    monkeypatch.setattr("ganggate.controller.autoscaling.provisioner.Provisioner._poll", no_read_in_time)
    async with _cluster(tmp_path) as env:
        await env.start_controller(autoscaling="provisioning-request")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])
        await wait_for(lambda: _bound(env), what="the gang bound on the new nodes")
        await wait_for(lambda: _none_left(env), what="the request deleted")

        async def told() -> list[str]:
            return [e["message"] for e in await list_events(env.core) if e["reason"] == "ProvisioningProvisioned"]

        messages = await wait_for(told, what="the ProvisioningProvisioned Event")
        assert all(m == "ProvisioningRequest ganggate-train is provisioned: the gang has started" for m in messages)


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

        async def told(what: str):
            return [e for e in await list_events(env.core)
                    if e.get("reason") == "ProvisioningRequested" and what in e["message"]]

        await wait_for(lambda: told("asked the cluster autoscaler"), what="the first controller's request")
        await env.stop_controller(first)
        await env.start_controller(autoscaling="provisioning-request")
        await wait_for(lambda: told("made before"), what="the second controller finds the request")
        assert [r["metadata"]["name"] for r in await _requests(env)] == ["ganggate-big"]


async def test_check_capacity_on_a_full_group_waits_with_the_autoscalers_answer(tmp_path):
    async with _cluster(tmp_path) as env:
        await env.start_controller(autoscaling="provisioning-request",
                                   provisioning_class="check-capacity.autoscaling.x-k8s.io")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])

        async def pending():
            return [e for e in await list_events(env.core) if e.get("reason") == "ProvisioningPending"]

        (event,) = await wait_for(pending, what="the autoscaler's answer")
        assert "CapacityIsNotFound" in event["message"] and "holding nothing" in event["message"]
        assert len(list(env.sim.store.list("nodes"))) == 1  # check-capacity never adds nodes
        assert not any(p["spec"].get("nodeName") for p in await env.pods("default"))


async def test_the_next_leader_finishes_a_release_the_first_asked_for(tmp_path):
    async with _cluster(tmp_path) as env:
        first, _ = await env.start_controller(autoscaling="provisioning-request")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])
        await wait_for(lambda: _requests(env), what="a ProvisioningRequest")
        await env.stop_controller(first)  # killed between asking and releasing
        assert [r["metadata"]["name"] for r in await _requests(env)] == ["ganggate-train"]
        await env.start_controller(autoscaling="provisioning-request")

        pods = await wait_for(lambda: _bound(env), what="the gang released by the next controller")
        assert_gangs_whole(pods, env.log)
        assert all(p["metadata"]["annotations"][CONSUME_ANNOTATION] == "ganggate-train" for p in pods)
        await wait_for(lambda: _none_left(env), what="the one request deleted")


async def test_status_shows_what_was_asked_of_the_autoscaler(tmp_path):
    from ganggate.controller.status.tables import status_text

    async with _cluster(tmp_path) as env:
        await env.start_controller(autoscaling="provisioning-request",
                                   provisioning_class="check-capacity.autoscaling.x-k8s.io")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])

        async def answered():
            text = await status_text(env.api)
            return text if "CapacityIsNotFound" in text else None

        text = await wait_for(answered, what="status with the autoscaler's answer")
        row = next(line for line in text.splitlines() if "ganggate-train" in line)
        assert row.split()[:5] == ["default/train", "ganggate-train", "check-capacity.autoscaling.x-k8s.io", "3", "pending"]


async def test_placeholders_make_the_autoscaler_add_nodes_then_the_gang_starts_on_them(tmp_path):
    async with _cluster(tmp_path) as env:
        await env.start_controller(autoscaling="placeholders")
        await create_pods(env.core, [gang_pod(f"w-{i}", "train", 3, gpus=8) for i in range(3)])

        pods = await wait_for(lambda: _bound(env), what="the gang bound where its placeholders were")
        assert_gangs_whole(pods, env.log)
        assert len({p["spec"]["nodeName"] for p in pods}) == 3
        assert len({decision(p)["id"] for p in pods}) == 1

        async def no_placeholders():
            return not [p for p in await env.pods("default") if "ganggate.io/placeholder-for" in (p["metadata"].get("labels") or {})]

        await wait_for(no_placeholders, what="the placeholders deleted")
        reasons = {e["reason"] for e in await list_events(env.core)}
        assert {"PlaceholdersCreated", "PlaceholdersBound"} <= reasons
        assert await _requests(env) == []  # no ProvisioningRequest in this mode


async def test_placeholders_that_never_all_bind_are_deleted_after_the_timeout(tmp_path):
    async with _cluster(tmp_path, group="gpu:0:1,gpus=8,delay=0.2") as env:
        controller, _ = await env.start_controller(autoscaling="placeholders")
        controller.placeholders.timeout_seconds = 2.0
        await create_pods(env.core, [gang_pod(f"w-{i}", "big", 3, gpus=8) for i in range(3)])

        async def timed_out():
            return [e for e in await list_events(env.core) if e.get("reason") == "PlaceholdersTimedOut"]

        (event,) = await wait_for(timed_out, what="the placeholders given up")
        assert "only 2 of 3 placeholders were bound" in event["message"]

        async def gone():
            return not [p for p in await env.pods("default") if "ganggate.io/placeholder-for" in (p["metadata"].get("labels") or {})]

        await wait_for(gone, what="the placeholders deleted")
        assert not any(p["spec"].get("nodeName") for p in await env.pods("default") if p["metadata"]["name"].startswith("w-"))
