"""The planner: where a gang's pods go, which gangs go first, and what never happens."""

from __future__ import annotations

from collections import Counter

from ganggate.core.fit.resources import GPU
from ganggate.core.planner import Capacity, Unfit, count_only_fits, decide, plan_gang, totals_only_fits
from ganggate.core.state.cluster import ClusterState, PodInfo
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z



def held_on(message: str, count: str = "1 node") -> bool:
    """The Waiting's message says room is held back on so many nodes (named, with the starts the
    hold was weighed by) and promises no start."""
    return f"capacity held back on {count} (" in message and "at the latest" not in message

def ts(seconds: int) -> str:
    return f"2024-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def gang(name: str, n: int, gpus: int, *, created: int = 0, ns: str = "ml", **kw) -> list[dict]:
    return [make_pod(f"{name}-{i}", namespace=ns, gang=name, pod_num=n, gpus=gpus, created=ts(created), **kw)
            for i in range(n)]


def running(name: str, node: str, gpus: int, **kw) -> dict:
    return make_pod(name, namespace="busy", gpus=gpus, node_name=node, phase="Running", **kw)


def cluster(nodes: list[dict], pods: list[dict]) -> ClusterState:
    state = ClusterState()
    state.reset(nodes, pods)
    return state


def by_gang(decisions) -> dict[str, dict]:
    return {d.gang_key[1]: d.placement for d in decisions}


def per_node(placement: dict) -> dict:
    return dict(Counter(placement.values()))


# ---- packing -------------------------------------------------------------------------------


def test_a_homogeneous_gang_goes_onto_as_few_nodes_as_possible() -> None:
    state = cluster([make_node(f"n{i}") for i in range(4)], gang("job", 4, 4))
    decisions, waiting = decide(state, T0)
    assert waiting == []
    assert sorted(per_node(by_gang(decisions)["job"]).values()) == [2, 2]


def test_best_fit_keeps_whole_nodes_free_for_big_pods() -> None:
    nodes = [make_node("two-free"), make_node("four-free"), make_node("empty")]
    pods = [running("r1", "two-free", 6), running("r2", "four-free", 4)]
    state = cluster(nodes, pods + gang("small", 1, 2) + gang("mid", 1, 4, created=1) + gang("big", 1, 8, created=2))
    placed = by_gang(decide(state, T0)[0])
    assert placed == {"small": {"ml/small-0": "two-free"}, "mid": {"ml/mid-0": "four-free"},
                      "big": {"ml/big-0": "empty"}}


def test_a_gang_of_two_shapes_fits_where_it_can() -> None:
    # 2 pods of 8 GPUs and 4 of 2: exactly three 8-GPU nodes' worth... on four nodes.
    nodes = [make_node(f"n{i}") for i in range(4)]
    pods = [running("r", "n3", 8)]
    mixed = gang("mixed", 6, 2)
    for pod in mixed[:2]:
        pod["spec"]["containers"][0]["resources"]["limits"][GPU] = "8"
    state = cluster(nodes, pods + mixed)
    placement = by_gang(decide(state, T0)[0])["mixed"]
    assert len(placement) == 6
    assert placement["ml/mixed-0"] != placement["ml/mixed-1"]
    assert per_node(placement)[placement["ml/mixed-2"]] == 4  # the small ones share one node


def test_launcher_goes_to_a_cpu_node_and_workers_take_whole_gpu_nodes() -> None:
    nodes = [make_node("gpu-a", cpu="16"), make_node("gpu-b", cpu="16"), make_node("cpu-only", gpus=0, cpu="32")]
    workers = [make_pod(f"w-{i}", namespace="ml", gang="mpi", pod_num=3, gpus=8, cpu="12") for i in range(2)]
    launcher = make_pod("launcher", namespace="ml", gang="mpi", pod_num=3, gpus=0, cpu="8")
    placement = by_gang(decide(cluster(nodes, workers + [launcher]), T0)[0])["mpi"]
    assert placement["ml/launcher"] == "cpu-only"
    assert {placement["ml/w-0"], placement["ml/w-1"]} == {"gpu-a", "gpu-b"}


def test_min_available_starts_the_gang_with_what_fits_and_leaves_the_rest_gated() -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    pods = gang("elastic", 8, 4, min_available=4)
    state = cluster(nodes, pods)
    decisions, waiting = decide(state, T0)
    placement = by_gang(decisions)["elastic"]
    assert len(placement) == 6 and max(per_node(placement).values()) == 2
    # Too little for min-available: nothing at all (and one node of 8 GPUs never holds 4 pods of 4).
    state = cluster(nodes[:1], gang("elastic", 8, 4, min_available=4))
    decisions, waiting = decide(state, T0)
    assert decisions == []
    assert [w.event_reason for w in waiting] == ["GangCannotFit"]
    # Too little now, while a running pod holds a node: it waits for room.
    state = cluster(nodes[:2], [running("r", "n1", 4)] + gang("elastic", 8, 4, min_available=4))
    decisions, waiting = decide(state, T0)
    assert decisions == [] and [w.event_reason for w in waiting] == ["GangUnschedulable"]


