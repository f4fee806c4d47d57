"""Drains of nodes that run gangs (core.policy.drain, controller.lifecycle.drain, controller.reporting.ownerevents):
which gangs move, which wait and what they say, and that the gang's owner hears it once."""

from __future__ import annotations

import pytest

from ganggate.controller.lifecycle.drain import NodeDrains
from ganggate.controller.reporting.ownerevents import OwnerEvents
from ganggate.core.policy.drain import plan_drains
from ganggate.core.state.cluster import ClusterState
from tests.test_status import node, pod

JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid", "controller": True}


def owned(p: dict, ref: dict = JOB) -> dict:
    p["metadata"]["ownerReferences"] = [dict(ref)]
    return p


def state_of(pods: list[dict], cordoned: tuple[str, ...] = ("gpu-0",)) -> ClusterState:
    state = ClusterState()
    state.reset([node(f"gpu-{i}", unschedulable=f"gpu-{i}" in cordoned) for i in range(3)], pods)
    return state


def running_gang(nodes: list[str], *, min_available: int | None = None, bare: int = 0) -> list[dict]:
    extra = {"scheduling.k8s.io/group-min-available": str(min_available)} if min_available else {}
    pods = [pod(f"w-{i}", "train", len(nodes), 1, gated=False, node_name=n, **extra) for i, n in enumerate(nodes)]
    return [p if i >= len(nodes) - bare else owned(p) for i, p in enumerate(pods)]


def test_a_gang_on_a_cordoned_node_is_restarted_whole_through_its_owner():
    state = state_of(running_gang(["gpu-0", "gpu-0", "gpu-1", "gpu-1"]))
    [move] = plan_drains(state.gangs, {"gpu-0"}, "restart")
    assert move.action == "restart" and move.reason == "GangRestartingForDrain" and move.nodes == ("gpu-0",)
    assert sorted(p.name for p in move.to_delete) == ["w-0", "w-1", "w-2", "w-3"]  # the whole gang, not the node's
    assert sorted(p.name for p in move.on_nodes) == ["w-0", "w-1"]
    assert ("node gpu-0 is cordoned (a drain or a node upgrade) and runs 2 of the 4 released pods of gang "
            "ml/train, which needs 4 to run: ganggate restarts the gang whole through its owner (Job train)") \
        in move.message


def test_spares_on_the_node_need_nothing_their_budget_lets_them_go():
    gang = running_gang(["gpu-0", "gpu-1", "gpu-1", "gpu-2"], min_available=3)
    assert plan_drains(state_of(gang).gangs, {"gpu-0"}, "restart") == []


def test_a_gang_with_a_bare_pod_waits_and_says_how_to_force_the_drain():
    state = state_of(running_gang(["gpu-0", "gpu-1"], bare=1))
    [move] = plan_drains(state.gangs, {"gpu-0"}, "restart")
    assert move.action == "wait" and move.reason == "GangBlocksDrain" and move.to_delete == ()
    assert "1 pod of it (w-1) without an owning controller, which ganggate never deletes" in move.message
    assert "`kubectl drain gpu-0 --ignore-daemonsets --delete-emptydir-data --disable-eviction`" in move.message
    assert "delete those pods yourself (`kubectl delete pods -n ml w-1`)" in move.message
    assert "or end it (`kubectl delete job train -n ml`)" in move.message
    assert "label node" not in move.message  # a label cannot move a pod nothing would recreate


def test_under_wait_nothing_is_deleted_and_the_message_names_the_flag():
    state = state_of(running_gang(["gpu-0", "gpu-1"]))
    [move] = plan_drains(state.gangs, {"gpu-0"}, "wait")
    assert move.action == "wait" and move.to_delete == ()
    assert "(ganggate keeps running gangs in place: controller flag --on-node-drain=wait)" in move.message
    assert "have ganggate restart it whole on the other nodes: `kubectl label node gpu-0 " \
           "ganggate.io/on-node-drain=restart`" in move.message
    assert "a Job counts them against its backoffLimit" in move.message  # what forcing the drain costs


