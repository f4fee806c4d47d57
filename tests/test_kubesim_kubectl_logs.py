"""`kubectl logs` (with `-f`) and `kubectl get events/leases` against `ganggate sim serve`.

One `sim serve` (scheduler and kubelet on, one node) for the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kubectl_support import KUBECTL

GANGGATE = str(Path(sys.executable).with_name("ganggate"))


EVENT = """\
apiVersion: v1
kind: Event
metadata:
  name: trainer.1
involvedObject:
  kind: Pod
  name: trainer
  namespace: default
type: Warning
reason: GangUnschedulable
message: needs 2 GPUs
count: 2
source:
  component: ganggate-controller
"""

LEASE = """\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: holder-test
spec:
  holderIdentity: ctl-7
"""


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory):
    home = tmp_path_factory.mktemp("kubectl-logs")
    kubeconfig = home / "kubeconfig"
    log = open(home / "serve.log", "w")
    process = subprocess.Popen([GANGGATE, "sim", "serve", "--port", "0", "--nodes", "1", "--kubeconfig-out",
                                str(kubeconfig)], stdout=log, stderr=subprocess.STDOUT)
    env = dict(os.environ, HOME=str(home), KUBECONFIG=str(kubeconfig))

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    try:
        for _ in range(300):
            if kubeconfig.exists() and run("get", "nodes", check=False).returncode == 0:
                break
            assert process.poll() is None, (home / "serve.log").read_text()
            time.sleep(0.1)
        run.env = env  # type: ignore[attr-defined]  # the tests read kubectl's environment off the fixture
        yield run
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def _wait_running(kubectl, name: str) -> None:
    for _ in range(300):
        if kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running":
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never ran")


def test_logs_show_the_containers_start_and_follow_ends_with_its_kill(kubectl) -> None:
    kubectl("run", "trainer", "--image=busybox:1.36", "--restart=Never", "--command", "--", "python", "train.py")
    _wait_running(kubectl, "trainer")
    assert kubectl("logs", "trainer").stdout == \
        "kubesim: container trainer started on node node-0: python train.py\n"
    follow = subprocess.Popen([KUBECTL, "logs", "-f", "trainer"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=kubectl.env)
    first = follow.stdout.readline()  # it is following once it has printed what is there
    kubectl("delete", "pod", "trainer", "--grace-period=1", "--wait=false")
    rest, err = follow.communicate(timeout=60)
    out = first + rest
    assert follow.returncode == 0, err
    assert out.splitlines() == [
        "kubesim: container trainer started on node node-0: python train.py",
        "kubesim: received SIGTERM (the pod is being deleted, grace period 1s)",
        "kubesim: killed by SIGKILL at the end of the grace period (exit code 137)",
    ]


def test_logs_of_a_missing_container_say_which_exist(kubectl) -> None:
    kubectl("run", "solo", "--image=busybox:1.36", "--restart=Never")
    result = kubectl("logs", "solo", "-c", "nope", check=False)
    assert result.returncode != 0 and "container nope is not valid for pod solo" in result.stderr


def test_get_events_prints_type_reason_object_and_message(kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=EVENT)
    lines = kubectl("get", "events").stdout.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    row = next(line for line in lines if "GangUnschedulable" in line)
    assert row.split()[1:] == ["Warning", "GangUnschedulable", "pod/trainer", "needs", "2", "GPUs"]
    wide = kubectl("get", "events", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE",
                               "FIRST", "SEEN", "COUNT", "NAME"]
    assert "ganggate-controller" in next(line for line in wide if "GangUnschedulable" in line)


def test_get_leases_names_the_holder(kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=LEASE)
    lines = kubectl("get", "leases").stdout.splitlines()
    assert lines[0].split() == ["NAME", "HOLDER", "AGE"]
    assert lines[1].split()[:2] == ["holder-test", "ctl-7"]


def test_get_nodes_wide_has_the_real_servers_extra_columns(kubectl) -> None:
    header, row = kubectl("get", "nodes", "-o", "wide").stdout.splitlines()[:2]
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
                              "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    assert row.split()[0] == "node-0" and len(row.split()) == 10
