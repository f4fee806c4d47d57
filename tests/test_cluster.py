"""The controller's incremental picture of the cluster: use per node, gangs, promises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.contract import ContractError
from ganggate.core.fit.resources import GPU
from ganggate.core.state.cluster import ClusterState, PodInfo
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z


def gpu_free(state: ClusterState, node: str) -> int:
    return state.free(node).get(GPU, 0) // 1000


def test_pod_info_reads_what_the_controller_needs() -> None:
    raw = make_pod("w-0", namespace="ml", gang="job", pod_num=4, gpus=2, priority=100, owner="job",
                   created="2024-01-01T00:00:10Z")
    info = PodInfo.from_pod(raw)
    assert (info.key, info.namespace, info.name) == ("ml/w-0", "ml", "w-0")
    assert info.request[GPU] == 2000 and info.request["pods"] == 1000
    assert info.priority == 100 and info.created == T0 + 10
    assert info.gated and info.owned and not info.terminated
    assert info.gang.pod_num == 4 and info.gang.min_available == 4
    bad = PodInfo.from_pod(make_pod("x", gang="job", pod_num="four"))
    assert isinstance(bad.gang, ContractError)


def test_bound_pods_use_their_node_until_they_finish_or_go() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=8)], [])
    assert gpu_free(state, "n1") == 8
    pod = make_pod("a", gpus=3, node_name="n1", phase="Running")
    state.apply_pod("ADDED", pod)
    assert gpu_free(state, "n1") == 5
    state.apply_pod("MODIFIED", pod)  # a repeated event changes nothing
    assert gpu_free(state, "n1") == 5
    done = make_pod("a", gpus=3, node_name="n1", phase="Succeeded")
    state.apply_pod("MODIFIED", done)
    assert gpu_free(state, "n1") == 8
    state.apply_pod("MODIFIED", pod)
    state.apply_pod("DELETED", pod)
    assert gpu_free(state, "n1") == 8 and state.nodes["n1"].used == {}


def test_pods_seen_before_their_node_are_counted_when_it_comes() -> None:
    state = ClusterState()
    state.apply_pod("ADDED", make_pod("a", gpus=2, node_name="late", phase="Running"))
    state.apply_node("ADDED", make_node("late", gpus=8))
    assert gpu_free(state, "late") == 6
    state.apply_node("DELETED", make_node("late"))
    assert "late" not in state.nodes
    state.apply_node("ADDED", make_node("late", gpus=4))
    assert gpu_free(state, "late") == 2


# ---- property: incremental == recomputed ------------------------------------------------

NODE_NAMES = ["n0", "n1", "n2"]
POD_NAMES = ["p0", "p1", "p2", "p3", "p4"]

pod_events = st.tuples(
    st.just("pod"),
    st.sampled_from(POD_NAMES),
    st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    st.fixed_dictionaries(
        {
            "gpus": st.integers(0, 4),
            "cpu": st.sampled_from(["500m", "1", "2.5"]),
            "node_name": st.sampled_from([None, *NODE_NAMES, "ghost"]),
            "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
            "gang": st.sampled_from([None, "g1", "g2"]),
            "pod_num": st.sampled_from([2, 3]),
            "scheduler_name": st.sampled_from(["default-scheduler", "volcano"]),
            "priority": st.sampled_from([None, 0, 100]),
            "created": st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01T00:00:09Z"]),
            "gated": st.sampled_from([None, False]),
        }
    ),
)
node_events = st.tuples(
    st.just("node"),
    st.sampled_from(NODE_NAMES),
    st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    st.fixed_dictionaries({"gpus": st.sampled_from([4, 8]), "ready": st.booleans()}),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(pod_events, node_events), max_size=40))
def test_incremental_use_equals_a_recount_from_the_final_objects(events) -> None:
    state = ClusterState()
    final_nodes: dict[str, dict] = {}
    final_pods: dict[str, dict] = {}
    for kind, name, event_type, params in events:
        if kind == "node":
            obj = make_node(name, **params)
            state.apply_node(event_type, obj)
            table = final_nodes
        else:
            params = dict(params)
            if params["node_name"] is not None:
                params["gated"] = False  # a bound pod has no gates
            obj = make_pod(name, **params)
            state.apply_pod(event_type, obj)
            table = final_pods
        if event_type == "DELETED":
            table.pop(name, None)
        else:
            table[name] = obj
    fresh = ClusterState()
    fresh.reset(list(final_nodes.values()), list(final_pods.values()))
    for node in NODE_NAMES + ["ghost"]:
        assert state.free(node) == fresh.free(node)
        assert state._used.get(node, {}) == fresh._used.get(node, {})
    assert sorted(state.nodes) == sorted(fresh.nodes)
    for node in state.nodes:
        assert state.nodes[node].used == fresh.nodes[node].used
    def summary(gangs):
        return {k: (g.state, g.spec, g.conflict, g.complete_since, g.priority, g.created, g.live_count,
                    g.still_needed) for k, g in gangs.items()}

    assert summary(state.gangs) == summary(fresh.gangs)
    assert {k: sorted(g.pods) for k, g in state.gangs.items()} == {k: sorted(g.pods) for k, g in fresh.gangs.items()}


# ---- gangs ---------------------------------------------------------------------------------


def member(name: str, **kw) -> dict:
    kw.setdefault("namespace", "ml")
    kw.setdefault("gang", "train")
    kw.setdefault("pod_num", 3)
    kw.setdefault("gpus", 2)
    return make_pod(name, **kw)


def test_a_gang_waits_for_all_its_pods_then_is_complete() -> None:
    state = ClusterState()
    state.reset([make_node("n1")], [member("w-0"), member("w-1", created="2024-01-01T00:00:05Z")])
    gang = state.gangs[("ml", "train")]
    assert gang.state == "incomplete"
    assert gang.waiting_message() == "2 of 3 pods exist"
    assert gang.complete_since is None
    state.apply_pod("ADDED", member("w-2", created="2024-01-01T00:00:30Z"))
    assert gang.state == "waiting"
    assert gang.complete_since == T0 + 30  # when its last pod came
    state.apply_pod("DELETED", member("w-2"))
    assert gang.state == "incomplete"


def test_gangs_are_per_namespace_and_other_schedulers_are_ignored() -> None:
    state = ClusterState()
    pods = [member("a"), member("a", namespace="other"), member("v", scheduler_name="volcano")]
    state.reset([], pods)
    assert set(state.gangs) == {("ml", "train"), ("other", "train")}
    assert list(state.gangs[("ml", "train")].pods) == ["ml/a"]
    served = ClusterState(scheduler_names=("volcano",))
    served.reset([], pods)
    assert list(served.gangs) == [("ml", "train")] and list(served.gangs[("ml", "train")].pods) == ["ml/v"]


def test_pods_that_disagree_are_a_conflict_named_in_words() -> None:
    state = ClusterState()
    state.reset([], [member("w-0"), member("w-1"), member("w-2", pod_num=4)])
    gang = state.gangs[("ml", "train")]
    assert gang.state == "conflict" and gang.spec is None
    assert gang.conflict == "pods disagree on scheduling.k8s.io/group-pod-num: 3 (w-0, w-1), 4 (w-2)"
    state.apply_pod("ADDED", member("w-3", min_available=2))
    assert "scheduling.k8s.io/group-min-available: 2 (w-3), 3 (w-0, w-1)" in gang.conflict
    state.apply_pod("DELETED", member("w-2"))
    state.apply_pod("DELETED", member("w-3"))
    state.apply_pod("ADDED", member("w-2"))
    assert gang.state == "waiting" and gang.conflict is None


def decision(node: str | None, pods: int = 3) -> dict:
    return {"id": "d1", "time": "2024-01-01T00:01:00Z", "node": node, "gang": "ml/train", "pods": pods}


def test_gang_states_through_a_release() -> None:
    state = ClusterState()
    gated = [member(f"w-{i}") for i in range(3)]
    state.reset([make_node("n1"), make_node("n2")], gated)
    gang = state.gangs[("ml", "train")]
    assert gang.state == "waiting"
    state.apply_pod("MODIFIED", member("w-0", gated=False, decision=decision("n1")))
    assert gang.state == "partial" and gang.still_needed == 2 and gang.decision_ids() == ["d1"]
    for i in (1, 2):
        state.apply_pod("MODIFIED", member(f"w-{i}", gated=False, decision=decision("n1")))
    assert gang.state == "released"
    for i in range(3):
        state.apply_pod("MODIFIED", member(f"w-{i}", gated=False, node_name="n1", phase="Running", decision=decision("n1")))
    assert gang.state == "running"


def test_a_gang_with_min_available_released_has_started() -> None:
    state = ClusterState()
    pods = [member(f"w-{i}", pod_num=4, min_available=2) for i in range(4)]
    state.reset([make_node("n1")], pods)
    gang = state.gangs[("ml", "train")]
    assert gang.state == "waiting" and gang.spec.min_available == 2
    state.apply_pod("MODIFIED", member("w-0", pod_num=4, min_available=2, gated=False, decision=decision("n1", 2)))
    assert gang.state == "partial"
    state.apply_pod("MODIFIED", member("w-1", pod_num=4, min_available=2, gated=False, decision=decision("n1", 2)))
    assert gang.state == "started"
    assert [p.name for p in gang.gated_pods()] == ["w-2", "w-3"]


# ---- promises ------------------------------------------------------------------------------


def test_promises_hold_capacity_until_the_pod_is_bound() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=8)], [member(f"w-{i}") for i in range(3)])
    state.promise(("ml", "train"), {"ml/w-0": "n1", "ml/w-1": "n1", "ml/w-2": None}, deadline=T0 + 100)
    assert gpu_free(state, "n1") == 4  # the unpinned pod is counted nowhere
    assert state.promised_pods("n1") == ["ml/w-0", "ml/w-1"]
    # Released: still promised; bound: counted as used instead, never twice.
    state.apply_pod("MODIFIED", member("w-0", gated=False, decision=decision("n1")))
    assert gpu_free(state, "n1") == 4
    state.apply_pod("MODIFIED", member("w-0", gated=False, node_name="n1", decision=decision("n1")))
    assert gpu_free(state, "n1") == 4 and state.nodes["n1"].promised.get(GPU, 0) == 2000
    state.apply_pod("DELETED", member("w-1"))
    assert gpu_free(state, "n1") == 6 and state.nodes["n1"].promised.get(GPU, 0) == 0
    assert sorted(state.promises) == ["ml/w-2"]


def test_expired_promises_are_reported_once_per_gang_and_given_back() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=8)], [member(f"w-{i}") for i in range(3)])
    state.promise(("ml", "train"), {"ml/w-0": "n1", "ml/w-1": "n1", "ml/w-2": "n1"}, deadline=T0 + 100)
    for i in range(3):
        state.apply_pod("MODIFIED", member(f"w-{i}", gated=False, decision=decision("n1")))
    state.apply_pod("MODIFIED", member("w-2", gated=False, node_name="n1", decision=decision("n1")))
    assert state.expired_promises(T0 + 99) == []
    assert state.expired_promises(T0 + 100) == [(("ml", "train"), ["ml/w-0", "ml/w-1"])]
    assert gpu_free(state, "n1") == 6  # only the bound pod's GPUs are taken now
    assert state.expired_promises(T0 + 200) == []


def test_a_promise_whose_pod_was_never_released_lapses_without_a_report() -> None:
    # A release cut short: w-0 was patched, w-1 not. At the deadline only w-0 is reported;
    # w-1's promise just ends, so the gang can be rolled forward.
    state = ClusterState()
    state.reset([make_node("n1", gpus=8)], [member(f"w-{i}") for i in range(3)])
    state.promise(("ml", "train"), {"ml/w-0": "n1", "ml/w-1": "n1"}, deadline=T0 + 100)
    state.apply_pod("MODIFIED", member("w-0", gated=False, decision=decision("n1")))
    assert state.expired_promises(T0 + 100) == [(("ml", "train"), ["ml/w-0"])]
    assert state.promises == {} and gpu_free(state, "n1") == 8


def test_after_a_restart_released_unbound_pods_hold_their_planned_nodes() -> None:
    # The next leader knows nothing of the promises; the decision annotation tells it.
    pods = [
        member("w-0", gated=False, decision=decision("n1")),
        member("w-1", gated=False, node_name="n1", phase="Running", decision=decision("n1")),
        member("w-2"),
    ]
    state = ClusterState(bind_timeout_seconds=120)
    state.reset([make_node("n1", gpus=8)], pods)
    assert gpu_free(state, "n1") == 4  # w-1 used, w-0 promised
    assert state.gangs[("ml", "train")].state == "partial"
    # Its deadline counts from the decision's time.
    assert state.expired_promises(T0 + 60 + 119) == []
    assert state.expired_promises(T0 + 60 + 120) == [(("ml", "train"), ["ml/w-0"])]
    state.apply_pod("MODIFIED", member("w-0", gated=False, decision=decision("n1")))
    assert gpu_free(state, "n1") == 6  # an expired promise is not rebuilt


def test_cancelled_promises_of_unreleased_pods_are_given_back() -> None:
    state = ClusterState()
    state.reset([make_node("n1", gpus=8)], [member(f"w-{i}") for i in range(3)])
    state.promise(("ml", "train"), {"ml/w-0": "n1", "ml/w-1": "n1"}, deadline=T0 + 100)
    state.apply_pod("MODIFIED", member("w-1", gated=False, decision=decision("n1")))
    state.cancel_promises(["ml/w-0", "ml/w-1"])
    assert state.promised_pods("n1") == ["ml/w-1"]  # released: still on its way


def test_a_relist_keeps_promises_of_pods_still_waiting_to_bind() -> None:
    state = ClusterState()
    pods = [member(f"w-{i}") for i in range(3)]
    state.reset([make_node("n1", gpus=8)], pods)
    state.promise(("ml", "train"), {"ml/w-0": "n1"}, deadline=T0 + 100)
    state.reset([make_node("n1", gpus=8)], pods)
    assert gpu_free(state, "n1") == 6
    state.reset([make_node("n1", gpus=8)], pods[1:])
    assert gpu_free(state, "n1") == 8
