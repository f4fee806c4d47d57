"""What a release costs on the API: one dry run per distinct pod shape, one PATCH per pod; and a
failed dry run still applies nothing (the all-or-nothing guarantee), end to end on kubesim."""

from __future__ import annotations

from ganggate.controller.release.patches import build_patch, patch_shape
from tests.controller_support import create_pods, decision, e2e_cluster, gang_pod, is_gated, wait_for


def gang(name, num, gpus=1, **kwargs):
    return [gang_pod(f"{name}-{i}", name, num, gpus=gpus, **kwargs) for i in range(num)]


async def bound(env, prefix, count):
    pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith(prefix + "-")]
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def _gated(name: str, gpus: int = 1, hostname: str | None = None) -> dict:
    pod = gang_pod(name, "g", 2, gpus=gpus)
    pod["metadata"].update(uid=f"uid-{name}", namespace="default")
    pod["spec"]["schedulingGates"] = [{"name": "scheduling.k8s.io/group-gate"}]
    if hostname:
        pod["spec"]["hostname"] = hostname
    return pod


def test_pods_of_one_template_share_a_shape_and_a_different_request_does_not() -> None:
    a, b = _gated("a", hostname="job-0"), _gated("b", hostname="job-1")
    other = _gated("c", gpus=2)
    def shape(pod, node):
        return patch_shape(pod, build_patch(pod, '{"id":"d"}', node, "g"))
    assert shape(a, "node-0") == shape(b, "node-1")  # name, uid, hostname and planned node differ
    assert shape(a, "node-0") != shape(other, "node-0")
    assert shape(a, "node-0") != shape(a, None)  # unpinned: no nodeSelector operation


async def test_a_gang_costs_one_dry_run_per_shape_and_one_patch_per_pod(tmp_path):
    async with e2e_cluster(tmp_path, nodes=4, gpus_per_node=8) as env:
        controller, patches = await env.start_controller()
        await create_pods(env.core, gang("same", 12))
        await wait_for(lambda: bound(env, "same", 12), what="the 12-pod gang bound")
        assert sum(patches.dry_runs.values()) == 1
        assert sorted(patches.applied.values()) == [1] * 12
        assert sorted(patches.status.values()) == [1] * 12  # each nominated to its node first
        mixed = [gang_pod(f"mixed-{i}", "mixed", 6, gpus=2 if i < 2 else 1) for i in range(6)]
        await create_pods(env.core, mixed)
        pods = await wait_for(lambda: bound(env, "mixed", 6), what="the two-shape gang bound")
        assert sum(patches.dry_runs.values()) == 1 + 2
        assert len({decision(p)["id"] for p in pods}) == 1
        assert sum(patches.applied.values()) == 18
        await env.check(patches)


async def test_a_refused_dry_run_releases_no_pod_of_the_gang(tmp_path):
    from ganggate.controller.release.patches import Releaser, ReleaseRequest

    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        created = await create_pods(env.core, gang("g", 4))
        pods = {f"default/{p['metadata']['name']}": p for p in created}
        env.sim.faults.fail(verb="patch", resource="pods", status=403, count=1)  # the one dry run
        releaser = Releaser(env.core)
        releaser.nominate = False  # the one patch that fails must be the dry run, not a nomination
        outcome = await releaser.release(ReleaseRequest(
            decision_id="d", time="2027-01-01T00:00:00Z", gang="default/g", pod_count=4,
            placement={k: "node-0" for k in pods}, pods=pods, hostnames={"node-0": "node-0"}))
        assert outcome.validation_failed and not outcome.released and releaser.dry_runs == 1
        assert all(is_gated(p) for p in await env.pods("default"))
        outcome = await releaser.release(ReleaseRequest(
            decision_id="d", time="2027-01-01T00:00:00Z", gang="default/g", pod_count=4,
            placement={k: "node-0" for k in pods}, pods=pods, hostnames={"node-0": "node-0"}))
        assert outcome.complete and sorted(outcome.released) == sorted(pods)
        assert not any(is_gated(p) for p in await env.pods("default"))


async def test_the_controllers_client_has_a_connection_per_patch_in_flight_besides_the_watches(tmp_path):
    from ganggate.kube.client import STEADY_CONNECTIONS, make_api_client
    from ganggate.sim import Simulator

    async with Simulator(nodes=0, scheduler=False, kubelet=False, controllers=False) as sim:
        api = await make_api_client(sim.kubeconfig, concurrency=300)
        try:
            assert api.rest_client.pool_manager.connector.limit == 300 + STEADY_CONNECTIONS
        finally:
            await api.close()
