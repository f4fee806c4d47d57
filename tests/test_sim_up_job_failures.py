"""On `ganggate sim up`, driven by kubectl as an operator would: a Job whose gang annotations no pod
could pass is refused at apply, an unquoted number is refused by the API server's decoder, a Job
whose pods are refused shows FailedCreate in `kubectl describe job`, and the kubectl habits that
read whole objects from Tables (`--sort-by`, `-o custom-columns`) work. One `sim up` for all."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_sim_up import KUBECTL, eventually, released_and_running, start_up

TEMPLATE_DENIAL = 'admission webhook "gang-template.ganggate.io" denied the request: '

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
spec:
  parallelism: 2
  completions: 2
  template:
    metadata:
      labels: {labels}
      annotations:
        scheduling.k8s.io/group-name: {name}
        scheduling.k8s.io/group-pod-num: {pod_num}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        resources:
          limits:
            nvidia.com/gpu: "1"
"""


def job_yaml(name: str, namespace: str, pod_num: str, labels: str = "{}") -> str:
    return JOB.format(name=name, namespace=namespace, pod_num=pod_num, labels=labels)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    up = start_up(tmp_path_factory.mktemp("sim-up"), "--nodes", "2")
    yield up
    up.stop()


def apply(cluster, text: str):
    path = cluster.home / f"manifest-{abs(hash(text))}.yaml"
    path.write_text(text)
    return cluster.kubectl("apply", "-f", str(path))


def namespace(cluster, name: str) -> str:
    result = cluster.kubectl("create", "namespace", name)
    assert result.returncode == 0, result.stderr
    return name


def test_a_job_with_a_gang_annotation_no_pod_could_pass_is_refused_at_apply(cluster):
    ns = namespace(cluster, "typos")
    for value in ("abc", "-3", "0"):
        result = apply(cluster, job_yaml("typo", ns, f'"{value}"'))
        assert result.returncode != 0
        assert (TEMPLATE_DENIAL + f"annotation scheduling.k8s.io/group-pod-num='{value}': must be a plain decimal "
                "integer from 1 to 10000") in result.stderr, result.stderr
    missing = cluster.kubectl("get", "job", "typo", "-n", ns)
    assert missing.returncode != 0 and 'jobs.batch "typo" not found' in missing.stderr
    # An unquoted number is not a string: the API server's decoder refuses it, as a real one does.
    unquoted = apply(cluster, job_yaml("unquoted", ns, "2"))
    assert unquoted.returncode != 0
    assert ('Job in version "v1" cannot be handled as a Job: json: cannot unmarshal number into Go struct field '
            "ObjectMeta.spec.template.metadata.annotations of type string") in unquoted.stderr, unquoted.stderr
    # Quoted, the same Job is taken (and runs: the next test).
    assert apply(cluster, job_yaml("quoted", ns, '"2"')).returncode == 0


def test_events_sort_by_last_timestamp_and_pods_by_node_and_custom_columns(cluster):
    ns = namespace(cluster, "habits")
    assert apply(cluster, job_yaml("ddp", ns, '"2"')).returncode == 0
    eventually(lambda: len([p for p in cluster.pods(ns) if released_and_running(p)]) == 2, "the gang running")
    events = cluster.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp")
    assert events.returncode == 0, events.stderr
    lines = events.stdout.splitlines()
    assert lines[0].split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"] and "No resources found" not in events.stderr
    reasons = [line.split()[2] for line in lines[1:]]
    assert "SuccessfulCreate" in reasons  # the Job controller's, on the Job
    listed = json.loads(cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    stamps = sorted(e["lastTimestamp"] for e in listed)
    assert len(lines) - 1 == len(listed) and stamps == [e["lastTimestamp"] for e in sorted(listed, key=lambda e: e["lastTimestamp"])]
    by_node = cluster.kubectl("get", "pods", "-n", ns, "--sort-by=.spec.nodeName", "-o", "wide")
    assert by_node.returncode == 0, by_node.stderr
    nodes = [line.split()[6] for line in by_node.stdout.splitlines()[1:]]
    assert len(nodes) == 2 and nodes == sorted(nodes) and all(n.startswith("node-") for n in nodes)
    columns = cluster.kubectl("get", "pods", "-n", ns, "-o", "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName")
    assert columns.returncode == 0, columns.stderr
    rows = [line.split() for line in columns.stdout.splitlines()]
    assert rows[0] == ["NAME", "NODE"] and sorted(r[1] for r in rows[1:]) == sorted(nodes)


def test_a_job_whose_pods_are_refused_shows_failed_create_in_describe(cluster):
    ns = namespace(cluster, "refused")
    policy = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-unreviewed-pods
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  validations:
  - expression: "!has(object.metadata.labels) || !('unreviewed' in object.metadata.labels)"
    message: pods must be reviewed
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-unreviewed-pods
spec:
  policyName: no-unreviewed-pods
  validationActions: [Deny]
"""
    assert apply(cluster, policy).returncode == 0
    try:
        result = apply(cluster, job_yaml("blocked", ns, '"2"', labels="{unreviewed: 'yes'}"))
        assert result.returncode == 0, result.stderr  # the Job itself is fine; its pods are not
        described = eventually(lambda: (d := cluster.kubectl("describe", "job", "blocked", "-n", ns).stdout)
                               and "FailedCreate" in d and d, "FailedCreate in kubectl describe job")
        line = next(line for line in described.splitlines() if "FailedCreate" in line)
        assert re.search(r"Warning\s+FailedCreate\s+\S+\s+job-controller\s+Error creating: pods \"blocked-[a-z0-9]{5}\" "
                         r"is forbidden: ValidatingAdmissionPolicy 'no-unreviewed-pods' with binding "
                         r"'no-unreviewed-pods' denied request: pods must be reviewed", line), line
        assert cluster.pods(ns) == []
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", "no-unreviewed-pods")
