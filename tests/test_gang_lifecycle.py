"""A gang's life after admission, in the pure core: terminating pods hold room, members lost,
gangs that wait too long, the timeout annotation."""

from __future__ import annotations

import pytest

from ganggate.contract import GROUP_TIMEOUT_SECONDS, ContractError, parse_gang, parse_timeout
from ganggate.core.planner import decide
from ganggate.core.policy.lifecycle import gangs_timed_out, judge_loss
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z
GANG = ("default", "next")


def terminating(pod: dict, reason: str | None = None) -> dict:
    pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    if reason:
        pod.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason})
    return pod


def released(name: str, gang: str = "old", n: int = 2, node: str | None = "n1", phase: str = "Running",
             owner: str | None = "job", min_available: int | None = None) -> dict:
    return make_pod(name, gang=gang, pod_num=n, min_available=min_available, gpus=4, gated=False,
                    node_name=node, phase=phase, owner=owner,
                    decision={"id": "d1", "time": "2024-01-01T00:00:00Z", "node": "n1", "gang": f"default/{gang}",
                              "pods": n})


def test_a_terminating_pod_holds_its_room_and_the_gang_that_needs_it_waits_saying_so() -> None:
    state = ClusterState()
    going = terminating(make_pod("old-0", gpus=8, node_name="n1", phase="Running"))
    state.reset([make_node("n1", gpus=8)], [going])
    state.apply_pod("ADDED", make_pod("next-0", gang="next", pod_num=1, gpus=8))
    decisions, waitings = decide(state, T0)
    assert decisions == []
    [waiting] = [w for w in waitings if w.gang_key == GANG]
    assert waiting.event_reason == "GangWaiting"
    assert "waiting for 1 terminating pod to go from 1 node (n1)" in waiting.message
    # Once the pod is gone, the room is the gang's.
    state.apply_pod("DELETED", going)
    decisions, _ = decide(state, T0)
    assert [d.placement for d in decisions] == [{"default/next-0": "n1"}]


def test_a_gang_that_would_not_fit_even_without_the_terminating_pods_is_unschedulable() -> None:
    state = ClusterState()
    running = make_pod("busy-0", gpus=4, node_name="n1", phase="Running")  # not going: room may free up later
    state.reset([make_node("n1", gpus=8)], [running, terminating(make_pod("old-0", gpus=2, node_name="n1",
                                                                          phase="Running"))])
    state.apply_pod("ADDED", make_pod("next-0", gang="next", pod_num=1, gpus=8))
    _, waitings = decide(state, T0)
    assert [w.event_reason for w in waitings if w.gang_key == GANG] == ["GangUnschedulable"]


def test_a_gang_larger_than_any_node_is_told_it_can_never_fit_not_to_wait_for_terminating_pods() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=8)], [terminating(make_pod("old-0", gpus=2, node_name="n1", phase="Running"))])
    state.apply_pod("ADDED", make_pod("next-0", gang="next", pod_num=1, gpus=16))
    _, waitings = decide(state, T0)
    assert [w.event_reason for w in waitings if w.gang_key == GANG] == ["GangCannotFit"]


def test_pods_being_deleted_are_not_members_so_replacements_make_the_gang_whole() -> None:
    state = ClusterState()
    old = [terminating(released(f"w-{i}", gang="next")) for i in range(2)]
    state.reset([make_node("n1", gpus=8), make_node("n2", gpus=8)], old)
    for i in range(2):
        state.apply_pod("ADDED", make_pod(f"w-new-{i}", gang="next", pod_num=2, gpus=4, owner="job"))
    gang = state.gangs[GANG]
    assert gang.state == "waiting" and gang.live_count == 2
    decisions, _ = decide(state, T0)
    # n1 is still held by the terminating pods: the new pods go to n2.
    assert [set(d.placement.values()) for d in decisions] == [{"n2"}]


def test_a_failed_member_is_a_loss_once_and_a_restart_deletes_only_owned_released_pods() -> None:
    state = ClusterState()
    pods = [released("w-0", gang="train", n=3), released("w-1", gang="train", n=3),
            released("w-2", gang="train", n=3, owner=None)]
    state.reset([make_node("n1", gpus=16)], pods)
    assert state.take_losses() == []
    state.apply_pod("MODIFIED", released("w-0", gang="train", n=3, phase="Failed"))
    state.apply_pod("MODIFIED", released("w-0", gang="train", n=3, phase="Failed"))  # a repeat
    [loss] = state.take_losses()
    assert (loss.pod_key, loss.cause, loss.decision_id) == ("default/w-0", "Failed", "d1")
    breakage = judge_loss(state, loss)
    assert breakage.below_min and (breakage.left, breakage.min_available) == (2, 3)
    assert [p.name for p in breakage.to_delete] == ["w-1"] and [p.name for p in breakage.bare] == ["w-2"]
    text = breakage.message("restart")
    assert "lost pod w-0 (Failed: its container failed)" in text and "deleting 1 pod" in text and "1 pod without an owning" in text
    assert "not restarted (--on-member-loss=none)" in breakage.message("none")


