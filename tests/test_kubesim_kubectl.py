"""kubectl against `ganggate sim serve` started as its own process, through the kubeconfig it writes.

`kubectl apply` validates (its default, --validate=strict):
it reads /openapi/v3, sees the server takes `fieldValidation`, and sends `fieldValidation=Strict`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.kubectl_support import KUBECTL

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

GANGGATE = str(Path(sys.executable).with_name("ganggate"))
GATE = "scheduling.k8s.io/group-gate"


POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  annotations:
    scheduling.k8s.io/group-name: g1
    scheduling.k8s.io/group-pod-num: "2"
spec:
  schedulingGates:
  - name: scheduling.k8s.io/group-gate
  containers:
  - name: main
    image: busybox:1.36
    resources:
      limits:
        nvidia.com/gpu: "1"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`ganggate sim serve` on a free port; yields (kubeconfig path, kubectl runner)."""
    home = tmp_path_factory.mktemp("kubectl")
    kubeconfig = home / "kubeconfig"
    log = open(home / "serve.log", "w")
    process = subprocess.Popen(
        [GANGGATE, "sim", "serve", "--port", "0", "--nodes", "2", "--kubeconfig-out", str(kubeconfig),
         "--no-scheduler", "--no-kubelet"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        server = _wait_for_server(kubeconfig, process)
        env = dict(os.environ, HOME=str(home), KUBECONFIG=str(kubeconfig))

        def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
            result = subprocess.run([KUBECTL, "--cache-dir", str(home / "cache"), *args], input=stdin,
                                    capture_output=True, text=True, env=env, timeout=60)
            if check and result.returncode != 0:
                raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
            return result

        yield server, kubectl
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_for_server(kubeconfig: Path, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + 30  # safety net only
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("ganggate sim serve exited early")
        if kubeconfig.exists():
            config = yaml.safe_load(kubeconfig.read_text())
            server = config["clusters"][0]["cluster"]["server"]
            try:
                with urllib.request.urlopen(server + "/readyz", timeout=2) as response:
                    if response.status == 200:
                        return server
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError("ganggate sim serve did not become ready")


def test_kubeconfig_shape(served, tmp_path):
    server, kubectl = served
    assert server.startswith("http://127.0.0.1:")
    view = json.loads(kubectl("config", "view", "-o", "json").stdout)
    assert view["current-context"] == "kubesim"
    assert view["users"][0]["user"]["token"]


def test_get_nodes(served):
    _, kubectl = served
    out = kubectl("get", "nodes").stdout
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"]
    assert {line.split()[0] for line in lines[1:]} == {"node-0", "node-1"}
    assert all(line.split()[1] == "Ready" for line in lines[1:])
    nodes = json.loads(kubectl("get", "no", "-o", "json").stdout)
    assert nodes["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_apply_get_patch_delete_a_gated_pod(served):
    _, kubectl = served
    assert "pod/trainer-0 created" in kubectl("apply", "-f", "-", stdin=POD).stdout
    out = kubectl("get", "pods").stdout
    row = [line.split() for line in out.splitlines() if line.startswith("trainer-0")]
    assert row and row[0][2] == "SchedulingGated"
    assert "unchanged" in kubectl("apply", "-f", "-", stdin=POD).stdout
    # Strategic merge patch (kubectl's default) and JSON patch.
    kubectl("patch", "pod", "trainer-0", "-p", '{"metadata":{"labels":{"team":"a"}}}')
    refused = kubectl("patch", "pod", "trainer-0", "--type=json", "-p",
                      '[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"example.com/x"}}]', check=False)
    assert refused.returncode != 0
    assert "only deletion is allowed, but found new scheduling gate 'example.com/x'" in refused.stderr
    kubectl("patch", "pod", "trainer-0", "--type=json", "-p", '[{"op":"remove","path":"/spec/schedulingGates"}]')
    pod = json.loads(kubectl("get", "po", "trainer-0", "-o", "json").stdout)
    assert pod["metadata"]["labels"] == {"team": "a"}
    assert "schedulingGates" not in pod["spec"]
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "g1"
    kubectl("delete", "pod", "trainer-0")
    missing = kubectl("get", "pod", "trainer-0", check=False)
    assert missing.returncode != 0 and 'pods "trainer-0" not found' in missing.stderr


def test_api_resources_and_short_names(served):
    _, kubectl = served
    out = kubectl("api-resources").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["pods"][1] == "po" and rows["nodes"][1] == "no" and rows["namespaces"][1] == "ns"
    assert "leases" in rows and "mutatingwebhookconfigurations" in rows
    assert rows["services"][1] == "svc" and rows["jobs"][1] == "batch/v1"
    assert "kube-node-lease" in kubectl("get", "ns").stdout


def test_apply_examples_with_validation(served):
    """Every example is created (kubesim alone has no webhook, so even the invalid gang pod is)."""
    _, kubectl = served
    applied = kubectl("apply", "-f", str(EXAMPLES))
    created = sorted(line for line in applied.stdout.splitlines())
    assert created == sorted([
        "job.batch/elastic-train created", "pod/invalid-gang-pod created", "pod/mpi-launcher created",
        "pod/mpi-worker-0 created", "pod/mpi-worker-1 created", "pod/mpi-worker-2 created",
        "service/ddp-train created", "job.batch/ddp-train created", "pod/volcano-worker created",
    ]), applied.stdout
    assert applied.stderr == ""
    again = kubectl("apply", "-f", str(EXAMPLES)).stdout
    assert all(line.endswith(" unchanged") for line in again.splitlines()), again
    service = json.loads(kubectl("get", "svc", "ddp-train", "-o", "json").stdout)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["ports"][0]["targetPort"] == 29500

    def job_pod_names() -> list[str]:
        pods = json.loads(kubectl("get", "pods", "-l", "batch.kubernetes.io/job-name=ddp-train", "-o", "json").stdout)
        return sorted(p["metadata"]["name"] for p in pods["items"])

    deadline = time.monotonic() + 30  # safety net only
    while len(job_pod_names()) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    names = job_pod_names()
    assert len(names) == 8 and {n.rsplit("-", 1)[0] for n in names} == {f"ddp-train-{i}" for i in range(8)}
    jobs = kubectl("get", "jobs").stdout.splitlines()
    assert jobs[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    rows = {line.split()[0]: line.split() for line in jobs[1:]}
    assert rows["ddp-train"][1:3] == ["Running", "0/8"] and rows["elastic-train"][2] == "0/16"

    # kubectl delete job propagates in the background: the garbage collector removes the pods.
    assert 'job.batch "ddp-train" deleted' in kubectl("delete", "job", "ddp-train").stdout
    while job_pod_names() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_pod_names() == []
    kubectl("delete", "-f", str(EXAMPLES), "--ignore-not-found")


def test_apply_refuses_unknown_fields(served):
    _, kubectl = served
    manifest = POD.replace("trainer-0", "typo").replace("  containers:", "  containerz: []\n  containers:")
    refused = kubectl("apply", "-f", "-", stdin=manifest, check=False)
    assert refused.returncode != 0
    assert ('Error from server (BadRequest): error when creating "STDIN": Pod in version "v1" cannot be handled '
            'as a Pod: strict decoding error: unknown field "spec.containerz"') in refused.stderr
    assert kubectl("get", "pod", "typo", check=False).returncode != 0
    warned = kubectl("apply", "--validate=warn", "-f", "-", stdin=manifest)
    assert 'Warning: unknown field "spec.containerz"' in warned.stderr and "pod/typo created" in warned.stdout
    kubectl("delete", "pod", "typo")


def test_explain_reads_the_served_schema(served):
    _, kubectl = served
    out = kubectl("explain", "job.spec.completionMode").stdout
    assert "KIND:       Job" in out and "completionMode" in out and "Indexed" in out
