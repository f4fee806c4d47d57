"""The pure parts of kubesim's scheduler: filters, scores, fit errors, accounting, queue order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.fit.resources import GPU
from ganggate.core.state.snapshot import make_node, make_pod
from ganggate.sim.helpers.podrequests import node_allocatable, pod_requests
from ganggate.sim.scheduler import plugins as sched_filters
from ganggate.sim.scheduler.cache import ClusterCache, PodEntry
from ganggate.sim.scheduler.queue import SchedulingQueue
from ganggate.sim.scheduler.schedule_one import Algorithm

GI = 2**30 * 1000  # 1Gi in milli-units


def decide(algorithm: Algorithm, pod: dict, key: str | None = None, assume: bool = True):
    request, nonzero = pod_requests(pod), sched_filters.nonzero_requests(pod)
    decision = algorithm.schedule(pod, request, nonzero)
    if assume and decision.node is not None:
        algorithm.assume(key or pod["metadata"]["name"], decision.node, request, nonzero)
    return decision


def cluster(n: int, **node_kwargs) -> Algorithm:
    cache = ClusterCache()
    for i in range(n):
        cache.set_node(make_node(f"gpu-{i}", **node_kwargs))
    return Algorithm(cache, seed=1)


# -- FitError messages (pkg/scheduler/framework/types.go) ---------------------------------


def test_fit_error_counts_each_reason_over_nodes():
    reasons = [["Insufficient nvidia.com/gpu"]] * 4
    assert sched_filters.fit_error_message(4, reasons) == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_fit_error_sorts_rendered_reasons_as_strings_and_joins_with_comma():
    reasons = (
        [["Insufficient cpu", "Insufficient memory"]] * 10
        + [["node(s) had untolerated taint {dedicated: infra}"]] * 2
        + [["node(s) were unschedulable"]]
    )
    # Go's sort.Strings on "<count> <reason>": "10 ..." sorts before "2 ...".
    assert sched_filters.fit_error_message(13, reasons) == (
        "0/13 nodes are available: 1 node(s) were unschedulable, 10 Insufficient cpu, "
        "10 Insufficient memory, 2 node(s) had untolerated taint {dedicated: infra}."
    )


def test_no_nodes_at_all_is_its_own_error():
    assert sched_filters.fit_error_message(0, []) == "no nodes available to schedule pods"


def test_first_failing_plugin_names_the_node():
    tainted = make_node("t", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}], labels={"a": "b"})
    pod = make_pod("p", gpus=9, node_selector={"a": "c"})
    request = pod_requests(pod)
    # TaintToleration runs before NodeAffinity and NodeResourcesFit.
    assert sched_filters.node_filter_reasons(pod, request, tainted, {}, {}, 0) == [
        "node(s) had untolerated taint {dedicated: infra}"
    ]
    plain = make_node("n", labels={"a": "b"})
    assert sched_filters.node_filter_reasons(pod, request, plain, {}, {}, 0) == [
        "node(s) didn't match Pod's node affinity/selector"
    ]


def test_resources_fit_reports_every_insufficient_resource_and_pod_count():
    allocatable = {"cpu": 4000, "memory": 8 * GI, "pods": 2000, GPU: 8000}
    requested = {"cpu": 3500, "memory": 1 * GI, GPU: 8000}
    request = {"cpu": 1000, "memory": 1 * GI, GPU: 1000, "pods": 1000}
    assert sched_filters.insufficient_resources(request, allocatable, requested, 2) == [
        "Too many pods",
        "Insufficient cpu",
        f"Insufficient {GPU}",
    ]
    assert sched_filters.insufficient_resources({"example.com/fpga": 1000}, allocatable, {}, 0) == [
        "Insufficient example.com/fpga"
    ]


# -- scores (noderesources/least_allocated_test.go, balanced_allocation_test.go) -----------


def test_least_allocated_matches_upstream_examples():
    # "nothing scheduled, resources requested, differently sized nodes": cpu 3000m, memory 5000
    assert sched_filters.least_allocated_score({"cpu": 3000, "memory": 5000}, {"cpu": 4000, "memory": 10000}) == 37
    assert sched_filters.least_allocated_score({"cpu": 3000, "memory": 5000}, {"cpu": 6000, "memory": 10000}) == 50
    # requested over capacity scores 0 for that resource
    assert sched_filters.least_allocated_score({"cpu": 5000, "memory": 0}, {"cpu": 4000, "memory": 10000}) == 50


def test_balanced_allocation_matches_upstream_example():
    # fractions 0.75 and 0.5: std 0.125 -> (1 - 0.125) * 100 = 87
    assert sched_filters.balanced_allocation_score({"cpu": 3000, "memory": 5000}, {"cpu": 4000, "memory": 10000}) == 87


def test_nonzero_requests_default_missing_cpu_and_memory_only():
    pod = make_pod("p")
    pod["spec"]["containers"].append({"name": "bare", "image": "x"})
    pod["spec"]["containers"].append(
        {"name": "zero", "image": "x", "resources": {"requests": {"cpu": "0", "memory": "0"}}}
    )
    cpu, memory = sched_filters.nonzero_requests(pod)
    assert cpu == 1000 + 100  # the explicit zero stays zero
    assert memory == 1 * GI + 200 * 2**20 * 1000


@pytest.mark.parametrize("nodes,expected", [(50, 50), (100, 100), (200, 100), (1000, 420), (5000, 500), (10000, 500)])
def test_num_feasible_nodes_to_find(nodes, expected):
    assert sched_filters.num_feasible_nodes_to_find(nodes) == expected


# -- the algorithm over the cache ----------------------------------------------------------


def test_least_allocated_spreads_pods_over_identical_nodes():
    algorithm = cluster(4)
    placed = [decide(algorithm, make_pod(f"p{i}", cpu="1", memory="1Gi")).node for i in range(8)]
    assert sorted(placed.count(f"gpu-{i}") for i in range(4)) == [2, 2, 2, 2]


def test_prefers_the_emptier_node():
    algorithm = cluster(2)
    algorithm.cache.add_pod("busy", PodEntry("gpu-0", {"cpu": 32000, "memory": 256 * GI, "pods": 1000}, 32000, 256 * GI))
    assert decide(algorithm, make_pod("p", cpu="1")).node == "gpu-1"


def test_nine_gpus_fit_nowhere_on_eight_gpu_nodes():
    algorithm = cluster(4, gpus=8)
    decision = decide(algorithm, make_pod("big", gpus=9))
    assert decision.node is None
    assert decision.message == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_assumed_pods_count_at_once_and_free_on_removal():
    algorithm = cluster(1, gpus=8)
    for i in range(8):
        assert decide(algorithm, make_pod(f"p{i}", gpus=1), key=f"p{i}").node == "gpu-0"
    assert algorithm.cache.free("gpu-0")[GPU] == 0
    assert decide(algorithm, make_pod("late", gpus=1)).node is None
    algorithm.cache.remove_pod("p3")
    assert decide(algorithm, make_pod("late", gpus=1)).node == "gpu-0"


def _pod_with_containers(name: str, *requests: dict) -> dict:
    pod = make_pod(name)
    pod["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x", "resources": {"requests": r}} for i, r in enumerate(requests)
    ]
    return pod


def test_sub_milli_cpu_is_summed_before_it_is_rounded():
    """PodRequests adds exact Quantities and NodeResourcesFit takes MilliValue() of the total:
    three 0.5m containers need 2m (ganggate.core's arithmetic said 3m and left this node out)."""
    algorithm = cluster(1, gpus=0, cpu="2m")
    assert decide(algorithm, _pod_with_containers("p", {"cpu": "0.5m"}, {"cpu": "0.5m"}, {"cpu": "0.5m"})).node == "gpu-0"


def test_memory_counts_in_whole_bytes():
    """Resource.Add takes Value() for memory: "memory: 100m" (a typo for 100Mi) costs one byte."""
    algorithm = cluster(1, gpus=0, memory="2")
    assert decide(algorithm, _pod_with_containers("a", {"memory": "100m"})).node == "gpu-0"
    assert decide(algorithm, _pod_with_containers("b", {"memory": "100m"})).node == "gpu-0"
    decision = decide(algorithm, _pod_with_containers("c", {"memory": "100m"}))
    assert decision.message == "0/1 nodes are available: 1 Insufficient memory."


def test_a_node_with_exa_quantities_is_cached():
    """"E" (10^18) and "Ei" (2^60) are quantity suffixes (quantity_test.go); the cache takes such
    a node, and amounts beyond its int64 milli-unit columns saturate instead of overflowing."""
    cache = ClusterCache()
    cache.set_node(make_node("big", gpus=1, extra={"ephemeral-storage": "0.001E", "example.com/pool": "1Ei"}))
    free = cache.free("big")
    assert free["ephemeral-storage"] == 10**15 * 1000
    assert free["example.com/pool"] == 2**62  # 2^60 units are 1.15e21 milli-units: saturated
    algorithm = Algorithm(cache)
    assert decide(algorithm, _pod_with_containers("p", {"ephemeral-storage": "1E"})).node is None


def test_pods_of_a_removed_node_count_again_when_it_returns():
    algorithm = cluster(1, gpus=8)
    decide(algorithm, make_pod("p", gpus=6), key="p")
    algorithm.cache.remove_node("gpu-0")
    assert decide(algorithm, make_pod("q", gpus=1)).message == "no nodes available to schedule pods"
    algorithm.cache.set_node(make_node("gpu-0", gpus=8))
    assert algorithm.cache.free("gpu-0")[GPU] == 2000


def test_init_containers_sidecars_and_overhead_count():
    algorithm = cluster(1, gpus=8, cpu="10")
    pod = make_pod("p", gpus=2, cpu="1")
    pod["spec"]["initContainers"] = [
        {"name": "warmup", "image": "x", "resources": {"limits": {GPU: "8"}}},  # needs all 8 for a moment
        {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "2"}}},
    ]
    pod["spec"]["overhead"] = {"cpu": "500m"}
    assert pod_requests(pod)["cpu"] == 3500
    assert decide(algorithm, pod, key="p").node == "gpu-0"
    free = algorithm.cache.free("gpu-0")
    assert free[GPU] == 0  # the init step's 8 GPUs are the effective request
    assert free["cpu"] == 10000 - 3500
    decision = decide(algorithm, make_pod("q", gpus=1))
    assert decision.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_node_selector_taints_and_cordon_filter():
    cache = ClusterCache()
    cache.set_node(make_node("a100", labels={"accel": "a100"}))
    cache.set_node(make_node("h100", labels={"accel": "h100"}, taints=[{"key": "gpu", "value": "", "effect": "NoSchedule"}]))
    cache.set_node(make_node("off", labels={"accel": "h100"}, unschedulable=True))
    algorithm = Algorithm(cache)
    decision = decide(algorithm, make_pod("p", node_selector={"accel": "h100"}), assume=False)
    assert decision.message == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {gpu: }, 1 node(s) were unschedulable."
    )
    tolerant = make_pod("t", node_selector={"accel": "h100"}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert decide(algorithm, tolerant, assume=False).node == "h100"
    cache.set_node(make_node("h100", labels={"accel": "h100"}))  # taint removed
    assert decide(algorithm, make_pod("p", node_selector={"accel": "h100"}), assume=False).node == "h100"


_node_strategy = st.fixed_dictionaries(
    {
        "gpus": st.integers(0, 8),
        "cpu": st.sampled_from(["4", "8", "64"]),
        "label": st.sampled_from(["a", "b"]),
        "taint": st.sampled_from([None, "gpu", "infra"]),
        "ready": st.booleans(),
        "cordon": st.booleans(),
        "used_gpus": st.integers(0, 8),
        "used_cpu": st.integers(0, 8000),
        "pods": st.sampled_from(["1", "3", "110"]),
        "used_pods": st.integers(0, 2),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(_node_strategy, min_size=1, max_size=12),
    gpus=st.integers(0, 9),
    cpu=st.sampled_from(["0", "500m", "2", "9"]),
    selector=st.sampled_from([None, "a", "b"]),
    tolerate=st.sampled_from([None, "gpu"]),
)
def test_vectorized_filters_agree_with_the_per_node_reference(nodes, gpus, cpu, selector, tolerate):
    cache = ClusterCache(capacity=4)  # small, so the arrays grow under the test
    objects = []
    for i, n in enumerate(nodes):
        taints = [{"key": n["taint"], "value": "x", "effect": "NoSchedule"}] if n["taint"] else []
        node = make_node(
            f"n{i}", gpus=n["gpus"], cpu=n["cpu"], pods=n["pods"], labels={"zone": n["label"]},
            taints=taints, ready=n["ready"], unschedulable=n["cordon"],
        )
        cache.set_node(node)
        used = {"cpu": n["used_cpu"], GPU: n["used_gpus"] * 1000, "pods": 1000}
        for j in range(n["used_pods"]):
            cache.add_pod(f"n{i}-{j}", PodEntry(f"n{i}", used if j == 0 else {"pods": 1000}, 0, 0))
        objects.append((node, used if n["used_pods"] else {}, n["used_pods"]))
    pod = make_pod(
        "p", gpus=gpus, cpu=cpu,
        node_selector={"zone": selector} if selector else None,
        tolerations=[{"key": tolerate, "operator": "Exists", "effect": "NoSchedule"}] if tolerate else (),
    )
    request = pod_requests(pod)
    algorithm = Algorithm(cache)
    fits, counts = algorithm.feasible_mask(pod, request)
    reference = [
        sched_filters.node_filter_reasons(pod, request, node, node_allocatable(node), used, count)
        for node, used, count in objects
    ]
    for i, reasons in enumerate(reference):
        assert bool(fits[cache.index[f"n{i}"]]) == (reasons == []), (i, reasons)
    decision = algorithm.schedule(pod, request, sched_filters.nonzero_requests(pod))
    if all(reference):
        assert decision.message == sched_filters.fit_error_message(len(nodes), reference)
    else:
        assert decision.node is not None and reference[int(decision.node[1:])] == []


@settings(max_examples=40, deadline=None)
@given(
    used=st.lists(st.tuples(st.integers(0, 60000), st.integers(0, 500)), min_size=2, max_size=8),
    cpu=st.integers(0, 4000),
    memory_gi=st.integers(0, 16),
)
def test_vectorized_scores_agree_with_the_reference(used, cpu, memory_gi):
    cache = ClusterCache()
    for i, (used_cpu, used_memory_gi) in enumerate(used):
        cache.set_node(make_node(f"n{i}", cpu="64", memory="512Gi"))
        cache.add_pod(f"u{i}", PodEntry(f"n{i}", {"cpu": used_cpu, "memory": used_memory_gi * GI, "pods": 1000},
                                        used_cpu or 100, used_memory_gi * GI or 200 * 2**20 * 1000))
    request = {"cpu": cpu, "memory": memory_gi * GI, "pods": 1000}
    nonzero = (cpu or 100, memory_gi * GI or 200 * 2**20 * 1000)
    algorithm = Algorithm(cache)
    slots = np.array([cache.index[f"n{i}"] for i in range(len(used))])
    got = algorithm.scores(slots, request, nonzero)
    allocatable = {"cpu": 64000, "memory": 512 * GI}
    for i, (used_cpu, used_memory_gi) in enumerate(used):
        entry = cache.pods[f"u{i}"]
        least = sched_filters.least_allocated_score(
            {"cpu": entry.nonzero_cpu + nonzero[0], "memory": entry.nonzero_memory + nonzero[1]}, allocatable
        )
        balanced = 0
        if not sched_filters.is_best_effort(request):
            balanced = sched_filters.balanced_allocation_score(
                {"cpu": used_cpu + cpu, "memory": (used_memory_gi + memory_gi) * GI}, allocatable
            )
        assert int(got[i]) == least + balanced


def test_ties_are_broken_by_the_seeded_random():
    picks = []
    for _ in range(2):
        algorithm = cluster(6)
        picks.append([decide(algorithm, make_pod(f"p{i}", cpu="1"), assume=False).node for i in range(5)])
    assert picks[0] == picks[1]
    assert len(set(picks[0])) > 1


# -- the queue (pkg/scheduler/backend/queue) -----------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_queue_pops_by_priority_then_arrival():
    queue = SchedulingQueue()
    queue.add("low-1", make_pod("low-1"))
    queue.add("high", make_pod("high", priority=100))
    queue.add("low-2", make_pod("low-2"))
    queue.add("mid", make_pod("mid", priority=10))
    assert [queue.pop().key for _ in range(4)] == ["high", "mid", "low-1", "low-2"]
    assert queue.pop() is None


def test_gated_pods_wait_until_the_gate_is_removed():
    queue = SchedulingQueue()
    queue.add("g", make_pod("g", gang="job", pod_num=2))
    assert queue.pop() is None and "g" in queue.gated
    queue.update("g", make_pod("g", gang="job", pod_num=2, gated=False))
    assert queue.pop().key == "g"


def test_unschedulable_pods_move_on_cluster_events_respecting_backoff():
    clock = FakeTime()  # SchedulerPopFromBackoffQ off: a backed-off pod waits out its backoff
    queue = SchedulingQueue(initial_backoff_seconds=1, max_backoff_seconds=10, max_unschedulable_seconds=60,
                            pop_from_backoff=False, now=clock)
    queue.add("p", make_pod("p"))
    queued = queue.pop()
    queue.unschedulable_failed(queued)
    assert queue.pop() is None
    queue.move_all_to_active_or_backoff()  # still backing off (1 s after the first attempt)
    queue.flush()
    assert queue.pop() is None
    assert queue.next_wakeup() == pytest.approx(101.0)
    clock.t = 101.001  # isPodBackingoff: still backing off at the expiry itself
    queue.flush()
    queued = queue.pop()
    assert queued.key == "p" and queued.attempts == 2
    queue.unschedulable_failed(queued)
    assert queue.backoff_until(queued) == pytest.approx(103.001)  # doubled
    clock.t = 200.0  # left unschedulable longer than max_unschedulable_seconds
    queue.flush()
    assert queue.pop().key == "p"


def test_a_spec_change_retries_an_unschedulable_pod_but_a_status_change_does_not():
    clock = FakeTime()  # without SchedulerQueueingHints (isPodUpdated); with them see test_kubesim_queue.py
    queue = SchedulingQueue(queueing_hints=False, now=clock)
    pod = make_pod("p")
    queue.add("p", pod)
    queue.unschedulable_failed(queue.pop(), frozenset({"NodeResourcesFit"}))
    clock.t += 5
    with_status = dict(pod, status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]})
    queue.update("p", with_status)
    assert queue.pop() is None
    relabelled = dict(with_status, metadata=dict(pod["metadata"], labels={"x": "y"}))
    queue.update("p", relabelled)
    assert queue.pop().key == "p"