def test_the_cause_is_the_disruption_target_reason_and_deletion_is_seen_once() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=16)], [released("w-0"), released("w-1")])
    state.apply_pod("MODIFIED", terminating(released("w-1"), "PreemptionByScheduler"))
    state.apply_pod("DELETED", terminating(released("w-1"), "PreemptionByScheduler"))
    [loss] = state.take_losses()
    assert loss.cause == "PreemptionByScheduler" and "preempted" in loss.cause_text
    state.apply_pod("DELETED", released("w-0"))  # gone without a terminating step
    assert [x.cause for x in state.take_losses()] == ["Deleted"]


def test_success_and_gated_pods_are_not_losses_and_an_extra_lost_does_not_break_the_gang() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=16)], [released(f"w-{i}", n=3, min_available=2) for i in range(3)])
    state.apply_pod("MODIFIED", released("w-0", n=3, min_available=2, phase="Succeeded"))
    assert state.take_losses() == []
    state.apply_pod("MODIFIED", released("w-1", n=3, min_available=2, phase="Failed"))
    [loss] = state.take_losses()
    breakage = judge_loss(state, loss)
    assert not breakage.below_min and breakage.to_delete == []  # w-0 succeeded, w-2 runs: 2 of 2
    state.apply_pod("DELETED", make_pod("g", gang="old", pod_num=3))  # never seen: nothing
    assert state.take_losses() == []


def test_a_relist_finds_a_gang_still_broken_but_not_one_healed_or_restarted() -> None:
    state = ClusterState()
    nodes = [make_node("n1", gpus=16)]
    state.reset(nodes, [released("w-0", phase="Failed"), released("w-1")])
    assert [(x.pod_key, x.cause) for x in state.take_losses()] == [("default/w-0", "Failed")]
    state.reset(nodes, [released("w-0", phase="Failed"), terminating(released("w-1"))])
    assert state.take_losses() == []  # already being restarted: no live member left


def test_timeouts_parse_and_bad_values_are_refused() -> None:
    base = {"scheduling.k8s.io/group-name": "g", "scheduling.k8s.io/group-pod-num": "2"}
    assert parse_timeout({**base, GROUP_TIMEOUT_SECONDS: "600"}) == 600
    assert parse_timeout(base) is None
    for bad in ("0", "-5", "1.5", "ten", "0600", str(10**12)):
        error = parse_gang({**base, GROUP_TIMEOUT_SECONDS: bad})
        assert isinstance(error, ContractError) and error.annotation == GROUP_TIMEOUT_SECONDS
        assert "must be a plain decimal integer of seconds" in error.message()
    lone = parse_gang({GROUP_TIMEOUT_SECONDS: "60"})
    assert isinstance(lone, ContractError) and "is required when scheduling.k8s.io/group-timeout-seconds" in lone.message()


@pytest.mark.parametrize("pod_num,exist", [(2, 2), (3, 2)])
def test_a_gang_waiting_past_its_timeout_is_reported(pod_num: int, exist: int) -> None:
    state = ClusterState()
    pods = []
    for i in range(exist):
        pod = make_pod(f"w-{i}", gang="big", pod_num=pod_num, gpus=16)
        pod["metadata"]["annotations"][GROUP_TIMEOUT_SECONDS] = "600"
        pods.append(pod)
    state.reset([make_node("n1", gpus=8)], pods)
    assert gangs_timed_out(state.gangs, T0 + 600) == []
    assert gangs_timed_out(state.gangs, T0 + 601) == [(("default", "big"), 600)]
    assert gangs_timed_out(state.gangs, T0 + 601, skip=[("default", "big")]) == []


def test_status_says_a_gang_timed_out_or_is_broken() -> None:
    from ganggate.controller.status.tables import lifecycle_state

    state = ClusterState()
    pod = make_pod("w-0", gang="big", pod_num=1, gpus=16)
    pod["metadata"]["annotations"][GROUP_TIMEOUT_SECONDS] = "600"
    state.reset([make_node("n1", gpus=8)], [pod, released("t-0", gang="train", phase="Failed"),
                                            released("t-1", gang="train")])
    assert lifecycle_state(state.gangs[("default", "big")], T0 + 601) == "waiting (timed out after 600s)"
    assert lifecycle_state(state.gangs[("default", "big")], T0 + 60) == "waiting"
    assert lifecycle_state(state.gangs[("default", "train")], T0) == "broken (lost t-0: Failed)"


def test_the_lifecycle_flags_reach_the_controller_config() -> None:
    from ganggate.cli import build_parser
    from ganggate.controller.cli import config_from_args

    parser = build_parser()
    default = config_from_args(parser.parse_args(["controller", "--lease-namespace", "x"]))
    assert (default.on_member_loss, default.protect_running_gangs, default.on_bind_timeout) == (
        "restart", True, "member-loss")
    quiet = config_from_args(parser.parse_args(["controller", "--lease-namespace", "x", "--on-member-loss=none",
                                                "--no-protect-running-gangs", "--on-bind-timeout=wait"]))
    assert (quiet.on_member_loss, quiet.protect_running_gangs, quiet.on_bind_timeout) == ("none", False, "wait")
    with pytest.raises(SystemExit):
        parser.parse_args(["controller", "--on-member-loss=kill"])


