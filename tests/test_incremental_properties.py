"""Incremental rounds decide what full rounds decide (hypothesis), and re-plan only what changed.

Random sequences of watch events (gangs arriving, pods running, finishing, deleted, bound,
pending rivals, node labels and taints changing, a relist), the shell's promises of each
round's decisions, their expiry, and the clock moving past the starvation limit: after each,
`IncrementalRounds.decide` and `planner.decide` on the same state must return the same
decisions (in the same order) and the same Waiting for every gang.
"""

from __future__ import annotations

import copy
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.incremental import IncrementalRounds
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0
NODES = 3


def _nodes(draw) -> list[dict]:
    return [make_node(f"n{i}", gpus=draw(st.sampled_from([4, 8])), cpu=draw(st.sampled_from(["16", "64"])),
                      labels={"pool": "a" if i % 2 else "b"}) for i in range(NODES)]


events = st.lists(
    st.one_of(
        st.tuples(st.just("gang"), st.integers(1, 5), st.sampled_from([1, 2, 4, 8]), st.sampled_from(["1", "12"]),
                  st.sampled_from([0, 100]), st.sampled_from([None, "a"]), st.integers(0, 59)),
        st.tuples(st.just("run"), st.integers(0, NODES - 1), st.sampled_from([1, 2, 4])),
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("promise"), st.booleans()),
        st.tuples(st.just("bind"), st.integers(0, 50)),
        st.tuples(st.just("rival"), st.sampled_from([1, 8])),
        st.tuples(st.just("label"), st.integers(0, NODES - 1)),
        st.tuples(st.just("taint"), st.integers(0, NODES - 1)),
        st.tuples(st.just("time"), st.sampled_from([10.0, 400.0])),
        st.tuples(st.just("expire")),
        st.tuples(st.just("relist")),
    ),
    min_size=1,
    max_size=25,
)


def _same(state: ClusterState, rounds: IncrementalRounds, now: float, starvation: float,
          blind: float | None = None) -> list:
    got = rounds.decide(state, now, starvation_seconds=starvation, blind_seconds=blind)
    want = decide(state, now, starvation_seconds=starvation, blind_seconds=blind)
    assert [(d.gang_key, d.placement, d.reason, d.roll_forward) for d in got[0]] == [
        (d.gang_key, d.placement, d.reason, d.roll_forward) for d in want[0]]
    assert {w.gang_key: (w.event_reason, w.message) for w in got[1]} == {
        w.gang_key: (w.event_reason, w.message) for w in want[1]}
    assert len(got[1]) == len(want[1])
    return want[0]


@settings(max_examples=400, deadline=None)
@given(st.data(), events, st.sampled_from([300.0, 0.0]))
def test_incremental_rounds_decide_as_full_rounds(data, steps, starvation) -> None:
    _play(_nodes(data.draw), steps, starvation, None, T0 + 100)


# A starving backlog: the rounds run hours after the gangs were created (every waiting gang is
# past the starvation limit), with running pods that have deadlines (holds with a known start,
# backfill into them) and some that have none (blind holds, held only after `blind`), and the
# clock stepping past holds' starts and the blind limit.
starving_events = st.lists(
    st.one_of(
        st.tuples(st.just("gang"), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.sampled_from(["1", "12"]),
                  st.sampled_from([0, 100]), st.sampled_from([None, "a"]), st.integers(0, 59)),
        st.tuples(st.just("run"), st.integers(0, NODES - 1), st.sampled_from([1, 2, 4]),
                  st.sampled_from([None, 600, 7200])),
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("promise"), st.booleans()),
        st.tuples(st.just("bind"), st.integers(0, 50)),
        st.tuples(st.just("time"), st.sampled_from([1.0, 700.0, 3600.0])),
        st.tuples(st.just("expire")),
        st.tuples(st.just("idle")),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=250, deadline=None)
@given(st.data(), starving_events, st.sampled_from([None, 3600.0, 21600.0]))
def test_incremental_rounds_on_a_starving_backlog_decide_as_full_rounds(data, steps, blind) -> None:
    nodes = _nodes(data.draw)
    busy = [make_pod(f"busy{i}", namespace="busy", gpus=data.draw(st.sampled_from([2, 4])), cpu="2",
                     node_name=f"n{i}", phase="Running", created="2024-01-01T00:00:00Z") for i in range(NODES)]
    _play(nodes, steps, 300.0, blind, T0 + 7200, busy)


