"""kubesim's scheduling queue and nominator as kube-scheduler 1.35's, one behaviour at a time: a
pod, a node, the event, and the next scheduling attempt the source makes (the scheduler driven
without I/O: informer events in, cycles run by hand, its writes captured).

Sources: pkg/scheduler/schedule_one.go (schedulingCycle, handleSchedulingFailure, updatePod),
framework/preemption Evaluator.Preempt, backend/queue (scheduling_queue.go, active_queue.go,
backoff_queue.go, nominator.go), eventhandlers.go, each filter plugin's EventsToRegister.
"""

from __future__ import annotations

import pytest

from ganggate.core.state.snapshot import make_node, make_pod
from ganggate.sim.componentbase.featuregate import FeatureGates, parse
from ganggate.sim.scheduler import hints
from ganggate.sim.scheduler.queue import SchedulingQueue
from ganggate.sim.scheduler.scheduler import Scheduler

FIT = frozenset({hints.FIT})


class FakeTime:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Harness:
    """A Scheduler fed informer events by hand; its status patches are recorded, not sent."""

    def __init__(self, gates: FeatureGates | None = None, nodes: int = 2) -> None:
        self.scheduler = Scheduler("http://127.0.0.1:1", feature_gates=gates or FeatureGates())
        self.clock = self.scheduler.queue._now = FakeTime()
        self.patches: list[tuple[str, str | None, bool]] = []  # (pod, nominated, cleared)

        def capture(coro) -> None:
            frame = coro.cr_frame.f_locals
            if coro.__name__ == "_mark_unschedulable":
                self.patches.append((frame["pod"]["metadata"]["name"], frame.get("nominated"), frame.get("clear", False)))
            coro.close()

        self.scheduler._spawn = capture
        for i in range(nodes):
            self.scheduler.on_node("ADDED", make_node(f"node-{i}", gpus=8), None)

    def bind(self, name: str, node: str, gpus: int, priority: int | None = None) -> dict:
        pod = make_pod(name, gpus=gpus, node_name=node, phase="Running", priority=priority, uid=name)
        self.scheduler.on_pod("ADDED", pod, None)
        return pod

    def pending(self, name: str, gpus: int, priority: int | None = None, nominated: str | None = None, **kw) -> dict:
        pod = make_pod(name, gpus=gpus, priority=priority, uid=name, **kw)
        if nominated:
            pod["status"]["nominatedNodeName"] = nominated
        self.scheduler.on_pod("ADDED", pod, None)
        return pod

    def cycle(self) -> tuple[str | None, str | None]:
        """One scheduling cycle: (the pod tried, the node it was assumed onto), or (None, None)."""
        queued = self.scheduler.queue.pop()
        if queued is None:
            return None, None
        return queued.pod["metadata"]["name"], self.scheduler.schedule_one(queued)

    def run(self, wait: float = 0.0) -> list[tuple[str, str | None]]:
        """Cycles until the queue has nothing to pop (after `wait` seconds and the backoffQ flush)."""
        if wait:
            self.clock.t += wait
            self.scheduler.queue.flush_backoff()
        tried = []
        while (attempt := self.cycle())[0] is not None:
            tried.append(attempt)
        return tried


def _two_nodes_a_six_used(h: Harness) -> None:
    h.bind("used", "node-0", 6)
    h.bind("full", "node-1", 8)


# -- 1. the failure path: a nomination that cannot be honoured is cleared ----------------------


def test_a_failed_pod_whose_preemption_finds_no_candidate_loses_its_nomination_and_the_room_goes_to_the_next():
    h = Harness()
    _two_nodes_a_six_used(h)  # node-0: 2 of 8 GPUs free; node-1 full
    h.pending("nominated", 4, nominated="node-0")
    assert h.cycle() == ("nominated", None)  # fits nowhere, no lower-priority pod to preempt
    # Evaluator.Preempt: NewPostFilterResultWithNominatedNode("") -> the nominator forgets it, and
    # handleSchedulingFailure's updatePod writes nominatedNodeName away with the condition.
    assert h.scheduler.nominated.get("default/nominated") is None
    assert ("nominated", None, True) in h.patches
    h.pending("next", 2)  # equal priority, created afterwards
    assert h.cycle() == ("next", "node-0")


