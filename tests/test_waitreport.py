"""The waiting gangs' Events, told at the cost of what changed: the pods a user sees Events on
are the ones the notifier chose when every waiting gang was asked each round."""

from __future__ import annotations

from ganggate.controller.reporting.waitreport import WaitReport
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.outcome import Waiting
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0


def _state(pods: int = 2) -> ClusterState:
    state = ClusterState()
    state.reset([make_node("n0", gpus=1)],
                [make_pod(f"w-{i}", namespace="ml", gang="big", pod_num=pods, gpus=8) for i in range(pods)])
    return state


def _told(report: WaitReport, waitings: list[Waiting], now: float, state: ClusterState) -> list[tuple[str, str]]:
    sent: list[tuple[str, str]] = []
    report.report(waitings, now, state.gangs, lambda pod, reason, message: sent.append((pod.name, reason)))
    return sent


def test_a_waiting_given_again_is_not_told_again_until_its_repeat_falls_due() -> None:
    state, report = _state(), WaitReport()
    waiting = Waiting(("ml", "big"), "GangUnschedulable", "needs 8 nvidia.com/gpu on one node")
    assert _told(report, [waiting], T0, state) == [("w-0", "GangUnschedulable"), ("w-1", "GangUnschedulable")]
    assert _told(report, [waiting], T0 + 1, state) == []
    assert _told(report, [waiting], T0 + 299, state) == []
    assert _told(report, [waiting], T0 + 300, state) == [("w-0", "GangUnschedulable")]  # the repeat, on the first pod
    assert _told(report, [waiting], T0 + 301, state) == []


def test_a_new_message_and_a_new_pod_are_told_and_a_gang_that_stopped_waiting_is_forgotten() -> None:
    state, report = _state(), WaitReport()
    first = Waiting(("ml", "big"), "GangUnschedulable", "the largest free is 1")
    _told(report, [first], T0, state)
    changed = Waiting(("ml", "big"), "GangUnschedulable", "the largest free is 0")
    assert _told(report, [changed], T0 + 1, state) == [("w-0", "GangUnschedulable")]
    state.apply_pod("ADDED", make_pod("w-2", namespace="ml", gang="big", pod_num=2, gpus=8))
    again = Waiting(("ml", "big"), "GangUnschedulable", "the largest free is 0")  # planned again: a new object
    assert _told(report, [again], T0 + 2, state) == [("w-2", "GangUnschedulable")]
    assert _told(report, [], T0 + 3, state) == []  # released, say: forgotten
    assert _told(report, [again], T0 + 4, state) == [
        ("w-0", "GangUnschedulable"), ("w-1", "GangUnschedulable"), ("w-2", "GangUnschedulable")]


def test_the_same_list_handed_back_tells_nothing_new_and_still_repeats() -> None:
    """An incremental round in which nothing changed hands back last round's list itself."""
    state, report = _state(), WaitReport()
    waitings = [Waiting(("ml", "big"), "GangUnschedulable", "needs 8 nvidia.com/gpu on one node")]
    assert len(_told(report, waitings, T0, state)) == 2
    assert _told(report, waitings, T0 + 1, state) == []
    assert _told(report, waitings, T0 + 300, state) == [("w-0", "GangUnschedulable")]


def test_the_report_in_slices_tells_what_the_report_tells() -> None:
    import asyncio

    state = _state(3)
    waitings = [Waiting(("ml", "big"), "GangUnschedulable", "the largest free is 1")]
    sent: list[tuple[str, str]] = []
    asyncio.run(WaitReport().report_in_slices(waitings, T0, state.gangs,
                                              lambda pod, reason, message: sent.append((pod.name, reason)),
                                              slice_seconds=0.0))
    assert sent == _told(WaitReport(), waitings, T0, state)


def _incomplete(state: ClusterState) -> Waiting:
    return Waiting(("ml", "big"), "GangWaiting", state.gangs[("ml", "big")].waiting_message(), "incomplete")


def test_an_incomplete_gang_is_told_once_its_pods_stop_arriving() -> None:
    """While a gang's pods are still being created it is not told it is incomplete; once they stop
    arriving for settle_seconds, every pod hears it, as before."""
    state = ClusterState()
    state.reset([make_node("n0", gpus=1)], [make_pod(f"w-{i}", namespace="ml", gang="big", pod_num=4, gpus=8) for i in range(2)])
    report = WaitReport(settle_seconds=2.0)
    assert _told(report, [_incomplete(state)], T0, state) == []
    state.apply_pod("ADDED", make_pod("w-2", namespace="ml", gang="big", pod_num=4, gpus=8))
    assert _told(report, [_incomplete(state)], T0 + 1.5, state) == []  # another pod came: it starts again
    waitings = [_incomplete(state)]
    assert _told(report, waitings, T0 + 2.5, state) == []
    assert _told(report, waitings, T0 + 3.5, state) == [  # the same list: the settle falls due
        ("w-0", "GangWaiting"), ("w-1", "GangWaiting"), ("w-2", "GangWaiting")]
    assert _told(report, waitings, T0 + 10, state) == []


def test_a_gang_that_completes_while_its_pods_arrive_is_never_told_it_was_incomplete() -> None:
    state = ClusterState()
    state.reset([make_node("n0", gpus=1)], [make_pod("w-0", namespace="ml", gang="big", pod_num=2, gpus=8)])
    report = WaitReport(settle_seconds=2.0)
    assert _told(report, [_incomplete(state)], T0, state) == []
    state.apply_pod("ADDED", make_pod("w-1", namespace="ml", gang="big", pod_num=2, gpus=8))
    unfit = Waiting(("ml", "big"), "GangUnschedulable", "needs 8 nvidia.com/gpu on one node")
    assert _told(report, [unfit], T0 + 0.5, state) == [("w-0", "GangUnschedulable"), ("w-1", "GangUnschedulable")]
    assert _told(report, [unfit], T0 + 5, state) == []  # no GangWaiting falls due later