def test_a_failed_pod_queues_behind_pods_that_waited_longer():
    clock = FakeTime()
    queue = SchedulingQueue(now=clock)
    queue.add("a", make_pod("a"))
    first = queue.pop()
    queue.add("b", make_pod("b"))
    queue.unschedulable_failed(first)
    clock.t += 20
    queue.move_all_to_active_or_backoff()
    assert [queue.pop().key, queue.pop().key] == ["b", "a"]



# -- the shell's bookkeeping, without I/O --------------------------------------------------


def test_the_unschedulable_condition_is_written_only_when_the_message_changes():
    from ganggate.sim.scheduler.scheduler import Scheduler

    scheduler = Scheduler("http://127.0.0.1:1", pod_initial_backoff_seconds=0)
    written: list[str] = []

    def capture(coro):
        written.append(coro.cr_frame.f_locals["message"])
        coro.close()

    scheduler._spawn = capture
    scheduler.on_node("ADDED", make_node("n0", gpus=8), None)
    pod = make_pod("big", gpus=9)
    scheduler.on_pod("ADDED", pod, None)

    def cycle():
        queued = scheduler.queue.pop()
        assert queued is not None
        return scheduler.schedule_one(queued)

    assert cycle() is None
    assert written == ["0/1 nodes are available: 1 Insufficient nvidia.com/gpu."]
    # The condition comes back through the watch: a status change is no reason to retry.
    with_condition = dict(pod, status={"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": written[0]}]})
    scheduler.on_pod("MODIFIED", with_condition, pod)
    assert scheduler.queue.pop() is None
    # A retry (forced: no node event here could help the pod) does not write the same verdict again.
    scheduler.on_node("MODIFIED", make_node("n0", gpus=8, labels={"x": "y"}), None)
    scheduler.queue.move_all_to_active_or_backoff()
    assert cycle() is None
    assert len(written) == 1
    # A new node changes the message: written once more.
    scheduler.on_node("ADDED", make_node("n1", gpus=4), None)
    scheduler.queue.move_all_to_active_or_backoff()
    assert cycle() is None
    assert written[1:] == ["0/2 nodes are available: 2 Insufficient nvidia.com/gpu."]
    # Back to the first verdict before the watch showed the second write: written again,
    # since the server holds the second message whatever our stale copy of the pod says.
    scheduler.on_node("DELETED", make_node("n1", gpus=4), None)
    scheduler.on_node("MODIFIED", make_node("n0", gpus=8, labels={"x": "z"}), None)
    scheduler.queue.move_all_to_active_or_backoff()
    assert cycle() is None
    assert written[2:] == ["0/1 nodes are available: 1 Insufficient nvidia.com/gpu."]
    # Room at last: the pod is assumed onto the node, counted before any bind round-trip.
    scheduler.on_node("ADDED", make_node("n2", gpus=16), None)
    assert cycle() == "n2"
    assert scheduler.cache.free("n2")[GPU] == 7000
    # The watch shows our own status write while the bind is in flight: still not pending.
    scheduler.on_pod("MODIFIED", with_condition, with_condition)
    assert scheduler.queue.pop() is None
    bound = dict(with_condition, spec=dict(pod["spec"], nodeName="n2"))
    scheduler.on_pod("MODIFIED", bound, with_condition)
    assert not scheduler.cache.pods["default/big"].assumed
    finished = dict(bound, status={"phase": "Succeeded"})
    scheduler.on_pod("MODIFIED", finished, bound)
    assert scheduler.cache.free("n2")[GPU] == 16000


def test_each_cycle_scores_the_next_slice_of_feasible_nodes():
    # 200 nodes: numFeasibleNodesToFind is 100, and the next cycle starts where this one stopped
    # (schedule_one.go nextStartNodeIndex), so consecutive pods look at different nodes.
    algorithm = cluster(200)
    fits = algorithm.cache.valid.copy()
    first = algorithm._candidates(fits)
    assert list(first) == list(range(100)) and algorithm.next_start_index == 100
    second = algorithm._candidates(fits)
    assert list(second) == list(range(100, 200)) and algorithm.next_start_index == 0
    fits[:150] = False  # only 50 feasible: all of them are scored
    assert list(algorithm._candidates(fits)) == list(range(150, 200))
