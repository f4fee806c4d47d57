"""`ganggate sim up`: a local cluster (kubesim, webhook, controller) in one command, used with kubectl.

Each run starts `ganggate sim up` as its own process and waits for its ready banner; kubectl is
the virtualenv's (tests/kubectl_support.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ganggate.local.parts import manifest_text
from tests.kubectl_support import KUBECTL

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DECISION = "ganggate.io/decision"
DENIAL = 'admission webhook "gang-gate.ganggate.io" denied the request'
READY = "ganggate sim up: ready"

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@dataclass
class Up:
    """A running `ganggate sim up` and what its banner said."""

    process: subprocess.Popen
    stderr: Path
    kubeconfig: Path
    api_url: str
    home: Path

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, HOME=str(self.home))  # kubectl's discovery cache stays in the test's dir
        return subprocess.run([KUBECTL, "--kubeconfig", str(self.kubeconfig), *args], capture_output=True,
                              text=True, timeout=60, env=env)

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        result = self.kubectl("get", "pods", "-n", namespace, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["items"]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=60)


def start_up(tmp: Path, *args: str) -> Up:
    """Run `ganggate sim up --port 0` and wait for its ready banner."""
    kubeconfig = tmp / "kubeconfig"
    stderr = tmp / "sim-up.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "ganggate", "sim", "up", "--port", "0", "--kubeconfig-out", str(kubeconfig), *args],
        stdout=subprocess.PIPE, stderr=stderr.open("w"), text=True, start_new_session=True,  # its own process group, as in a terminal
    )
    banner: dict[str, str] = {}
    ready = False
    assert process.stdout is not None
    for line in process.stdout:  # ends when the process does
        ready = ready or line.startswith(READY)
        key, _, value = line.strip().partition(":  ")
        if value:
            banner[key] = value
        if line.startswith("Stop with Ctrl-C"):
            break
    assert ready, f"sim up exited with {process.wait()} before it was ready:\n{stderr.read_text()}"
    return Up(process, stderr, kubeconfig, banner["API server"].split()[0], tmp)


def eventually(probe: Callable[[], Any], what: str, attempts: int = 600) -> Any:
    """Poll `probe` until it returns something true (a hang guard, not a speed assertion)."""
    last = None
    for _ in range(attempts):
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"never saw {what}; last probe: {last!r}")


def gate_names(pod: dict[str, Any]) -> list[str]:
    return [gate["name"] for gate in pod["spec"].get("schedulingGates") or []]


def released_and_running(pod: dict[str, Any]) -> bool:
    """Released by the controller (its decision annotation, no gate left) and Running."""
    annotations = pod["metadata"].get("annotations") or {}
    return DECISION in annotations and not gate_names(pod) and pod["status"].get("phase") == "Running"


def decision_id(pod: dict[str, Any]) -> str:
    return json.loads(pod["metadata"]["annotations"][DECISION])["id"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One `sim up` with 12 nodes of 8 GPUs, shared by the kubectl tests (each in its own namespace)."""
    up = start_up(tmp_path_factory.mktemp("sim-up"), "--nodes", "12")
    yield up
    up.stop()


def test_shipped_webhook_configuration_is_deploys_kubesim_manifest() -> None:
    """The package's copy (in an installed wheel) is byte for byte deploy/kubesim/webhook-url.yaml."""
    assert manifest_text() == (ROOT / "deploy" / "kubesim" / "webhook-url.yaml").read_text(encoding="utf-8")


@needs_kubectl
def test_a_gang_of_bare_pods_is_released_whole_and_runs(cluster: Up) -> None:
    assert cluster.kubectl("create", "namespace", "mpi").returncode == 0
    applied = cluster.kubectl("apply", "-n", "mpi", "-f", str(EXAMPLES / "mpi-gang-pods.yaml"))
    assert applied.returncode == 0, applied.stderr
    pods = eventually(lambda: (lambda p: len(p) == 4 and all(map(released_and_running, p)) and p)(cluster.pods("mpi")),
                      "the 4 MPI pods released and Running")
    assert len({decision_id(pod) for pod in pods}) == 1  # one decision released the whole gang