def test_labels_override_the_flag_a_nodes_over_the_pods_and_a_bad_value_is_ignored_and_said():
    wait_pods = [p for p in running_gang(["gpu-0", "gpu-1"])]
    for p in wait_pods:
        p["metadata"]["labels"] = {"ganggate.io/on-node-drain": "wait"}
    state = state_of(wait_pods)
    [move] = plan_drains(state.gangs, {"gpu-0"}, "restart")
    assert move.action == "wait" and "pod label ganggate.io/on-node-drain=wait" in move.message
    [move] = plan_drains(state.gangs, {"gpu-0"}, "restart",
                         node_labels={"gpu-0": {"ganggate.io/on-node-drain": "restart"}})
    assert move.action == "restart" and "(node label ganggate.io/on-node-drain=restart;" in move.message
    [move] = plan_drains(state_of(running_gang(["gpu-0", "gpu-1"])).gangs, {"gpu-0"}, "wait",
                         node_labels={"gpu-0": {"ganggate.io/on-node-drain": "yes"}})
    assert move.action == "wait"
    assert "(node gpu-0's label ganggate.io/on-node-drain=yes is neither restart nor wait: ignored)" in move.message


def test_nothing_when_no_node_is_cordoned_a_gang_is_busy_or_the_policy_is_unknown():
    state = state_of(running_gang(["gpu-0", "gpu-1"]))
    assert plan_drains(state.gangs, set(), "restart") == []
    assert plan_drains(state.gangs, {"gpu-0"}, "restart", busy=lambda key: True) == []
    assert plan_drains(state_of([owned(pod("g-0", "g", 1, 1))]).gangs, {"gpu-0"}, "restart") == []  # gated
    with pytest.raises(ValueError, match="on_node_drain must be one of restart, wait, not 'evict'"):
        plan_drains(state.gangs, {"gpu-0"}, "evict")


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def emit(self, ref, reason, message, log_it=True):
        self.sent.append((f"{getattr(ref, 'kind', 'Pod')}/{ref.name}", reason, message))


def test_the_shell_restarts_once_and_tells_the_owner_the_pod_and_the_node_once():
    state = state_of(running_gang(["gpu-0", "gpu-1"]))
    recorder, restarted = Recorder(), []
    drains = NodeDrains(state, recorder, OwnerEvents(recorder), policy="restart",
                        restart=lambda key, pods, why: restarted.append((key, sorted(p.name for p in pods))),
                        busy=lambda key: bool(restarted))
    assert len(drains.handle(0.0)) == 1
    assert drains.handle(5.0) == []  # the restart is under way: nothing more
    assert restarted == [(("ml", "train"), ["w-0", "w-1"])]
    assert sorted(who for who, reason, _ in recorder.sent) == ["Job/train", "Node/gpu-0", "Pod/w-0"]
    assert {reason for _, reason, _ in recorder.sent} == {"GangRestartingForDrain"}


def test_a_bare_gang_on_a_cordoned_node_is_never_restarted_by_the_shell():
    state = state_of([pod(f"w-{i}", "train", 2, 1, gated=False, node_name="gpu-0") for i in range(2)])
    recorder, restarted = Recorder(), []
    drains = NodeDrains(state, recorder, OwnerEvents(recorder), policy="restart",
                        restart=lambda *args: restarted.append(args), busy=lambda key: False)
    [move] = drains.handle(0.0)
    assert move.action == "wait" and restarted == []
    assert sorted(who for who, _, _ in recorder.sent) == ["Node/gpu-0", "Pod/w-0"]  # no owner to tell


def test_the_owner_hears_a_gang_once_per_change_not_per_count():
    recorder = Recorder()
    owners = OwnerEvents(recorder)
    pods = list(state_of(running_gang(["gpu-1", "gpu-1"])).pods.values())
    key = ("ml", "train")
    assert owners.tell(key, pods, "GangUnschedulable", "room for 1 of them", kind="room")
    assert not owners.tell(key, pods, "GangUnschedulable", "room for 2 of them", kind="room")
    assert owners.tell(key, pods, "GangReleased", "released")
    assert [(who, reason) for who, reason, _ in recorder.sent] == [("Job/train", "GangUnschedulable"),
                                                                  ("Job/train", "GangReleased")]
    again = [p for p in state_of([owned(pod(f"w-{i}", "train", 2, 1, gated=False, node_name="gpu-1"),
                                        dict(JOB, uid="job-uid-2")) for i in range(2)]).pods.values()]
    assert owners.tell(key, again, "GangReleased", "released")  # the Job deleted and made again: told anew