def test_extras_of_a_started_gang_go_one_by_one_as_room_appears() -> None:
    nodes = [make_node("n0")]
    pods = gang("elastic", 4, 4, min_available=2)
    d = {"id": "d1", "time": ts(0), "node": "n0", "gang": "ml/elastic", "pods": 2}
    released = [make_pod(f"elastic-{i}", namespace="ml", gang="elastic", pod_num=4, min_available=2, gpus=4,
                         gated=False, node_name="n0", phase="Running", decision=d) for i in range(2)]
    state = cluster(nodes, released + pods[2:])
    assert state.gangs[("ml", "elastic")].state == "started"
    assert decide(state, T0) == ([], [])  # no room, no noise
    state.apply_node("ADDED", make_node("n1", gpus=4))
    decisions, _ = decide(state, T0)
    assert [len(x.placement) for x in decisions] == [1] and not decisions[0].roll_forward


def test_selectors_and_taints_limit_the_nodes() -> None:
    nodes = [
        make_node("a100-0", labels={"accel": "a100"}),
        make_node("h100-0", labels={"accel": "h100"}, taints=[{"key": "h100", "effect": "NoSchedule"}]),
        make_node("h100-1", labels={"accel": "h100"}, taints=[{"key": "h100", "effect": "NoSchedule"}]),
    ]
    wants_h100 = gang("h", 2, 8, node_selector={"accel": "h100"},
                      tolerations=[{"key": "h100", "operator": "Exists", "effect": "NoSchedule"}])
    anywhere = gang("any", 2, 8, created=1)
    decisions, waiting = decide(cluster(nodes, wants_h100 + anywhere), T0)
    assert sorted(by_gang(decisions)["h"].values()) == ["h100-0", "h100-1"]
    assert [(w.gang_key[1], w.message) for w in waiting] == [
        ("any", "needs 2 pods of 8 GPUs each; the free GPUs have room for 1 of them "
                "(on the 1 node its pods may use; 2 node(s) had untolerated taint {h100: })")
    ]
    untolerated = gang("t", 1, 1, node_selector={"accel": "h100"})
    _, waiting = decide(cluster(nodes, untolerated), T0)
    assert waiting[0].message == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) had untolerated taint {h100: }"
    )


def test_unfit_messages_say_what_is_short() -> None:
    nodes = [make_node("n0", cpu="16"), make_node("n1", cpu="16")]
    state = cluster(nodes, [running("r", "n0", 2), running("s", "n1", 2)] + gang("big", 1, 8))
    assert decide(state, T0)[1][0].message == "needs 8 nvidia.com/gpu on one node; the largest free is 6"
    state = cluster(nodes, gang("fat", 1, 4, cpu="32"))
    assert decide(state, T0)[1][0].message.startswith(  # no node has 32 cpu at all: it can never fit
        "a pod needs 32 cpu on one node, but the largest node it may use has 16 cpu allocatable")
    state = cluster(nodes, [running("r", "n0", 0, cpu="10"), running("s", "n1", 0, cpu="10")] + gang("fit", 1, 4, cpu="8"))
    assert decide(state, T0)[1][0].message == "needs 8 cpu on one node; the largest free among nodes with 4 free GPU is 6"


# ---- baselines -------------------------------------------------------------------------------


def requests(pods: list[dict]) -> list[dict]:
    return [PodInfo.from_pod(p).request for p in pods]


def test_count_only_ignores_cpu_and_memory_shortage_on_the_gpu_nodes() -> None:
    nodes = [make_node(f"n{i}", cpu="64") for i in range(2)]
    busy = [running(f"cpu-hog-{i}", f"n{i}", 0, cpu="60") for i in range(2)]
    job = gang("job", 2, 8, cpu="8")
    state = cluster(nodes, busy + job)
    free = {n: state.free(n) for n in state.nodes}
    assert count_only_fits(requests(job), free)  # wrong: no node has 8 CPUs left
    assert isinstance(plan_gang(list(state.gangs[("ml", "job")].pods.values()), Capacity.from_state(state)), Unfit)
    decisions, waiting = decide(state, T0)
    assert decisions == [] and "cpu" in waiting[0].message
    assert [d.gang_key for d in decide(state, T0, policy="count")[0]] == [("ml", "job")]


