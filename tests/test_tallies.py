"""The round's gauges, next-due instant, timeouts and expired promises, now kept by the watch
events (core.tallies), say what a walk over the whole state says, after any sequence of events.

Random watch events (gangs arriving, some with a timeout; pods bound, finishing, deleted; nodes
cordoned, not ready, deleted and back; promises, their expiry; a relist; the clock moving) and,
after each, the controller's gauges, `timers.next_due`, the gangs past their timeout and the
expired promises are compared with the same figures worked out from the whole state, as the
controller worked them out before they were kept.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.contract import GROUP_TIMEOUT_SECONDS
from ganggate.controller.reporting.metrics import Metrics
from ganggate.controller.round.timers import PAST, next_due
from ganggate.core.fit.resources import GPU
from ganggate.core.policy.lifecycle import gangs_timed_out
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import waiting_timeout
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0
NODES = 3
STARVATION = 300.0


def _gauges_from_scratch(state: ClusterState) -> tuple[dict[str, int], int, int, int]:
    """Gangs by state, GPUs free, promised and held idle: the walk the controller used to make."""
    counts: dict[str, int] = {}
    idle = 0
    for gang in state.gangs.values():
        counts[gang.state] = counts.get(gang.state, 0) + 1
        if gang.state in ("waiting", "running"):
            continue
        live = gang.live_pods()
        bound = [p for p in live if p.node_name]
        needed = gang.spec.min_available if gang.spec is not None else len(live)
        if 0 < len(bound) < needed or (gang.state == "released" and len(bound) < len(live)):
            idle += sum(p.request.get(GPU, 0) for p in bound)
    free = promised = 0
    for name, node in state.nodes.items():
        promised += node.promised.get(GPU, 0)
        if node.ready and not node.cordoned:
            free += max(0, state.free(name).get(GPU, 0))
    return counts, free // 1000, promised // 1000, idle // 1000


def _due_from_scratch(state: ClusterState, now: float, reported: set) -> float | None:
    due = [p.deadline for p in state.promises.values()]
    for key, gang in state.gangs.items():
        if gang.state == "waiting" and gang.complete_since is not None:
            due.append(gang.complete_since + STARVATION + PAST)
        if key not in reported and (timeout := waiting_timeout(gang)) is not None:
            due.append(gang.created + timeout + PAST)
    ahead = [t for t in due if t > now]
    return min(ahead) if ahead else None


def _check(state: ClusterState, now: float, reported: set) -> None:
    metrics = Metrics()
    metrics.observe_cluster(state)
    counts, free, promised, idle = _gauges_from_scratch(state)
    for label in set(counts) | {"waiting", "running"}:
        assert metrics.gangs.labels(state=label)._value.get() == counts.get(label, 0), label
    assert (metrics.gpus_free._value.get(), metrics.gpus_promised._value.get(),
            metrics.gpus_held_idle._value.get()) == (free, promised, idle)
    assert next_due(state, now, starvation_seconds=STARVATION, timed_out=reported) == _due_from_scratch(
        state, now, reported)
    assert state.tallies.timed_out(state, now, reported) == gangs_timed_out(state.gangs, now, reported)
    waiting: dict = {}
    for key, gang in state.gangs.items():
        if gang.state == "waiting":
            waiting.setdefault(gang.priority, set()).add(key)
    assert state.tallies.waiting == waiting


events = st.lists(
    st.one_of(
        st.tuples(st.just("gang"), st.integers(1, 3), st.sampled_from([1, 4, 8]), st.sampled_from([None, 30, 500])),
        st.tuples(st.just("promise"), st.integers(0, 40), st.integers(0, NODES - 1)),
        st.tuples(st.just("bind"), st.integers(0, 40)),
        st.tuples(st.just("finish"), st.integers(0, 40)),
        st.tuples(st.just("delete"), st.integers(0, 40)),
        st.tuples(st.just("node"), st.integers(0, NODES - 1), st.sampled_from(["cordon", "notready", "delete", "back"])),
        st.tuples(st.just("time"), st.sampled_from([5.0, 40.0, 400.0])),
        st.tuples(st.just("expire")),
        st.tuples(st.just("report")),
        st.tuples(st.just("relist")),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(events)
def test_tallies_agree_with_a_walk_over_the_whole_state(steps) -> None:
    nodes = {f"n{i}": make_node(f"n{i}", gpus=8) for i in range(NODES)}
    pods: dict[str, dict] = {}
    state = ClusterState()
    state.reset(list(nodes.values()), [])
    now = T0 + 10
    reported: set = set()
    for n, step in enumerate(steps):
        kind = step[0]
        keys = sorted(pods)
        if kind == "gang":
            _, size, gpus, timeout = step
            for i in range(size):
                pod = make_pod(f"g{n}-{i}", namespace="ml", gang=f"g{n}", pod_num=size, gpus=gpus,
                               created="2024-01-01T00:00:05Z")
                if timeout is not None:
                    pod["metadata"]["annotations"][GROUP_TIMEOUT_SECONDS] = str(timeout)
                pods[f"ml/g{n}-{i}"] = pod
                state.apply_pod("ADDED", pod)
        elif kind == "promise" and keys:
            key = keys[step[1] % len(keys)]
            gang = state.gang_of(state.pods[key])
            if gang is not None:
                state.promise(gang, {key: f"n{step[2]}"}, now + 60)
                pod = copy.deepcopy(pods[key])
                pod["spec"]["schedulingGates"] = []
                pods[key] = pod
                state.apply_pod("MODIFIED", pod)
        elif kind in ("bind", "finish", "delete") and keys:
            key = keys[step[1] % len(keys)]
            pod = copy.deepcopy(pods[key])
            if kind == "delete":
                del pods[key]
                state.apply_pod("DELETED", pod)
            else:
                if kind == "finish":
                    pod["status"]["phase"] = "Succeeded"
                else:
                    promise = state.promises.get(key)
                    pod["spec"]["schedulingGates"] = []
                    pod["spec"]["nodeName"] = promise.node if promise is not None and promise.node else "n0"
                pods[key] = pod
                state.apply_pod("MODIFIED", pod)
        elif kind == "node":
            name, change = f"n{step[1]}", step[2]
            if change == "delete":
                state.apply_node("DELETED", nodes[name])
                continue
            node = make_node(name, gpus=8, unschedulable=change == "cordon", ready=change != "notready")
            nodes[name] = node
            state.apply_node("MODIFIED", node)
        elif kind == "time":
            now += step[1]
        elif kind == "expire":
            before = {k: p.deadline for k, p in state.promises.items()}
            expired = {k for gang, ks in state.expired_promises(now) for k in ks}
            assert all(before[k] <= now for k in expired)
            assert all(p.deadline > now for p in state.promises.values())
        elif kind == "report":
            reported |= {key for key, _ in state.tallies.timed_out(state, now, reported)}
        elif kind == "relist":
            state.reset(list(nodes.values()), list(pods.values()))
        _check(state, now, reported)


def test_a_relist_rebuilt_aside_and_adopted_is_the_relist_made_in_place() -> None:
    """What the controller does off the loop (ClusterState.rebuilt, then adopt) leaves the same
    picture as replace: promises kept, gangs, free capacity, tallies, a new layout."""
    nodes = [make_node(f"n{i}", gpus=8) for i in range(2)]
    pods = [make_pod(f"w-{i}", namespace="ml", gang="g", pod_num=2, gpus=4) for i in range(2)]
    pods.append(make_pod("run", namespace="busy", gpus=2, node_name="n1", phase="Running"))
    states = []
    for _ in range(2):
        state = ClusterState()
        state.reset(nodes, pods)
        state.promise(("ml", "g"), {"ml/w-0": "n0", "ml/w-1": "n0"}, T0 + 60)
        for key in ("ml/w-0", "ml/w-1"):  # released: the gates gone, not bound yet
            pod = copy.deepcopy(next(p for p in pods if f"ml/{p['metadata']['name']}" == key))
            pod["spec"]["schedulingGates"] = []
            state.apply_pod("MODIFIED", pod)
        states.append(state)
    in_place, aside = states
    listed = list(in_place.pods.values())
    layout = in_place.layout_version
    in_place.replace(None, listed)
    holder = aside  # (another component's reference to the same object)
    aside.adopt(aside.rebuilt(None, list(aside.pods.values())))
    assert holder is aside and aside.layout_version == in_place.layout_version > layout
    assert sorted(aside.promises) == sorted(in_place.promises) == ["ml/w-0", "ml/w-1"]
    assert {k: g.state for k, g in aside.gangs.items()} == {k: g.state for k, g in in_place.gangs.items()}
    assert {n: aside.free(n) for n in aside.nodes} == {n: in_place.free(n) for n in in_place.nodes}
    for state in (aside, in_place):
        _check(state, T0 + 10, set())
