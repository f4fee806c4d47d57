"""`ganggate status` formatting (pure): gangs with their state and why they wait, nodes with their GPUs."""

from __future__ import annotations

import json

from ganggate.contract import GATE_NAME, GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM
from ganggate.controller.release.patches import DECISION_ANNOTATION
from ganggate.controller.status.tables import age, format_status, lease_line
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState

NOW = 1_800_000_000.0


def node(name, gpus=8, unschedulable=False):
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name, group, num, gpus, ns="ml", gated=True, node_name=None, released_by_ganggate=True, **extra):
    """A gang pod; an ungated one carries ganggate's decision unless it bypassed the gate."""
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    annotations = {GROUP_NAME: group, GROUP_POD_NUM: str(num), **extra}
    if gated:
        spec["schedulingGates"] = [{"name": GATE_NAME}]
    elif released_by_ganggate:
        annotations[DECISION_ANNOTATION] = json.dumps({"id": "d1", "time": "2027-01-15T08:00:01Z",
                                                       "node": node_name, "gang": f"{ns}/{group}", "pods": num})
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "creationTimestamp": "2027-01-15T08:00:00Z",
                     "annotations": annotations},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def render(nodes, pods, namespace=None):
    state = ClusterState()
    state.reset(nodes, pods)
    decisions, waitings = decide(state, NOW)
    return format_status(state, decisions, waitings, NOW, namespace)


def test_status_shows_each_gang_why_it_waits_and_node_gpus():
    nodes = [node("gpu-0"), node("gpu-1", unschedulable=True)]
    pods = (
        [pod(f"big-{i}", "big", 2, 8) for i in range(2)]  # needs two 8-GPU nodes, one is cordoned
        + [pod("half-0", "half", 2, 1)]  # incomplete
        + [pod(f"run-{i}", "run", 2, 2, gated=False, node_name="gpu-0") for i in range(2)]
    )
    text = render(nodes, pods)
    gang_lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("ml/")}
    assert gang_lines["ml/big"].split()[1:4] == ["waiting", "2/2", "16"]
    assert "GangUnschedulable" in gang_lines["ml/big"]
    assert "GangWaiting: 1 of 2 pods exist" in gang_lines["ml/half"]
    assert gang_lines["ml/run"].split()[1:3] == ["running", "2/2"]
    node_lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("gpu-")}
    assert node_lines["gpu-0"] == ["gpu-0", "Ready", "8", "4", "0", "4"]
    assert node_lines["gpu-1"][1] == "Ready,SchedulingDisabled"


def test_a_gang_whose_pods_all_finished_reads_as_succeeded_or_failed_not_running():
    def finished(name, group, phase):
        done = pod(name, group, 2, 1, gated=False, node_name="gpu-0")
        done["status"]["phase"] = phase
        return done

    pods = [finished("ok-0", "ok", "Succeeded"), finished("ok-1", "ok", "Succeeded"),
            finished("bad-0", "bad", "Succeeded"), finished("bad-1", "bad", "Failed")]
    text = render([node("gpu-0")], pods)
    gang_lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("ml/")}
    assert gang_lines["ml/ok"][1:3] == ["succeeded", "0/2"]
    assert gang_lines["ml/bad"][1:3] == ["failed", "0/2"]


def test_status_says_when_a_gang_fits_now_and_filters_by_namespace():
    nodes = [node("gpu-0")]
    pods = [pod(f"a-{i}", "a", 2, 2) for i in range(2)] + [pod("b-0", "b", 1, 1, ns="other")]
    text = render(nodes, pods, namespace="ml")
    assert "ml/a" in text and "fits: 2 pods to release" in text
    assert "other/b" not in text
    assert "No gangs in namespace nowhere." in render(nodes, pods, namespace="nowhere")


def test_age_reads_like_kubectl():
    assert [age(s) for s in (5, 192, 7500, 3 * 86400 + 4 * 3600)] == ["5s", "3m12s", "2h5m", "3d4h"]


def test_gangs_that_bypassed_the_gate_show_as_not_gated_with_the_likely_causes():
    nodes = [node("gpu-0")]
    pods = (
        [pod(f"free-{i}", "free", 4, 1, gated=False, node_name="gpu-0", released_by_ganggate=False) for i in range(4)]
        + [pod("bad-0", "bad", 4, 1, gated=False, node_name="gpu-0", released_by_ganggate=False,
               **{GROUP_MIN_AVAILABLE: "6"})]
        + [pod(f"ok-{i}", "ok", 1, 1, gated=False, node_name="gpu-0") for i in range(1)]
    )
    lines = {line.split()[0]: line for line in render(nodes, pods).splitlines() if line.startswith("ml/")}
    assert lines["ml/free"].split()[1:4] == ["not-gated", "4/4", "4"]
    assert "4 pods of gang ml/free were created without the scheduling gate" in lines["ml/free"]
    assert "webhook is not installed" in lines["ml/free"] and "failurePolicy is Ignore" in lines["ml/free"]
    assert lines["ml/bad"].split()[1] == "not-gated"
    assert "1 pod of gang ml/bad was created" in lines["ml/bad"]
    assert GROUP_MIN_AVAILABLE in lines["ml/bad"] and "bad-0" in lines["ml/bad"]
    assert lines["ml/ok"].split()[1:3] == ["running", "1/1"]


def test_the_lease_line_names_the_leader_or_why_none_leads():
    def lease(holder, renewed_ago, duration=15):
        return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                         "renewTime": _rfc3339(NOW - renewed_ago)}}

    assert lease_line(lease("ctl-abc", 3), "gg", "ctl", NOW) == "controller: leader ctl-abc (lease renewed 3s ago)"
    assert lease_line(None, "gg", "ctl", NOW) == "controller: no controller is leading (lease gg/ctl not found)"
    assert lease_line(lease("ctl-abc", 55), "gg", "ctl", NOW) == (
        "controller: no controller is leading (lease gg/ctl expired 40s ago, last holder ctl-abc)")
    assert lease_line(lease("", 4, duration=1), "gg", "ctl", NOW) == (
        "controller: no controller is leading (lease gg/ctl given up 4s ago)")


def _rfc3339(epoch):
    from ganggate.kube.leader import micro_time

    return micro_time(epoch)


def test_status_says_a_running_gang_is_protected_by_a_users_budget_not_ganggates():
    pods = [pod(f"run-{i}", "run", 2, 2, gated=False, node_name="gpu-0") for i in range(2)]
    for p in pods:
        p["metadata"]["labels"] = {"app": "run"}
    team = {"metadata": {"name": "team", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "run"}}}}
    ours = {"metadata": {"name": "ganggate-run", "namespace": "ml",
                         "labels": {"ganggate.io/gang": "run", "app.kubernetes.io/managed-by": "ganggate"}},
            "spec": {"selector": {"matchLabels": {"app": "run"}}}}
    state = ClusterState()
    state.reset([node("gpu-0")], pods)
    text = format_status(state, *decide(state, NOW), NOW, budgets=[team, ours])
    [line] = [line for line in text.splitlines() if line.startswith("ml/run")]
    assert line.endswith("protected by PodDisruptionBudget team (not ganggate's)")
    assert "protected" not in format_status(state, *decide(state, NOW), NOW, budgets=[ours])


def test_status_refuses_bad_topology_levels_before_reaching_the_cluster(capsys):
    from ganggate.cli import main

    assert main(["status", "--kubeconfig", "/nonexistent", "--topology-levels", "rack,rack"]) == 2
    assert capsys.readouterr().err == "error: --topology-levels: topology_levels: a level is listed twice\n"