def test_totals_only_thinks_pods_are_divisible() -> None:
    nodes = [make_node(f"n{i}") for i in range(8)]
    busy = [running(f"r{i}", f"n{i}", 7) for i in range(8)]  # one GPU free on each of 8 nodes
    job = gang("job", 4, 2)
    state = cluster(nodes, busy + job)
    free = {n: state.free(n) for n in state.nodes}
    assert totals_only_fits(requests(job), free)  # wrong: 8 GPUs free, but 1 per node
    assert not count_only_fits(requests(job), free)
    decisions, waiting = decide(state, T0)
    assert decisions == []
    assert waiting[0].message == "needs 2 nvidia.com/gpu on one node; the largest free is 1"


def test_all_three_agree_when_it_plainly_fits() -> None:
    job = gang("job", 4, 4)
    state = cluster([make_node("n0"), make_node("n1")], job)
    free = {n: state.free(n) for n in state.nodes}
    assert count_only_fits(requests(job), free) and totals_only_fits(requests(job), free)
    assert len(decide(state, T0)[0]) == 1


def test_count_policy_releases_unpinned_and_ignores_promises() -> None:
    state = cluster([make_node("n0")], gang("a", 2, 4) + gang("b", 2, 4, created=5))
    decisions, waiting = decide(state, T0, policy="count")
    assert [d.gang_key[1] for d in decisions] == ["a"]
    assert all(node is None for node in decisions[0].placement.values())
    assert waiting[0].message.endswith("free GPUs have room for 0 pods")


# ---- ordering, backfill, starvation -------------------------------------------------------


def test_higher_priority_first_then_older_first() -> None:
    nodes = [make_node("n0")]
    old_low = gang("old-low", 1, 8, created=0, priority=0)
    new_high = gang("new-high", 1, 8, created=50, priority=1000)
    decisions, waiting = decide(cluster(nodes, old_low + new_high), T0 + 60)
    assert [d.gang_key[1] for d in decisions] == ["new-high"]
    older, younger = gang("older", 1, 8, created=0), gang("younger", 1, 8, created=10)
    decisions, waiting = decide(cluster(nodes, younger + older), T0 + 60)
    assert [d.gang_key[1] for d in decisions] == ["older"]
    assert [w.gang_key[1] for w in waiting] == ["younger"]


def starving_cluster() -> ClusterState:
    nodes = [make_node("nearly-full"), make_node("half-full")]
    busy = [running("r1", "nearly-full", 6), running("r2", "half-full", 4)]
    busy[0]["status"]["startTime"] = "2023-12-27T00:00:00Z"  # running for 5 days: likely for days more
    big = gang("big", 1, 8, created=0)  # fits nowhere now
    quarter = gang("quarter", 1, 4, created=10)  # fits only on half-full
    small = gang("small", 1, 2, created=20)  # fits on nearly-full
    return cluster(nodes, busy + big + quarter + small)


def test_a_gang_that_does_not_fit_does_not_block_smaller_ones() -> None:
    decisions, waiting = decide(starving_cluster(), T0 + 60, starvation_seconds=300)
    assert by_gang(decisions) == {"quarter": {"ml/quarter-0": "half-full"}, "small": {"ml/small-0": "nearly-full"}}
    assert [w.gang_key[1] for w in waiting] == ["big"]


def test_a_starving_gang_gets_capacity_held_back_until_it_fits() -> None:
    decisions, waiting = decide(starving_cluster(), T0 + 301, starvation_seconds=300)
    # The node its plan would use is held (half-full: nearly-full's pod has run for days, so
    # its free GPUs would likely idle for days); the rest is usable.
    assert by_gang(decisions) == {"small": {"ml/small-0": "nearly-full"}}
    assert {w.gang_key[1] for w in waiting} == {"big", "quarter"}
    big = next(w for w in waiting if w.gang_key[1] == "big")
    assert held_on(big.message)
    # Once the running pod on the held node finishes, the starving gang goes there first.
    state = starving_cluster()
    state.apply_pod("DELETED", running("r2", "half-full", 4))
    decisions, _ = decide(state, T0 + 400, starvation_seconds=300)
    assert by_gang(decisions)["big"] == {"ml/big-0": "half-full"}
    assert "quarter" not in by_gang(decisions)