@needs_kubectl
def test_an_invalid_gang_pod_is_denied_with_the_webhooks_reason(cluster: Up) -> None:
    applied = cluster.kubectl("apply", "-f", str(EXAMPLES / "invalid-gang-pod.yaml"))
    assert applied.returncode != 0
    assert DENIAL in applied.stderr
    assert "scheduling.k8s.io/group-min-available='6'" in applied.stderr
    assert "NotFound" in cluster.kubectl("get", "pod", "invalid-gang-pod").stderr


@needs_kubectl
def test_status_lists_the_gang(cluster: Up) -> None:
    assert cluster.kubectl("create", "namespace", "status").returncode == 0
    applied = cluster.kubectl("apply", "-n", "status", "-f", str(EXAMPLES / "mpi-gang-pods.yaml"))
    assert applied.returncode == 0, applied.stderr

    def row() -> str | None:
        result = subprocess.run([sys.executable, "-m", "ganggate", "status", "--kubeconfig", str(cluster.kubeconfig),
                                 "-n", "status"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return next((line for line in result.stdout.splitlines() if line.startswith("status/mpi-allreduce ")), None)

    line = eventually(lambda: (lambda r: r and "running" in r and r)(row()), "the gang running in `ganggate status`")
    assert line.split()[1:4] == ["running", "4/4", "16"]


@needs_kubectl
def test_a_gang_whose_selector_no_node_carries_says_it_can_never_fit(cluster: Up, tmp_path: Path) -> None:
    """As an operator meets it: a typo'd nodeSelector key; `ganggate status` and the pods' Events
    say the wait cannot end, and name the label the nodes carry."""
    assert cluster.kubectl("create", "namespace", "typo").returncode == 0
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"typo-{i}", "annotations": {"scheduling.k8s.io/group-name": "typo",
                                                                "scheduling.k8s.io/group-pod-num": "2"}},
             "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostnam": "node-0"},
                      "containers": [{"name": "main", "image": "busybox",
                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}} for i in range(2)]
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(yaml.safe_dump_all(pods))
    applied = cluster.kubectl("apply", "-n", "typo", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    hint = ("its pods' nodeSelector asks for the label kubernetes.io/hostnam=node-0, which no node carries "
            "(did you mean kubernetes.io/hostname, which 12 nodes carry?)")

    def row() -> str | None:
        result = subprocess.run([sys.executable, "-m", "ganggate", "status", "--kubeconfig", str(cluster.kubeconfig),
                                 "-n", "typo"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return next((line for line in result.stdout.splitlines() if line.startswith("typo/typo ")), None)

    line = eventually(lambda: (lambda r: r and "cannot-fit" in r and r)(row()), "the gang as cannot-fit")
    assert f"GangCannotFit: {hint}" in line

    def events() -> list[dict[str, Any]]:
        result = cluster.kubectl("get", "events", "-n", "typo", "-o", "json")
        assert result.returncode == 0, result.stderr
        return [e for e in json.loads(result.stdout)["items"] if e["reason"] == "GangCannotFit"]

    found = eventually(lambda: (lambda e: len(e) == 2 and e)(events()), "a GangCannotFit Event on each pod")
    assert all(e["type"] == "Warning" and e["message"].startswith(hint) for e in found)


@needs_kubectl
def test_the_examples_directory_applies_with_validation(cluster: Up) -> None:
    """`kubectl apply -f examples/`: the Jobs' pods are gated then released whole, the invalid pod is
    denied, the Volcano pod is left alone."""
    assert cluster.kubectl("create", "namespace", "examples").returncode == 0
    applied = cluster.kubectl("apply", "-n", "examples", "-f", str(EXAMPLES))
    errors = [line for line in applied.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and DENIAL in errors[0] and "invalid-gang-pod" in errors[0], applied.stderr

    def settled() -> dict[str, list[dict[str, Any]]] | None:
        by_gang: dict[str, list[dict[str, Any]]] = {}
        for pod in cluster.pods("examples"):
            gang = (pod["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name", "")
            by_gang.setdefault(gang, []).append(pod)
        done = (sum(map(released_and_running, by_gang.get("ddp-train", []))) == 8
                and sum(map(released_and_running, by_gang.get("elastic-train", []))) >= 12
                and sum(map(released_and_running, by_gang.get("mpi-allreduce", []))) == 4)
        return by_gang if done else None

    by_gang = eventually(settled, "the Jobs' and the MPI pods released and Running")
    assert len({decision_id(pod) for pod in by_gang["ddp-train"]}) == 1
    assert all(pod["metadata"].get("ownerReferences") for pod in by_gang["ddp-train"])  # made by the Job
    (volcano,) = by_gang["volcano-job"]
    assert not gate_names(volcano) and DECISION not in volcano["metadata"].get("annotations", {})
    assert "invalid-gang-pod" not in {pod["metadata"]["name"] for pod in cluster.pods("examples")}


def parts(pid: int) -> list[int]:
    """The processes sim up started (the webhook, the controller), by /proc (Linux)."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # (not a zombie)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_stops_everything_cleanly(tmp_path: Path, sig: int) -> None:
    """SIGTERM to sim up, or Ctrl-C in its terminal (SIGINT to its whole process group): exit 0,
    the controller gives up its lease, the API server stops, and no part is left running."""
    up = start_up(tmp_path, "--nodes", "1")
    started = parts(up.process.pid)
    assert len(started) == 2  # the webhook and the controller, in processes of their own
    if sig == signal.SIGINT:
        os.killpg(up.process.pid, sig)
    assert up.stop(sig) == 0
    assert not [pid for pid in started if alive(pid)]
    log = up.stderr.read_text()
    assert "Traceback" not in log
    assert "controller up" in log and "gave up lease ganggate-system/ganggate-controller" in log
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(up.api_url + "/version", timeout=5)
    assert up.kubeconfig.exists()  # left in place, as documented


@pytest.mark.parametrize("flag, part", [("--port", "the API"), ("--webhook-port", "the webhook")])
def test_a_taken_port_is_a_one_line_error(tmp_path: Path, flag: str, part: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": "0", flag: str(port)}
        result = subprocess.run([sys.executable, "-m", "ganggate", "sim", "up", *(x for kv in ports.items() for x in kv),
                                 "--kubeconfig-out", str(tmp_path / "kubeconfig")],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (f"error: cannot serve {part} on 127.0.0.1:{port}: address already in use "
                                              f"(another cluster may be running there; {flag} 0 picks a free port)")
    assert READY not in result.stdout


@pytest.mark.parametrize("flags, message", [
    (["--nodes", "-1"], "error: --nodes and --gpus-per-node must not be negative"),
    (["--port", "70000"], "error: --port must be from 0 to 65535"),
    (["--cpu", "lots"], "error: --cpu: "),
])
def test_bad_flags_are_one_line_errors(tmp_path: Path, flags: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "ganggate", "sim", "up", *flags,
                             "--kubeconfig-out", str(tmp_path / "kubeconfig")],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_a_kubeconfig_kubesim_did_not_write_is_not_overwritten(tmp_path: Path) -> None:
    mine = tmp_path / "config"
    mine.write_text("apiVersion: v1\nkind: Config\ncurrent-context: production\n")
    result = subprocess.run([sys.executable, "-m", "ganggate", "sim", "up", "--port", "0",
                             "--kubeconfig-out", str(mine)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == f"error: --kubeconfig-out {mine} exists and was not written by kubesim; choose another file\n"
    assert "production" in mine.read_text()


def test_a_second_sim_up_leaves_the_first_ones_kubeconfig_alone(tmp_path: Path) -> None:
    """The kubeconfig of a cluster that still answers is not overwritten (its users would lose it);
    once that cluster is gone, a command pointed at it says no cluster answers, not a raw error."""
    first = start_up(tmp_path, "--nodes", "1")
    before = first.kubeconfig.read_text()
    try:
        second = subprocess.run([sys.executable, "-m", "ganggate", "sim", "up", "--port", "0",
                                 "--kubeconfig-out", str(first.kubeconfig)], capture_output=True, text=True, timeout=60)
    finally:
        assert first.stop() == 0
    assert (second.returncode, second.stdout) == (2, "")
    assert second.stderr == (
        f"error: {first.kubeconfig} is the kubeconfig of a cluster that still answers at {first.api_url}; stop that "
        f"one first, or write this one's elsewhere: --kubeconfig-out OTHER.kubeconfig (and --port 0 for a free "
        f"port)\n")
    assert first.kubeconfig.read_text() == before
    status = subprocess.run([sys.executable, "-m", "ganggate", "status", "--kubeconfig", str(first.kubeconfig)],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 1
    assert status.stderr == (f"error: cannot list the cluster: no cluster answers at {first.api_url} "
                             f"(is `ganggate sim up` running?)\n")