def test_the_nomination_is_kept_where_the_source_keeps_it_a_pod_that_may_not_preempt():
    h = Harness()
    _two_nodes_a_six_used(h)
    pod = h.pending("polite", 4, nominated="node-0")
    pod["spec"]["preemptionPolicy"] = "Never"  # PodEligibleToPreemptOthers: no -> nil result, ModeNoop
    assert h.cycle() == ("polite", None)
    assert h.scheduler.nominated.get("default/polite").node == "node-0"
    assert not any(cleared for _, _, cleared in h.patches)
    h.pending("next", 2)
    assert h.cycle() == ("next", None)  # node-0's 2 free GPUs are still held for it


# -- 2. pop from backoffQ when activeQ is empty (SchedulerPopFromBackoffQ) ---------------------


def _failed_three_times(queue: SchedulingQueue, clock: FakeTime):
    queue.add("p", make_pod("p", gpus=4, uid="p"))
    for attempt in range(3):
        if attempt:
            clock.t += 20.0  # its backoff long over
            queue.move(hints.ASSIGNED_POD_DELETE, make_pod("gone", gpus=4, node_name="node-0", uid="gone"), None)
        queued = queue.pop()
        queue.unschedulable_failed(queued, FIT)
    clock.t += 0.1  # then room frees up: an assigned pod is deleted
    queue.move(hints.ASSIGNED_POD_DELETE, make_pod("gone", gpus=4, node_name="node-0", uid="gone"), None)
    return queue


def test_a_backed_off_pod_woken_by_room_is_popped_at_once_when_nothing_else_is_queued():
    clock = FakeTime()
    queue = _failed_three_times(SchedulingQueue(now=clock), clock)
    assert queue.backoff_count() == 1 and queue.active_count() == 0  # 4 s of backoff left
    assert queue.pop().key == "p"  # activeQueue.unlockedPop: backoffQPopper


def test_without_the_gate_the_same_pod_waits_out_its_backoff():
    clock = FakeTime()
    queue = _failed_three_times(SchedulingQueue(pop_from_backoff=False, now=clock), clock)
    assert queue.pop() is None
    assert queue.next_wakeup() == pytest.approx(clock.t - 0.1 + 4.0)
    clock.t += 4.0
    queue.flush_backoff()
    assert queue.pop().key == "p"


def test_the_scheduler_takes_the_gate_from_its_feature_gates():
    assert Harness().scheduler.queue.pop_from_backoff
    assert not Harness(parse("SchedulerPopFromBackoffQ=false")).scheduler.queue.pop_from_backoff


# -- 3. a removed nomination, or a deleted nominated pod, requeues what it kept out ------------


def _kept_out(h: Harness) -> dict:
    _two_nodes_a_six_used(h)
    # A gated pod nominated by an update (as ganggate's controller does) holds node-0's 2 free GPUs
    # (PriorityQueue.Update -> UpdateNominatedPod; an Add of a gated pod would nominate nothing).
    created = h.pending("holder", 2, gated=True)
    holder = {**created, "status": {**created["status"], "nominatedNodeName": "node-0"}}
    h.scheduler.on_pod("MODIFIED", holder, created)
    h.pending("small", 2)
    h.pending("vip", 2, priority=100)  # above the holder: the room is not held against it
    tried = h.run()
    assert ("small", None) in tried and ("vip", "node-0") in tried
    # An assigned pod's deletion retries "small" (NodeResourcesFit's hint); the nomination still
    # keeps it out, and nothing else is going to move it.
    h.scheduler.on_pod("DELETED", make_pod("vip", gpus=2, node_name="node-0", uid="vip"), None)
    assert h.run(wait=20) == [("small", None)]
    assert h.run(wait=20) == []
    return holder


