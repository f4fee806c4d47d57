"""Placing pods of one shape in bulk places them exactly where best fit, one pod at a time, would.

plan_gang places a run of pods of one shape on a node with one take, and a gang's first run
in one pass over the node index (packing._greedy, Capacity.best_fit_run). The reference here
is the rule those shortcuts must keep: each pod, largest first, on Capacity.best_node given the
nodes the gang already uses, taken before the next pod is placed.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.packing import fits_as_planned, largest_first, plan_gang
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo
from ganggate.core.state.snapshot import make_node, make_pod


@st.composite
def clusters(draw) -> tuple[ClusterState, list[PodInfo]]:
    """A few nodes, partly used, and one gang of one or two shapes (some pods without GPU)."""
    nodes = [
        make_node(f"n{i}", gpus=draw(st.sampled_from([0, 4, 8])), cpu=draw(st.sampled_from(["8", "16", "64"])),
                  memory=draw(st.sampled_from(["16Gi", "256Gi"])), pods=draw(st.sampled_from(["2", "5", "110"])),
                  labels={"pool": draw(st.sampled_from(["a", "b"]))})
        for i in range(draw(st.integers(1, 8)))
    ]
    names = [n["metadata"]["name"] for n in nodes]
    pods = [make_pod(f"r{i}", namespace="busy", gpus=draw(st.sampled_from([0, 1, 2, 3])),
                     cpu=draw(st.sampled_from(["1", "6"])), node_name=draw(st.sampled_from(names)), phase="Running")
            for i in range(draw(st.integers(0, 8)))]
    shapes = draw(st.lists(st.tuples(st.sampled_from([0, 1, 2, 4]), st.sampled_from(["1", "3", "8"]),
                                     st.sampled_from(["1Gi", "8Gi"]), st.integers(1, 9)), min_size=1, max_size=2))
    selector = draw(st.sampled_from([None, {"pool": "a"}]))
    size = sum(shape[3] for shape in shapes)
    for s, (gpus, cpu, memory, count) in enumerate(shapes):
        pods += [make_pod(f"g-{s}-{j}", namespace="ml", gang="g", pod_num=size, gpus=gpus, cpu=cpu, memory=memory,
                          node_selector=selector) for j in range(count)]
    state = ClusterState()
    state.reset(nodes, pods)
    return state, state.gangs[("ml", "g")].gated_pods()


def one_at_a_time(pods: list[PodInfo], capacity: Capacity) -> dict[str, str] | None:
    """Best fit pod by pod, largest first; None when a pod fits nowhere."""
    placement: dict[str, str] = {}
    for pod in largest_first(pods):
        node = capacity.best_node(pod, dict.fromkeys(placement.values()))
        if node is None:
            return None
        capacity.take(node, pod.request)
        placement[pod.key] = node
    return placement


def index_view(capacity: Capacity, pod: PodInfo) -> dict[int, list]:
    index = capacity.index(pod)
    return {level: list(index.buckets[level]) for level in index.levels}


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_bulk_placement_is_best_fit_pod_by_pod(case) -> None:
    state, pods = case
    reference_capacity, capacity = Capacity.from_state(state), Capacity.from_state(state)
    expected = one_at_a_time(pods, reference_capacity)
    before = {name: dict(free) for name, free in capacity.free.items()}
    indexes_before = index_view(capacity, pods[0])
    result = plan_gang(pods, capacity)
    if expected is not None:
        assert result == expected
        assert capacity.free == reference_capacity.free
        assert index_view(capacity, pods[0]) == index_view(reference_capacity, pods[0])
    elif len({(p.request.get("nvidia.com/gpu"), p.request.get("cpu"), p.request.get("memory")) for p in pods}) == 1:
        assert isinstance(result, Unfit)  # one shape: best fit is the only try
    if isinstance(result, Unfit):  # nothing taken, the index as it was
        assert capacity.free == before
        assert index_view(capacity, pods[0]) == indexes_before


def test_a_gang_of_one_gpu_pods_fills_each_node_before_the_next() -> None:
    """Sixteen 1-GPU pods on three 8-GPU nodes with 8, 5 and 8 free: the 5 first (least left),
    then the first of the empty ones, then the rest on the other."""
    nodes = [make_node(f"n{i}", gpus=8) for i in range(3)]
    running = [make_pod("busy", namespace="b", gpus=3, node_name="n1", phase="Running")]
    gang = [make_pod(f"p{j:02d}", namespace="ml", gang="g", pod_num=16, gpus=1) for j in range(16)]
    state = ClusterState()
    state.reset(nodes, running + gang)
    capacity = Capacity.from_state(state)
    placement = plan_gang(state.gangs[("ml", "g")].gated_pods(), capacity)
    assert isinstance(placement, dict)
    assert [placement[f"ml/p{j:02d}"] for j in range(16)] == ["n1"] * 5 + ["n0"] * 8 + ["n2"] * 3
    assert [capacity.level[n] for n in ("n0", "n1", "n2")] == [0, 0, 5000]


@settings(max_examples=400, deadline=None)
@given(clusters(), st.data())
def test_fits_as_planned_tells_what_plan_gang_would_answer_without_placing(case, data) -> None:
    """Where it tells (one shape asking whole GPUs, no cards, no topology), fits_as_planned
    answers whether plan_gang places the gang, for any number needed, and takes nothing."""
    state, pods = case
    need = data.draw(st.integers(0, len(pods)))
    capacity = Capacity.from_state(state)
    before = {name: dict(free) for name, free in capacity.free.items()}
    indexes_before = index_view(capacity, pods[0])
    told = fits_as_planned(pods, capacity, need)
    assert capacity.free == before and index_view(capacity, pods[0]) == indexes_before
    one_shape = len({(p.request.get("nvidia.com/gpu"), p.request.get("cpu"), p.request.get("memory")) for p in pods}) == 1
    if one_shape and pods[0].gpu > 0:
        assert told is not None
    if told is not None:
        assert told == (not isinstance(plan_gang(pods, capacity, need), Unfit))
