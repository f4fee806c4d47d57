"""Properties of the planner over random clusters (hypothesis).

Whatever it decides is feasible: every pod on a node it may use, no node over-committed on
any resource it is asked for (counting what is used and promised), at least min-available
pods of a gang, and all of them or none when there is no min-available. And it misses no
homogeneous gang that fits.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.fit.nodematch import node_rejects
from ganggate.core.fit.resources import add_into, fits
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0


@st.composite
def clusters(draw) -> tuple[ClusterState, float, float]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if draw(st.integers(0, 4)) == 0 else []
        nodes.append(
            make_node(
                f"n{i}",
                gpus=draw(st.sampled_from([0, 4, 8])),
                cpu=draw(st.sampled_from(["8", "16", "64"])),
                memory=draw(st.sampled_from(["32Gi", "256Gi"])),
                pods=draw(st.sampled_from(["3", "110"])),
                labels={"pool": draw(st.sampled_from(["a", "b"]))},
                taints=taints,
                ready=draw(st.integers(0, 5)) > 0,
                unschedulable=draw(st.integers(0, 6)) == 0,
            )
        )
    names = [n["metadata"]["name"] for n in nodes]
    pods = []
    for i in range(draw(st.integers(0, 6))):  # running pods, possibly over-committing a node
        pods.append(make_pod(f"r{i}", namespace="busy", gpus=draw(st.sampled_from([0, 1, 2, 4])),
                             cpu=draw(st.sampled_from(["1", "6"])), node_name=draw(st.sampled_from(names)),
                             phase="Running"))
    for g in range(draw(st.integers(1, 5))):
        size = draw(st.integers(1, 6))
        min_available = draw(st.one_of(st.none(), st.integers(1, size)))
        selector = draw(st.sampled_from([None, {"pool": "a"}]))
        tolerate = draw(st.booleans())
        released = draw(st.integers(0, size)) if draw(st.integers(0, 3)) == 0 else 0
        decision_node = draw(st.sampled_from(names))
        for i in range(size):
            pod = make_pod(
                f"g{g}-{i}", namespace="ml", gang=f"g{g}", pod_num=size, min_available=min_available,
                gpus=draw(st.sampled_from([0, 1, 2, 4, 8])), cpu=draw(st.sampled_from(["1", "4", "16"])),
                created=f"2024-01-01T00:00:{draw(st.integers(0, 59)):02d}Z", priority=draw(st.sampled_from([0, 0, 100])),
                node_selector=selector,
                tolerations=[{"key": "dedicated", "operator": "Exists"}] if tolerate else [],
            )
            if i < released:  # a release cut short: released, unbound, with a decision
                pod["spec"]["schedulingGates"] = []
                pod["metadata"]["annotations"]["ganggate.io/decision"] = json.dumps(
                    {"id": "d", "time": "2024-01-01T00:01:00Z", "node": decision_node, "gang": f"ml/g{g}", "pods": size})
            pods.append(pod)
    state = ClusterState()
    state.reset(nodes, pods)
    if draw(st.booleans()):  # a release in flight: one gang's gated pods hold explicit promises
        gang = draw(st.sampled_from(sorted(state.gangs)))
        gated = [p.key for p in state.gangs[gang].gated_pods()]
        state.promise(gang, {key: draw(st.sampled_from(names)) for key in gated}, deadline=T0 + 60)
    return state, T0 + draw(st.sampled_from([0, 100, 1000])), draw(st.sampled_from([0.0, 300.0]))


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_every_decision_is_feasible_and_whole(case) -> None:
    state, now, starvation = case
    states_before = {key: gang.state for key, gang in state.gangs.items()}
    decisions, waiting = decide(state, now, starvation_seconds=starvation)
    decided = [d.gang_key for d in decisions]
    assert len(decided) == len(set(decided))
    assert not set(decided) & {w.gang_key for w in waiting}
    placed: dict[str, dict[str, int]] = {}
    for decision in decisions:
        gang = state.gangs[decision.gang_key]
        assert gang.state in ("waiting", "partial", "started")
        gated = {p.key for p in gang.gated_pods()}
        assert decision.placement and set(decision.placement) <= gated
        assert not set(decision.placement) & set(state.promises)  # in flight: not decided again
        assert decision.roll_forward == (gang.state == "partial")
        for pod_key, node in decision.placement.items():
            pod = state.pods[pod_key]
            assert node_rejects(pod.selection, state.nodes[node].view) is None
            add_into(placed.setdefault(node, {}), pod.request)
        spec = gang.spec
        if gang.state == "waiting":
            assert len(decision.placement) >= spec.min_available
            if spec.min_available == spec.pod_num:
                assert len(decision.placement) == spec.pod_num
        if gang.state == "partial":
            assert len(decision.placement) >= min(gang.still_needed, len(gated))
    for node, amounts in placed.items():
        info = state.nodes[node]
        for resource, amount in amounts.items():
            if amount > 0:
                total = info.used.get(resource, 0) + info.promised.get(resource, 0) + amount
                assert total <= info.allocatable.get(resource, 0), (node, resource)
    assert {key: gang.state for key, gang in state.gangs.items()} == states_before  # decide is pure


@settings(max_examples=300, deadline=None)
@given(
    frees=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 64)), min_size=1, max_size=8),
    size=st.integers(1, 12),
    gpus=st.sampled_from([1, 2, 3, 4, 8]),
    cpu=st.sampled_from([1, 4, 10]),
)
def test_a_homogeneous_gang_that_fits_is_found_to_fit(frees, size, gpus, cpu) -> None:
    nodes = [make_node(f"n{i}", gpus=g, cpu=str(c)) for i, (g, c) in enumerate(frees)]
    pods = [make_pod(f"w{i}", namespace="ml", gang="job", pod_num=size, gpus=gpus, cpu=str(cpu), memory="1Gi")
            for i in range(size)]
    state = ClusterState()
    state.reset(nodes, pods)
    room = sum(min(g // gpus, c // cpu) for g, c in frees)
    decisions, waiting = decide(state, T0)
    assert (len(decisions) == 1) == (room >= size)
    if decisions:
        assert len(decisions[0].placement) == size


label_values = st.sampled_from([None, "a", "b", "7"])
taint_sets = st.lists(
    st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot"]), "value": st.sampled_from(["", "x"]),
                           "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])}),
    max_size=2,
)
tolerations = st.lists(
    st.one_of(
        st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot", "node.kubernetes.io/unschedulable"]),
                               "operator": st.just("Exists")}),
        st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot"]), "operator": st.just("Equal"),
                               "value": st.sampled_from(["", "x"]), "effect": st.sampled_from(["NoSchedule", "NoExecute"])}),
    ),
    max_size=2,
)
expressions = st.one_of(
    st.fixed_dictionaries({"key": st.sampled_from(["zone", "size"]), "operator": st.sampled_from(["In", "NotIn"]),
                           "values": st.lists(st.sampled_from(["a", "b", "7"]), min_size=1, max_size=2)}),
    st.fixed_dictionaries({"key": st.sampled_from(["zone", "size"]), "operator": st.sampled_from(["Exists", "DoesNotExist"])}),
    st.fixed_dictionaries({"key": st.just("size"), "operator": st.sampled_from(["Gt", "Lt"]),
                           "values": st.sampled_from([["5"], ["8"]])}),
)
terms = st.lists(
    st.one_of(
        st.fixed_dictionaries({"matchExpressions": st.lists(expressions, min_size=1, max_size=2)}),
        st.fixed_dictionaries({"matchFields": st.just([{"key": "metadata.name", "operator": "In", "values": ["n1", "n3"]}])}),
    ),
    min_size=1,
    max_size=2,
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(st.tuples(label_values, label_values, taint_sets, st.booleans(), st.booleans()), min_size=1, max_size=7),
    selector=st.dictionaries(st.sampled_from(["zone", "size", "kubernetes.io/hostname"]),
                             st.sampled_from(["a", "b", "7", "n1"]), max_size=2),
    affinity=st.one_of(st.none(), terms),
    tolerations=tolerations,
)
def test_grouped_eligibility_is_node_rejects_node_by_node(nodes, selector, affinity, tolerations) -> None:
    from collections import Counter

    from ganggate.core.planner import Capacity
    from ganggate.core.state.cluster import PodInfo

    raw_nodes = {}
    for i, (zone, size, taints, ready, cordoned) in enumerate(nodes):
        labels = {k: v for k, v in (("zone", zone), ("size", size)) if v is not None}
        raw_nodes[f"n{i}"] = make_node(f"n{i}", labels=labels, taints=taints, ready=ready, unschedulable=cordoned)
    pod = make_pod("p", node_selector=selector, tolerations=tolerations)
    if affinity is not None:
        pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}}}
    info = PodInfo.from_pod(pod)
    capacity = Capacity(raw_nodes, {name: {} for name in raw_nodes})
    reasons = {name: node_rejects(pod, raw) for name, raw in raw_nodes.items()}
    assert capacity.index(info).members == {name for name, reason in reasons.items() if reason is None}
    assert capacity.rejected(info) == Counter(reason for reason in reasons.values() if reason is not None)


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(st.tuples(st.sampled_from([0, 2, 4, 8]), st.sampled_from([4, 8, 16, 32])), min_size=1, max_size=4),
    shapes=st.lists(st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3)),
                    min_size=2, max_size=2),
)
def test_a_gang_of_two_shapes_that_fits_is_found_to_fit(nodes, shapes) -> None:
    """Against brute force over every assignment of pods to nodes (small clusters)."""
    import itertools


    raw = [make_node(f"n{i}", gpus=g, cpu=str(c)) for i, (g, c) in enumerate(nodes)]
    size = sum(k for _, _, k in shapes)
    pods = [make_pod(f"p{s}-{j}", namespace="ml", gang="job", pod_num=size, gpus=g, cpu=str(c), memory="1Gi")
            for s, (g, c, k) in enumerate(shapes) for j in range(k)]
    state = ClusterState()
    state.reset(raw, pods)
    infos, names = list(state.pods.values()), list(state.nodes)
    frees = [state.free(n) for n in names]
    feasible = False
    for assignment in itertools.product(range(len(names)), repeat=len(infos)):
        use: list[dict[str, int]] = [{} for _ in names]
        for pod, node in zip(infos, assignment, strict=True):
            add_into(use[node], pod.request)
        if all(fits(use[i], frees[i]) for i in range(len(names))):
            feasible = True
            break
    decisions, _ = decide(state, T0)
    assert bool(decisions) == feasible


#: Fits the greedy tries miss, found by hypothesis above (the first at the end of the session of
#: issues #18-#24, the second on 2026-11-26). First: best fit puts a 4-GPU pod on the 8-GPU node,
#: and the 1-GPU pods (2 CPU each) no longer fit anywhere, although n1 could hold all three of
#: them and n2 two 4-GPU pods. Second: the 2-GPU pods take the three 2-GPU nodes, and the 1-GPU
#: pods (4 CPU each) find GPUs without CPU beside them. The bounded search (core/placement/search.py)
#: finds both.
GREEDY_MISSES = [
    ([(4, 4), (4, 8), (8, 4)], [(1, 2, 3), (4, 1, 3)]),
    ([(2, 4), (2, 4), (2, 8), (4, 4)], [(1, 4, 3), (2, 1, 3)]),
]


@pytest.mark.parametrize("nodes, shapes", GREEDY_MISSES)
def test_a_fit_the_greedy_tries_miss_is_found_by_the_bounded_search(nodes, shapes) -> None:
    raw = [make_node(f"n{i}", gpus=g, cpu=str(c)) for i, (g, c) in enumerate(nodes)]
    size = sum(k for _, _, k in shapes)
    pods = [make_pod(f"p{s}-{j}", namespace="ml", gang="job", pod_num=size, gpus=g, cpu=str(c), memory="1Gi")
            for s, (g, c, k) in enumerate(shapes) for j in range(k)]
    state = ClusterState()
    state.reset(raw, pods)
    decisions, _ = decide(state, T0)
    assert len(decisions) == 1 and set(decisions[0].placement) == set(state.pods)
    use: dict[str, dict[str, int]] = {}
    for key, node in decisions[0].placement.items():
        add_into(use.setdefault(node, {}), state.pods[key].request)
    assert all(fits(asked, state.free(node)) for node, asked in use.items())


@settings(max_examples=200, deadline=None)
@given(
    frees=st.lists(st.sampled_from([0, 2, 4, 6, 8]), min_size=1, max_size=6),
    first=st.tuples(st.integers(1, 6), st.sampled_from([1, 2, 4, 8])),
    second=st.tuples(st.integers(1, 6), st.sampled_from([1, 2, 4, 8])),
)
def test_of_two_gangs_that_each_fit_alone_the_older_always_goes(frees, first, second) -> None:
    nodes = [make_node(f"n{i}", gpus=g) for i, g in enumerate(frees)]

    def pods(name: str, spec: tuple[int, int], created: str) -> list[dict]:
        size, gpus = spec
        return [make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=size, gpus=gpus, created=created)
                for i in range(size)]

    a, b = pods("a", first, "2024-01-01T00:00:00Z"), pods("b", second, "2024-01-01T00:00:01Z")
    fits_alone = []
    for gang in (a, b):
        alone = ClusterState()
        alone.reset(nodes, gang)
        fits_alone.append(bool(decide(alone, T0)[0]))
    both = ClusterState()
    both.reset(nodes, a + b)
    decided = {d.gang_key[1]: d for d in decide(both, T0)[0]}
    assert ("a" in decided) == fits_alone[0]  # the older one is never pushed out by the younger
    if fits_alone[0] and fits_alone[1]:
        left = list(frees)
        for node in decided["a"].placement.values():
            left[int(node[1:])] -= first[1]
        room_left = sum(g // second[1] for g in left)
        assert ("b" in decided) == (room_left >= second[0])  # b goes iff it fits in what a left