def test_capacity_is_held_back_for_one_starving_gang_at_a_time() -> None:
    # Two gangs starve; holding for both would also lock out the small gang behind them.
    nodes = [make_node("a"), make_node("b"), make_node("c")]
    busy = [running("r1", "a", 6), running("r2", "b", 4), running("r3", "c", 2)]
    pods = busy + gang("big", 1, 8, created=0) + gang("big2", 1, 8, created=5) + gang("quarter", 1, 4, created=10)
    decisions, waiting = decide(cluster(nodes, pods), T0 + 320, starvation_seconds=300)
    assert by_gang(decisions) == {"quarter": {"ml/quarter-0": "b"}}
    messages = {w.gang_key[1]: w.message for w in waiting}
    assert held_on(messages["big"])
    assert "next in line after ml/big" in messages["big2"]


def test_a_gang_that_can_never_fit_holds_nothing_back() -> None:
    state = starving_cluster()
    state.apply_pod("DELETED", running("r1", "nearly-full", 6))
    for pod in gang("huge", 1, 16, created=0):
        state.apply_pod("ADDED", pod)
    decisions, waiting = decide(state, T0 + 1000, starvation_seconds=300)
    huge = next(w for w in waiting if w.gang_key[1] == "huge")
    assert (huge.event_reason, huge.message.split(":")[0]) == (
        "GangCannotFit", "a pod needs 16 GPUs on one node, but the largest node it may use has 8 GPUs allocatable")
    assert set(by_gang(decisions)) == {"big", "quarter"}  # huge holds nothing back


def test_two_gangs_that_fit_alone_but_not_together_exactly_one_goes() -> None:
    nodes = [make_node("n0"), make_node("n1")]
    a, b = gang("a", 3, 4, created=0), gang("b", 2, 4, created=1)
    for pods in (a, b):
        alone = decide(cluster(nodes, pods), T0)[0]
        assert len(alone) == 1 and len(alone[0].placement) == len(pods)
    decisions, waiting = decide(cluster(nodes, a + b), T0)
    assert [(d.gang_key[1], len(d.placement)) for d in decisions] == [("a", 3)]
    assert [w.gang_key[1] for w in waiting] == ["b"]


# ---- promises and roll forward -------------------------------------------------------------


def test_promised_capacity_is_not_offered_again() -> None:
    state = cluster([make_node("n0")], gang("a", 2, 4) + gang("b", 2, 4, created=5))
    decisions, _ = decide(state, T0)
    assert [d.gang_key[1] for d in decisions] == ["a"]
    state.promise(("ml", "a"), decisions[0].placement, deadline=T0 + 120)
    # The next round, before any watch event shows a released: a is in flight (neither
    # decided again nor reported), and b does not get a's capacity.
    decisions, waiting = decide(state, T0 + 1)
    assert decisions == []
    assert [(w.gang_key[1], w.message) for w in waiting] == [
        ("b", "needs 4 nvidia.com/gpu on one node; the largest free is 0")
    ]
    state.cancel_promises(list(state.promises))  # say a's release failed validation
    assert state.promises == {}
    assert [d.gang_key[1] for d in decide(state, T0 + 2)[0]] == ["a"]


def test_a_cut_short_release_is_finished_first_and_its_released_pods_count_as_promised() -> None:
    d = {"id": "d7", "time": ts(0), "node": "n0", "gang": "ml/job", "pods": 4}
    pods = gang("job", 4, 4)
    for pod in pods[:2]:
        pod["spec"]["schedulingGates"] = []
        pod["metadata"]["annotations"]["ganggate.io/decision"] = f'{{"id":"d7","time":"{ts(0)}","node":"n0","gang":"ml/job","pods":4}}'
    other = gang("other", 1, 8, created=0, priority=1000)  # higher priority, but a decision comes first
    state = cluster([make_node("n0"), make_node("n1")], pods + other)
    assert state.gangs[("ml", "job")].state == "partial" and d["pods"] == 4
    decisions, waiting = decide(state, T0)
    assert decisions[0].gang_key == ("ml", "job") and decisions[0].roll_forward
    assert decisions[0].placement == {"ml/job-2": "n1", "ml/job-3": "n1"}  # n0 is promised to job-0, job-1
    assert "finishing decision d7" in decisions[0].reason
    assert [w.gang_key[1] for w in waiting] == ["other"]


def test_waiting_and_conflict_events() -> None:
    pods = gang("few", 4, 1)[:3] + gang("odd", 2, 1)
    pods[-1]["metadata"]["annotations"]["scheduling.k8s.io/group-pod-num"] = "3"
    _, waiting = decide(cluster([make_node("n0")], pods), T0)
    got = {w.gang_key[1]: (w.event_reason, w.message) for w in waiting}
    assert got["few"] == ("GangWaiting", "3 of 4 pods exist")
    assert got["odd"] == ("GangConflict", "pods disagree on scheduling.k8s.io/group-pod-num: 2 (odd-0), 3 (odd-1)")