def test_removing_a_nomination_retries_the_lower_or_equal_priority_pods_it_kept_out():
    h = Harness()
    holder = _kept_out(h)
    cleared = {**holder, "status": {**holder["status"], "nominatedNodeName": None}, "metadata": {
        **holder["metadata"], "resourceVersion": "2"}}
    h.scheduler.on_pod("MODIFIED", cleared, holder)  # updatePodInSchedulingQueue: hasNominatedNodeNameChanged
    assert h.run() == [("small", "node-0")]


def test_deleting_a_nominated_pod_retries_the_pods_it_kept_out():
    h = Harness()
    holder = _kept_out(h)
    h.scheduler.on_pod("DELETED", holder, None)  # deletePodFromSchedulingQueue: it had a nomination
    assert h.run() == [("small", "node-0")]


def test_a_1_30_scheduler_does_not_requeue_on_a_removed_nomination():
    h = Harness(parse("", "1.30"))
    holder = _kept_out(h)
    cleared = {**holder, "status": {**holder["status"], "nominatedNodeName": None}}
    h.scheduler.on_pod("MODIFIED", cleared, holder)
    assert h.run(wait=20) == []


# -- 4. QueueingHints: an event moves only the pods it may help --------------------------------


def test_a_node_event_moves_a_pod_only_if_its_rejecting_plugin_says_queue():
    h = Harness(nodes=1)
    h.pending("big", 12)  # NodeResourcesFit
    h.pending("picky", 1, node_selector={"zone": "b"})  # NodeAffinity
    assert {name for name, _ in h.run()} == {"big", "picky"}
    node = make_node("node-0", gpus=8)
    labelled = make_node("node-0", gpus=8, labels={"zone": "b"})
    h.scheduler.on_node("MODIFIED", labelled, node)  # UpdateNodeLabel: NodeAffinity's hint -> Queue
    assert h.run() == [("picky", "node-0")]
    bigger = make_node("node-0", gpus=16, labels={"zone": "b"})
    h.scheduler.on_node("MODIFIED", bigger, labelled)  # UpdateNodeAllocatable: fits now -> Queue
    assert h.run() == [("big", "node-0")]


