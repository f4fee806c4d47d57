"""`ganggate sim up --topology`: the flags checked, and the controller given the cluster's levels."""

from __future__ import annotations

import argparse

from ganggate.local.cli import check, register
from ganggate.local.up import UpOptions, controller_arguments
from ganggate.sim.topology import parse_shape


def parse(*argv: str) -> argparse.Namespace:
    """`ganggate sim up ARGV` as the real parser reads it."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["up", "--kubeconfig-out", "/nonexistent-dir-for-test/kubeconfig", *argv])


def test_a_bad_topology_is_refused_before_anything_starts():
    assert "BLOCKSxRACKSxNODES" in check(parse("--topology", "4x4"))
    assert "distinct" in check(parse("--topology", "1x1x1", "--rack-label", "ganggate.io/block"))
    assert check(parse("--topology", "2x2x2")) is None


def controller_config(options: UpOptions):
    """The configuration `ganggate controller` makes of the command line sim up starts it with."""
    from ganggate.cli import build_parser
    from ganggate.controller.cli import config_from_args

    argv = controller_arguments(options, metrics_port=9999)
    assert argv[1:3] == ["-m", "ganggate"]
    return config_from_args(build_parser().parse_args(argv[3:]))


def test_the_controller_gets_the_levels_of_the_cluster():
    assert controller_config(UpOptions()).topology_levels == ()
    shape = parse_shape("2x2x2", rack_label="example.com/rack")
    assert controller_config(UpOptions(topology=shape)).topology_levels == (
        "topology.kubernetes.io/zone", "ganggate.io/block", "example.com/rack", "kubernetes.io/hostname")


def test_the_controller_runs_with_leader_election_on_loopback():
    config = controller_config(UpOptions(on_node_drain="wait", podgroups="gate"))
    assert (config.leader_election, config.lease_namespace, config.lease_name) == (True, "ganggate-system",
                                                                                   "ganggate-controller")
    assert (config.metrics_host, config.metrics_port) == ("127.0.0.1", 9999)
    assert (config.on_node_drain, config.podgroups, config.autoscaling) == ("wait", "gate", "off")


def test_sim_up_with_nvlink_cliques_places_a_gang_that_requires_one_in_one(tmp_path):
    """`ganggate sim up --topology 1x1x4 --nvlink-cliques 2`, a real process: a gang that requires
    the clique level runs in one clique and its Event names it; one too big for any clique waits,
    saying which level and the largest free clique."""
    import json

    from ganggate.replay.results.gangcheck import required_topology_broken
    from tests.test_sim_up import eventually, released_and_running, start_up

    up = start_up(tmp_path, "--topology", "1x1x4", "--nvlink-cliques", "2", "--gpus-per-node", "4")
    try:
        nodes = json.loads(up.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        clique = {n["metadata"]["name"]: n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in nodes}
        assert len(set(clique.values())) == 2
        # Two GPUs busy on the first node of each clique: best fit alone would take those two
        # half-free nodes, one in each clique.
        first = sorted({value: name for name, value in sorted(clique.items(), reverse=True)}.values())
        pods = [plain_pod(f"busy-{i}", node, 2) for i, node in enumerate(first)]
        pods += [gang_pod(f"ddp-{i}", "ddp", 2, 2, required="nvidia.com/gpu.clique") for i in range(2)]
        # 8 GPUs in pods of 2: room across the cliques, but no clique has 8 free.
        pods += [gang_pod(f"big-{i}", "big", 4, 2, required="nvidia.com/gpu.clique") for i in range(4)]
        manifest = tmp_path / "pods.json"
        manifest.write_text("\n".join(json.dumps(pod) for pod in pods))
        created = up.kubectl("apply", "-n", "default", "-f", str(manifest))
        assert created.returncode == 0, created.stderr

        def ddp_running():
            found = [p for p in up.pods("default") if p["metadata"]["name"].startswith("ddp-")]
            return found if len(found) == 2 and all(released_and_running(p) for p in found) else None

        ddp = eventually(ddp_running, "gang ddp released and running")
        assert len({clique[p["spec"]["nodeName"]] for p in ddp}) == 1
        labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
        assert required_topology_broken(up.pods("default"), labels) == []

        def events(reason, prefix):
            listed = json.loads(up.kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
            return [e for e in listed if e["reason"] == reason and e["involvedObject"]["name"].startswith(prefix)]

        (released, *_) = eventually(lambda: events("GangReleased", "ddp-"), "GangReleased of ddp")
        assert f"in nvidia.com/gpu.clique={clique[ddp[0]['spec']['nodeName']]} in ganggate.io/rack=" in released["message"]
        (waiting, *_) = eventually(lambda: events("GangUnschedulable", "big-"), "GangUnschedulable of big")
        assert waiting["message"].startswith("needs 8 GPUs in one clique; the largest free clique (nvidia.com/gpu.clique=")
        assert waiting["message"].endswith(") has 6")
        assert all(p["spec"].get("schedulingGates") for p in up.pods("default") if p["metadata"]["name"].startswith("big-"))
        # Topology in view: the controller's start line, and status reading the levels off its lease.
        assert "topology levels: topology.kubernetes.io/zone,ganggate.io/block,ganggate.io/rack,nvidia.com/gpu.clique," \
            "kubernetes.io/hostname" in up.stderr.read_text()
        status = _status(up)
        assert "topology levels: topology.kubernetes.io/zone," in status and "(from the controller's lease)" in status
        row = next(line.split() for line in status.splitlines() if line.startswith("default/ddp "))
        assert row[4] == f"gpu.clique={clique[ddp[0]['spec']['nodeName']]}"
        assert next(line.split() for line in status.splitlines() if line.startswith("default/big "))[4] == "needs"
    finally:
        assert up.stop() == 0


def _status(up) -> str:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "ganggate", "status", "--kubeconfig", str(up.kubeconfig)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def plain_pod(name: str, node: str, gpus: int) -> dict:
    """A pod outside any gang, bound to a node (holds its GPUs there)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busy",
                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def gang_pod(name: str, group: str, num: int, gpus: int, *, required: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"scheduling.k8s.io/group-name": group,
                                                       "scheduling.k8s.io/group-pod-num": str(num),
                                                       "scheduling.k8s.io/group-topology-required": required}},
            "spec": {"containers": [{"name": "main", "image": "train",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