def _running(name: str, node: int, gpus: int, deadline: int | None, now: float) -> dict:
    """A running pod on node n<node>, started now; with activeDeadlineSeconds when `deadline`."""
    pod = make_pod(name, namespace="busy", gpus=gpus, cpu="2", node_name=f"n{node}", phase="Running")
    if deadline is not None:
        pod["spec"]["activeDeadlineSeconds"] = deadline
        pod["status"]["startTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    return pod


def _play(nodes: list[dict], steps: list, starvation: float, blind: float | None, now: float,
          first: list[dict] = ()) -> None:
    """Apply the steps to a cluster of `nodes` (and the pods `first`), a round after each: the
    incremental rounds (one IncrementalRounds throughout) decide as full rounds."""
    pods: dict[str, dict] = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in first}
    state = ClusterState()
    state.reset(nodes, list(pods.values()))
    rounds = IncrementalRounds(starvation_seconds=starvation, blind_seconds=blind)
    decisions = _same(state, rounds, now, starvation, blind)
    for n, step in enumerate(steps):
        kind = step[0]
        keys = sorted(pods)
        if kind == "gang":
            _, size, gpus, cpu, priority, pool, second = step
            for i in range(size):
                pod = make_pod(f"g{n}-{i}", namespace="ml", gang=f"g{n}", pod_num=size, gpus=gpus, cpu=cpu,
                               priority=priority, node_selector={"pool": pool} if pool else None,
                               created=f"2024-01-01T00:00:{second:02d}Z")
                pods[f"ml/g{n}-{i}"] = pod
                state.apply_pod("ADDED", pod)
        elif kind == "run":
            pod = _running(f"r{n}", step[1], step[2], step[3] if len(step) > 3 else None, now)
            pods[f"busy/r{n}"] = pod
            state.apply_pod("ADDED", pod)
        elif kind in ("finish", "delete", "bind") and keys:
            key = keys[step[1] % len(keys)]
            pod = copy.deepcopy(pods[key])
            if kind == "delete":
                del pods[key]
                state.apply_pod("DELETED", pod)
                continue
            if kind == "finish":
                pod["status"]["phase"] = "Succeeded"
            else:
                promise = state.promises.get(key)
                if promise is None or promise.node is None:
                    continue
                pod["spec"]["schedulingGates"] = []
                pod["spec"]["nodeName"] = promise.node
            pods[key] = pod
            state.apply_pod("MODIFIED", pod)
        elif kind == "promise":
            for d in decisions:  # the shell promises (and here always releases) what was decided
                state.promise(d.gang_key, d.placement, now + 60)
                if step[1]:
                    for key in (k for k in d.placement if k in pods):  # (unless deleted since)
                        pod = copy.deepcopy(pods[key])
                        pod["spec"]["schedulingGates"] = []
                        pods[key] = pod
                        state.apply_pod("MODIFIED", pod)
        elif kind == "rival":
            pod = make_pod(f"p{n}", namespace="other", gpus=step[1], cpu="1", gated=False)
            pods[f"other/p{n}"] = pod
            state.apply_pod("ADDED", pod)
        elif kind in ("label", "taint"):
            node = copy.deepcopy(nodes[step[1]])
            if kind == "label":
                node["metadata"]["labels"]["pool"] = "a" if node["metadata"]["labels"]["pool"] == "b" else "b"
            else:
                node["spec"]["taints"] = [] if node["spec"].get("taints") else [
                    {"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
            nodes[step[1]] = node
            state.apply_node("MODIFIED", node)
        elif kind == "time":
            now += step[1]
        elif kind == "expire":
            state.expired_promises(now)
        elif kind == "relist":
            state.reset(nodes, list(pods.values()))
        decisions = _same(state, rounds, now, starvation, blind)


def _cluster(gangs: int) -> tuple[ClusterState, list[dict]]:
    """Two full nodes of 8 GPUs and `gangs` gangs of two 8-GPU pods that cannot fit."""
    nodes = [make_node(f"n{i}", gpus=8) for i in range(2)]
    pods = [make_pod(f"busy{i}", namespace="busy", gpus=8, node_name=f"n{i}", phase="Running") for i in range(2)]
    pods += [make_pod(f"g{g}-{i}", namespace="ml", gang=f"g{g}", pod_num=2, gpus=8) for g in range(gangs)
             for i in range(2)]
    state = ClusterState()
    state.reset(nodes, pods)
    return state, pods


def test_a_round_after_one_gang_arrives_plans_that_gang_alone() -> None:
    state, _ = _cluster(20)
    rounds = IncrementalRounds()
    rounds.decide(state, T0)
    assert (rounds.full_rounds, rounds.turns) == (1, 20)
    for i in range(2):
        state.apply_pod("ADDED", make_pod(f"new-{i}", namespace="ml", gang="new", pod_num=2, gpus=8))
    _, waiting = rounds.decide(state, T0)
    assert (rounds.incremental_rounds, rounds.turns) == (1, 1)
    assert len(waiting) == 21 and all(w.event_reason == "GangUnschedulable" for w in waiting)


def test_room_freed_on_a_node_replans_the_gangs_that_may_use_it_and_a_relist_replans_all() -> None:
    state, pods = _cluster(3)
    rounds = IncrementalRounds()
    rounds.decide(state, T0)
    state.apply_pod("DELETED", pods[0])  # n0 is empty now: the oldest gang fits there... half of it
    decisions, _ = rounds.decide(state, T0)
    assert (rounds.incremental_rounds, rounds.turns) == (1, 3) and decisions == []
    state.apply_pod("DELETED", pods[1])
    decisions, _ = rounds.decide(state, T0)
    assert [d.gang_key for d in decisions] == [("ml", "g0")]
    state.reset([make_node(f"n{i}", gpus=8) for i in range(2)], pods[2:])
    rounds.decide(state, T0)
    assert (rounds.full_rounds, rounds.turns) == (2, 3)


def _gang(name: str, size: int, gpus: int, priority: int = 0) -> list[dict]:
    return [make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=size, gpus=gpus, priority=priority)
            for i in range(size)]


def _both(state: ClusterState, rounds: IncrementalRounds) -> tuple[list, dict]:
    _same(state, rounds, T0, 300.0)
    decisions, waiting = decide(state, T0)
    return [d.gang_key for d in decisions], {w.gang_key[1]: w.message for w in waiting}


def test_a_gang_that_waited_behind_an_undone_decision_is_planned_again() -> None:
    """Last round `first` took n0 and `second` waited; `first` is deleted before its release:
    `second`, whose nodes did not change in the watch, must see n0 free again."""
    state = ClusterState()
    first, second = _gang("first", 1, 8, priority=100), _gang("second", 1, 8)
    state.reset([make_node("n0", gpus=8)], first + second)
    rounds = IncrementalRounds()
    assert _both(state, rounds)[0] == [("ml", "first")]
    state.apply_pod("DELETED", first[0])
    assert _both(state, rounds)[0] == [("ml", "second")]


def test_a_waiting_gang_after_one_that_takes_room_this_round_says_what_is_left() -> None:
    """`late` waited with room for 2 of its 3 pods; a higher-priority gang arrives and takes a
    node: `late` is planned again after it and says room for 1, not the stale 2."""
    state = ClusterState()
    busy = make_pod("busy", namespace="other", gpus=8, node_name="n2", phase="Running")  # may finish: room may free up
    state.reset([make_node(f"n{i}", gpus=8) for i in range(3)], [busy, *_gang("late", 3, 8)])
    rounds = IncrementalRounds()
    assert "room for 2" in _both(state, rounds)[1]["late"]
    for pod in _gang("urgent", 1, 8, priority=100):
        state.apply_pod("ADDED", pod)
    decided, waiting = _both(state, rounds)
    assert decided == [("ml", "urgent")] and "room for 1" in waiting["late"]


def test_change_sets_are_kept_only_once_an_incremental_planner_reads_them() -> None:
    """A controller that plans with full rounds alone must not collect every gang it ever saw."""
    state, _ = _cluster(3)
    for pod in _gang("later", 2, 8):
        state.apply_pod("ADDED", pod)
    assert state.dirty_gangs == set() and state.dirty_nodes == set()
    rounds = IncrementalRounds()
    rounds.decide(state, T0)
    for pod in _gang("after", 2, 8):
        state.apply_pod("ADDED", pod)
    assert state.dirty_gangs == {("ml", "after")}
    rounds.decide(state, T0)
    assert state.dirty_gangs == set() and rounds.turns == 1


def test_with_gpu_cards_every_round_is_a_full_one_deciding_as_planner_decide() -> None:
    """A node with GPU cards: their use is not tracked, so each round is planner.decide's."""
    state = ClusterState()
    cards = make_node("c0", gpus=2, extra={"aliyun.com/gpu-mem": "16", "aliyun.com/gpu-count": "2"})
    state.reset([cards, make_node("n0", gpus=8)], _gang("big", 2, 4) + _gang("small", 1, 2))
    rounds = IncrementalRounds()
    for round_number in (1, 2):
        assert _both(state, rounds)[0] == [("ml", "big"), ("ml", "small")]  # (nothing promised between)
        assert (rounds.full_rounds, rounds.incremental_rounds, rounds.turns) == (round_number, 0, 2)
