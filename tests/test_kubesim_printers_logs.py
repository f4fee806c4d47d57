"""kubesim's event/lease Tables and a container's simulated stdout, as pure functions.

The columns are kube-apiserver's (pkg/printers/internalversion/printers.go); the log lines are
what the kubelet stand-in's containers print (ganggate/sim/api/containerlog.py). Over HTTP with
kubectl: tests/test_kubesim_kubectl_logs.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ganggate.sim.api.containerlog import container_log, finished
from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver.discovery import columns_for, table_of
from ganggate.sim.apiserver.registry.pod_log import check_started, pick_container, render, validate_options


def _ago(seconds: int) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_event_table_has_the_columns_kubectl_prints_and_wide_ones_at_priority_1() -> None:
    columns, _ = columns_for("Event")
    assert [(c["name"], c["priority"]) for c in columns] == [
        ("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1), ("Source", 1),
        ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)]


def test_a_core_event_row_reads_like_kubectl_get_events() -> None:
    event = {"metadata": {"name": "w-0.abc", "namespace": "ml"}, "type": "Warning", "reason": "GangUnschedulable",
             "involvedObject": {"kind": "Pod", "name": "w-0", "fieldPath": ""}, "message": "needs 4 GPUs \n",
             "firstTimestamp": _ago(300), "lastTimestamp": _ago(30), "count": 3,
             "source": {"component": "ganggate-controller", "host": "ctl-1"}}
    row = table_of("Event", [event], "7")["rows"][0]["cells"]
    assert row == ["30s", "Warning", "GangUnschedulable", "pod/w-0", "", "ganggate-controller, ctl-1", "needs 4 GPUs",
                   "5m", 3, "w-0.abc"]


def test_an_events_k8s_io_event_is_printed_through_the_fields_it_maps_to() -> None:
    event = {"metadata": {"name": "e"}, "type": "Normal", "reason": "Released", "regarding": {"kind": "Pod", "name": "p"},
             "note": "released", "eventTime": _ago(600).replace("Z", ".000000Z"), "reportingController": "ganggate",
             "series": {"count": 4, "lastObservedTime": _ago(10).replace("Z", ".000000Z")}}
    row = table_of("Event", [event], "7")["rows"][0]["cells"]
    assert row[:4] == ["10s", "Normal", "Released", "pod/p"]
    assert row[5:] == ["ganggate", "released", "10m", 4, "e"]


def test_a_singleton_event_counts_one_and_lease_rows_name_the_holder() -> None:
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Node"}, "firstTimestamp": _ago(5)}
    assert table_of("Event", [event], "1")["rows"][0]["cells"][3:] == ["node", "", "", "", "5s", 1, "e"]
    lease = {"metadata": {"name": "ganggate-controller", "creationTimestamp": _ago(60)}, "spec": {"holderIdentity": "ctl-1"}}
    assert table_of("Lease", [lease], "1")["rows"][0]["cells"] == ["ganggate-controller", "ctl-1", "60s"]


def _pod(**status: object) -> dict:
    return {"metadata": {"name": "w-0", "namespace": "ml"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "trainer", "image": "pytorch", "command": ["torchrun"],
                                                           "args": ["train.py"], "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": status}


def test_a_running_container_has_printed_its_start() -> None:
    pod = _pod(containerStatuses=[{"name": "trainer", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}])
    assert [line.text for line in container_log(pod, "trainer")] == [
        "kubesim: container trainer started on node node-1 with nvidia.com/gpu: 2: torchrun train.py"]
    assert not finished(pod, "trainer")


def test_a_deleted_container_prints_sigterm_then_sigkill() -> None:
    pod = _pod(containerStatuses=[{"name": "trainer", "state": {"terminated": {
        "exitCode": 137, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}}}])
    pod["metadata"].update(deletionTimestamp="2026-01-01T00:01:00Z", deletionGracePeriodSeconds=30)
    lines = container_log(pod, "trainer")
    assert [(line.time, line.text) for line in lines[1:]] == [
        ("2026-01-01T00:00:30Z", "kubesim: received SIGTERM (the pod is being deleted, grace period 30s)"),
        ("2026-01-01T00:01:00Z", "kubesim: killed by SIGKILL at the end of the grace period (exit code 137)")]
    assert finished(pod, "trainer")
    assert render(lines, validate_options("w-0", {"tailLines": "1"}), timestamps=True) == \
        b"2026-01-01T00:01:00Z kubesim: killed by SIGKILL at the end of the grace period (exit code 137)\n"


def test_a_failed_container_prints_its_exit_code_and_its_previous_run_is_kept() -> None:
    pod = _pod(containerStatuses=[{"name": "trainer", "restartCount": 1,
                                   "state": {"running": {"startedAt": "2026-01-01T00:02:00Z"}},
                                   "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                                "startedAt": "2026-01-01T00:00:00Z",
                                                                "finishedAt": "2026-01-01T00:01:00Z"}}}])
    assert container_log(pod, "trainer", previous=True)[-1].text == "kubesim: exited with code 1 (Error)"
    assert len(container_log(pod, "trainer")) == 1


@pytest.mark.parametrize("query, message", [
    ({"tailLines": "-1"}, 'PodLogOptions "w-0" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0'),
    ({"limitBytes": "0"}, 'PodLogOptions "w-0" is invalid: limitBytes: Invalid value: 0: must be greater than 0'),
    ({"tailLines": "x"}, 'strconv.ParseInt: parsing "x": invalid syntax'),
])
def test_bad_log_options_are_refused_as_the_api_server_refuses_them(query, message) -> None:
    with pytest.raises(errors.ApiError) as caught:
        validate_options("w-0", query)
    assert caught.value.status()["message"] == message


def test_the_container_is_named_or_the_only_one_and_must_have_started() -> None:
    pod = _pod()
    assert pick_container(pod, None) == "trainer"
    pod["spec"]["containers"].append({"name": "sidecar"})
    with pytest.raises(errors.ApiError, match=r"a container name must be specified for pod w-0, choose one of: \[trainer sidecar\]"):
        pick_container(pod, None)
    with pytest.raises(errors.ApiError, match="container nope is not valid for pod w-0"):
        pick_container(pod, "nope")
    with pytest.raises(errors.ApiError, match='container "trainer" in pod "w-0" is waiting to start: ContainerCreating'):
        check_started(pod, "trainer", previous=False)
    with pytest.raises(errors.ApiError, match='previous terminated container "trainer" in pod "w-0" not found'):
        check_started(pod, "trainer", previous=True)


def test_the_command_is_printed_with_its_variables_expanded_as_the_kubelet_expands_them() -> None:
    pod = _pod(containerStatuses=[{"name": "trainer", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}])
    pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "3"}
    container = pod["spec"]["containers"][0]
    container["args"] = ["--rank=$(RANK)", "--master=$(MASTER)", "$(UNSET)", "$$(RANK)"]
    container["env"] = [{"name": "RANK", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
        {"name": "MASTER", "value": "w-$(RANK).svc"}]
    assert container_log(pod, "trainer")[0].text.endswith("torchrun --rank=3 --master=w-3.svc $(UNSET) $(RANK)")