def test_budgets_for_released_gangs_only_and_ours_deleted_when_the_gang_is_gone() -> None:
    from ganggate.controller.lifecycle.protection import plan_budgets

    state = ClusterState()
    state.reset([make_node("n1", gpus=16)], [released("t-0", gang="train", min_available=1),
                                             released("t-1", gang="train", min_available=1),
                                             make_pod("w-0", gang="wait", pod_num=1, gpus=4)])
    plan = plan_budgets(state.gangs, {("default", "ganggate-gone"): "gone"})
    [body] = plan.create
    assert body["metadata"]["name"] == "ganggate-train" and body["spec"]["minAvailable"] == 1
    assert body["spec"]["selector"] == {"matchLabels": {"ganggate.io/gang": "train"}}
    assert [o["kind"] for o in body["metadata"]["ownerReferences"]] == ["Job"]
    assert all(not o.get("controller") for o in body["metadata"]["ownerReferences"])
    assert plan.delete == [("default", "ganggate-gone")]
    again = plan_budgets(state.gangs, {("default", "ganggate-train"): "train"})
    assert (again.create, again.delete, again.covered) == ([], [], {})


def test_a_deleted_pod_whose_owner_is_gone_or_being_deleted_is_a_gang_going_away() -> None:
    from ganggate.controller.lifecycle.owners import controller_ref, owner_is_going

    state = ClusterState()
    pods = [released("t-0", gang="train", owner="train"), released("t-1", gang="train", owner="train")]
    state.reset([make_node("n1", gpus=16)], pods)
    state.apply_pod("MODIFIED", terminating(released("t-0", gang="train", owner="train")))
    [loss] = state.take_losses()
    assert loss.cause == "Deleted" and loss.owner == ("batch/v1", "Job", "train", "uid-train")

    ref = controller_ref(pods[0])
    job = {"metadata": {"name": "train", "uid": "uid-train"}}
    assert owner_is_going(ref, None)  # 404: deleted (background propagation)
    assert owner_is_going(ref, {"metadata": {"name": "train", "uid": "uid-train",
                                             "deletionTimestamp": "2024-01-01T00:01:00Z"}})  # foreground
    assert owner_is_going(ref, {"metadata": {"name": "train", "uid": "another"}})  # a new Job of that name
    assert not owner_is_going(ref, job)  # alive: a pod deleted under it is a member lost
    assert controller_ref(released("b-0", owner=None)) is None


def test_a_gang_that_lost_every_member_at_once_is_not_said_to_run_on() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=16)], [released(f"w-{i}", n=2) for i in range(2)])
    for i in range(2):  # both lost with their node before the controller looks
        state.apply_pod("MODIFIED", released(f"w-{i}", n=2, phase="Failed"))
    loss = state.take_losses()[0]
    text = judge_loss(state, loss).message("restart")
    assert "it runs on" not in text
    assert text.endswith("0 left, 2 needed: no member is left running, nothing to restart (pods recreated by "
                         "their owner come back gated and wait to be admitted whole)")


def test_a_member_on_a_node_not_ready_longer_than_node_lost_after_is_lost_and_the_gang_restarts() -> None:
    from ganggate.controller.round.timers import PAST, next_due
    from ganggate.core.policy.lifecycle import nodes_lost

    lost = make_node("n1", gpus=16, ready=False)
    lost["status"]["conditions"][0].update(status="Unknown", lastTransitionTime="2024-01-01T00:00:00Z")
    state = ClusterState()
    state.reset([lost, make_node("n2", gpus=16)], [released("w-0", n=2), released("w-1", n=2, node="n2")])
    assert nodes_lost(state, T0 + 30, 60) == []  # not yet
    assert next_due(state, T0 + 30, starvation_seconds=300, node_lost_after=60) == T0 + 60 + PAST
    [loss] = nodes_lost(state, T0 + 61, 60)
    assert (loss.pod_key, loss.cause) == ("default/w-0", "NodeLost")
    breakage = judge_loss(state, loss)
    assert breakage.below_min and [p.name for p in breakage.to_delete] == ["w-0", "w-1"]
    assert "(NodeLost: its node has not been Ready for longer than --node-lost-after)" in breakage.message("restart")


def test_a_loss_that_leaves_only_bare_pods_says_nothing_restarts_and_why() -> None:
    state = ClusterState()
    pods = [released(f"w-{i}", gang="train", n=4, owner=None) for i in range(4)]
    state.reset([make_node("n1", gpus=16)], pods)
    state.apply_pod("MODIFIED", released("w-0", gang="train", n=4, owner=None, phase="Failed"))
    [loss] = state.take_losses()
    text = judge_loss(state, loss).message("restart")
    assert "restarting" not in text
    assert text.endswith("not restarted: the 3 pods left have no owning controller to recreate them, and ganggate "
                         "never deletes such pods")