def test_a_deleted_pod_moves_pods_rejected_for_resources_not_those_rejected_by_a_taint():
    h = Harness(nodes=0)
    h.scheduler.on_node("ADDED", make_node("node-0", gpus=8, taints=[
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"}]), None)
    h.scheduler.on_node("ADDED", make_node("node-1", gpus=8), None)
    h.bind("user", "node-1", 8)
    h.pending("tainted-out", 1, node_selector={"kubernetes.io/hostname": "node-0"})  # TaintToleration
    h.pending("resources", 4, node_selector={"kubernetes.io/hostname": "node-1"})  # NodeResourcesFit
    assert {name for name, _ in h.run()} == {"tainted-out", "resources"}
    h.scheduler.on_pod("DELETED", make_pod("user", gpus=8, node_name="node-1", uid="user"), None)
    assert h.run() == [("resources", "node-1")]


def test_without_queueing_hints_a_node_update_moves_the_pods_that_would_fit_it():
    h = Harness(parse("", "1.30"), nodes=1)  # 1.30: SchedulerQueueingHints off, preCheckForNode
    h.pending("big", 12)
    h.pending("small-selective", 1, node_selector={"zone": "b"})
    assert {name for name, _ in h.run()} == {"big", "small-selective"}
    node = make_node("node-0", gpus=8)
    relabelled = make_node("node-0", gpus=8, labels={"zone": "b"})
    h.scheduler.on_node("MODIFIED", relabelled, node)
    assert h.run() == []  # no popping from backoffQ in 1.30: it waits out its 1 s
    h.clock.t += 1.5
    h.scheduler.queue.flush_backoff()
    assert h.run() == [("small-selective", "node-0")]  # "big" does not fit the node: preCheck keeps it


def test_a_status_change_of_an_unschedulable_pod_does_not_retry_it():
    h = Harness(nodes=1)
    pod = h.pending("big", 12)
    assert h.run() == [("big", None)]
    with_condition = {**pod, "status": {**pod["status"], "conditions": [{"type": "PodScheduled", "status": "False"}]}}
    h.scheduler.on_pod("MODIFIED", with_condition, pod)  # updatePodOther: no plugin registered it
    assert h.run() == []


# -- 5. the unschedulable flush: 5 minutes, checked every 30 s ---------------------------------


def test_a_pod_left_unschedulable_is_retried_after_five_minutes_not_before():
    clock = FakeTime()
    queue = SchedulingQueue(now=clock)
    queue.add("p", make_pod("p", uid="p"))
    queue.unschedulable_failed(queue.pop(), FIT)
    clock.t += 300.0
    assert queue.flush_unschedulable_leftover() == 0  # currentTime.Sub(lastScheduleTime) > 5 min
    clock.t += 30.0
    assert queue.flush_unschedulable_leftover() == 1
    assert queue.pop().key == "p"


# -- the gates as the real components take them ------------------------------------------------


def test_queueing_hints_are_locked_on_in_1_35_and_off_by_default_in_1_30():
    from ganggate.sim.componentbase.featuregate import FeatureGateError

    assert FeatureGates().enabled("SchedulerQueueingHints")
    with pytest.raises(FeatureGateError, match="cannot set feature gate SchedulerQueueingHints to false, "
                                               "feature is locked to true"):
        parse("SchedulerQueueingHints=false")
    old = parse("", "1.30")
    assert not old.enabled("SchedulerQueueingHints") and not old.enabled("SchedulerPopFromBackoffQ")
    assert not old.enabled("ClearingNominatedNodeNameAfterBinding")
    assert parse("SchedulerQueueingHints=true", "1.30").enabled("SchedulerQueueingHints")
    with pytest.raises(FeatureGateError, match="unrecognized feature gate: SchedulerPopFromBackoffQ"):
        parse("SchedulerPopFromBackoffQ=true", "1.30")
    assert parse("", "1.33").enabled("SchedulerPopFromBackoffQ")


def test_a_pod_that_failed_with_no_plugin_to_blame_waits_out_its_backoff_even_with_the_gate():
    clock = FakeTime()  # no nodes at all, a bind error: podErrorBackoffQ, which popBackoff leaves alone
    queue = SchedulingQueue(now=clock)
    queue.add("p", make_pod("p", uid="p"))
    assert queue.unschedulable_failed(queue.pop(), frozenset()) == "backoff"
    assert queue.pop() is None
    clock.t += 2.0  # 1 s, and the whole-second window it ends in
    queue.flush_backoff()
    assert queue.pop().key == "p"


def test_the_flags_give_the_scheduler_an_older_releases_gates_and_refuse_what_1_35_locks():
    from ganggate.sim.componentbase import featuregate

    class Args:
        feature_gates = ""
        scheduler_feature_gates = "SchedulerQueueingHints=false"
        scheduler_emulated_version = "1.35"

    with pytest.raises(featuregate.FeatureGateError, match="--scheduler-feature-gates: cannot set feature gate "
                                                           "SchedulerQueueingHints to false"):
        featuregate.from_arguments(Args())
    Args.scheduler_emulated_version = "1.30"
    cluster, scheduler = featuregate.from_arguments(Args())
    assert cluster.enabled("SchedulerQueueingHints") and not scheduler.enabled("SchedulerQueueingHints")
    assert scheduler.describe() == "1.30 defaults" and scheduler.version == "1.30"  # false is its default there
    assert not Harness(scheduler).scheduler.queue.queueing_hints
