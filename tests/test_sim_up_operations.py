"""The operator's second day on `ganggate sim up`, driven by kubectl as a person would: a drain of a
node running a Job gang finishes and the gang runs whole on the other nodes; `kubectl describe job`
of a waiting gang says why it waits; `ganggate status` never shows `running` with fewer pods than
min-available, and its `-o json` parses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_sim_up import KUBECTL, Up, decision_id, eventually, released_and_running, start_up

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def job(name: str, pods: int, gpus: int, grace: int = 1) -> dict[str, Any]:
    """An Indexed Job gang whose podFailurePolicy ignores ganggate's restarts (as examples/ do)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 0,
                     "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [
                         {"type": "DisruptionTarget", "status": "True"}]}]},
                     "template": {"metadata": {"annotations": {"scheduling.k8s.io/group-name": name,
                                                               "scheduling.k8s.io/group-pod-num": str(pods)}},
                                  "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                                           "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                               "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def apply(up: Up, tmp: Path, namespace: str, body: dict[str, Any]) -> None:
    manifest = tmp / f"{body['metadata']['name']}.yaml"
    manifest.write_text(yaml.safe_dump(body))
    assert up.kubectl("create", "namespace", namespace).returncode == 0
    applied = up.kubectl("apply", "-n", namespace, "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr


def status_json(up: Up, namespace: str) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-m", "ganggate", "status", "--kubeconfig", str(up.kubeconfig),
                             "-n", namespace, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    up = start_up(tmp_path_factory.mktemp("sim-up-ops"), "--nodes", "3")
    yield up
    up.stop()


def test_a_drain_of_a_node_running_a_job_gang_finishes_and_the_gang_runs_whole_elsewhere(cluster: Up, tmp_path):
    apply(cluster, tmp_path, "drain", job("train", 4, 2, grace=10))  # 10 s of restarting to see
    first = eventually(lambda: (lambda p: len(p) == 4 and all(map(released_and_running, p)) and p)(
        cluster.pods("drain")), "the gang released and Running")
    (node,) = {p["spec"]["nodeName"] for p in first}  # 4 x 2 GPUs: one node of 8 holds it
    drain = subprocess.Popen([KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "drain", node, "--ignore-daemonsets",
                              "--delete-emptydir-data", "--timeout=180s"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={"HOME": str(cluster.home), "PATH": "/usr/bin:/bin"})
    seen: list[tuple[str, int, int]] = []
    while drain.poll() is None:  # what `ganggate status` says while the gang moves
        for gang in status_json(cluster, "drain")["gangs"]:
            seen.append((gang["state"], gang["pods"], gang["podNum"]))
        time.sleep(0.2)
    output = drain.stdout.read() if drain.stdout else ""
    assert drain.returncode == 0, output
    assert f"node/{node} drained" in output
    assert not [s for s in seen if s[0].startswith("running") and s[1] < s[2]], seen
    assert "restarting" in {s[0] for s in seen}, seen
    old = {p["metadata"]["uid"] for p in first}

    def moved() -> list[dict[str, Any]] | None:
        pods = [p for p in cluster.pods("drain") if not p["metadata"].get("deletionTimestamp")]
        fresh = [p for p in pods if p["metadata"]["uid"] not in old]
        return fresh if len(fresh) == 4 and all(map(released_and_running, fresh)) else None

    again = eventually(moved, "the gang running whole again, all pods new")
    assert node not in {p["spec"]["nodeName"] for p in again}
    assert len({decision_id(p) for p in again}) == 1  # one decision released the whole new gang
    described = cluster.kubectl("describe", "job", "train", "-n", "drain")
    assert "GangRestartingForDrain" in described.stdout and f"node {node} is cordoned" in described.stdout
    assert cluster.kubectl("uncordon", node).returncode == 0

    def released() -> list[dict[str, Any]] | None:  # two releases of a 4-pod gang: no Event per pod
        events = json.loads(cluster.kubectl("get", "events", "-n", "drain", "-o", "json").stdout)["items"]
        found = [e for e in events if e["reason"] == "GangReleased"]
        return found if sum(e["count"] for e in found if e["involvedObject"]["kind"] == "Job") == 2 else None

    kinds = sorted(e["involvedObject"]["kind"] for e in eventually(released, "the Job's two GangReleased"))
    assert kinds == ["Job", "Pod", "Pod"]  # the Job's (count 2) and each run's first pod's


def test_describe_job_of_a_waiting_gang_says_why_it_waits(cluster: Up, tmp_path):
    apply(cluster, tmp_path, "waits", job("huge", 4, 8))  # 4 pods of 8 GPUs, 3 nodes of 8

    def described() -> str | None:
        text = cluster.kubectl("describe", "job", "huge", "-n", "waits").stdout
        return text if "GangCannotFit" in text else None

    text = eventually(described, "GangCannotFit in `kubectl describe job`")
    assert "needs 4 pods of 8 GPUs each" in " ".join(text.split())

    def pod_events() -> list[dict[str, Any]]:
        result = cluster.kubectl("get", "events", "-n", "waits", "-o", "json")
        return [e for e in json.loads(result.stdout)["items"] if e["reason"] == "GangCannotFit"]

    events = eventually(lambda: (lambda e: len(e) >= 2 and e)(pod_events()), "the Job's and a pod's Event")
    kinds = sorted(e["involvedObject"]["kind"] for e in events)
    assert kinds == ["Job", "Pod"]  # the owner and the oldest pod: no copy on each of the 4 pods
    (row,) = status_json(cluster, "waits")["gangs"]
    assert (row["state"], row["pods"], row["podNum"]) == ("cannot-fit", 4, 4)


def test_status_after_kubectl_delete_job_is_terminating_not_running(cluster: Up, tmp_path):
    apply(cluster, tmp_path, "gone", job("brief", 2, 1, grace=30))
    eventually(lambda: (lambda p: len(p) == 2 and all(map(released_and_running, p)))(cluster.pods("gone")),
               "the gang Running")
    assert cluster.kubectl("delete", "job", "brief", "-n", "gone", "--wait=false").returncode == 0

    def row() -> dict[str, Any] | None:
        gangs = status_json(cluster, "gone")["gangs"]
        return gangs[0] if gangs and gangs[0]["pods"] < 2 else None

    gang = eventually(row, "the gang's pods being deleted")
    assert gang["state"] == "terminating", gang


def test_under_on_node_drain_wait_the_drain_waits_says_why_and_a_node_label_lets_it_go(tmp_path):
    up = start_up(tmp_path, "--nodes", "2", "--on-node-drain", "wait")
    try:
        apply(up, tmp_path, "hold", job("train", 2, 4))
        first = eventually(lambda: (lambda p: len(p) == 2 and all(map(released_and_running, p)) and p)(
            up.pods("hold")), "the gang released and Running")
        (node,) = {p["spec"]["nodeName"] for p in first}
        drain = ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data"]
        held = up.kubectl(*drain, "--timeout=12s")
        assert held.returncode != 0
        assert "Cannot evict pod as it would violate the pod's disruption budget" in held.stderr + held.stdout
        let_go = f"kubectl label node {node} ganggate.io/on-node-drain=restart"

        def told() -> str | None:
            text = " ".join(up.kubectl("describe", "node", node).stdout.split())
            return text if "GangBlocksDrain" in text else None

        text = eventually(told, "GangBlocksDrain in `kubectl describe node`")
        assert "controller flag --on-node-drain=wait" in text and let_go in text and "--disable-eviction" in text
        assert "GangBlocksDrain" in up.kubectl("describe", "job", "train", "-n", "hold").stdout
        assert {p["metadata"]["uid"] for p in up.pods("hold")} == {p["metadata"]["uid"] for p in first}  # kept
        assert up.kubectl(*let_go.split()[1:]).returncode == 0
        finished = up.kubectl(*drain, "--timeout=120s")
        assert finished.returncode == 0, finished.stderr
        old = {p["metadata"]["uid"] for p in first}
        eventually(lambda: (lambda p: len(p) == 2 and not old & {x["metadata"]["uid"] for x in p}
                            and all(map(released_and_running, p)))(up.pods("hold")),
                   "the gang restarted whole on the other node")
        assert up.kubectl("get", "job", "train", "-n", "hold", "-o", "jsonpath={.status.failed}").stdout in ("", "0")
    finally:
        up.stop()
