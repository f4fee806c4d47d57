"""Properties of topology-aware placement over random clusters and gangs."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.cluster import ClusterState
from ganggate.core.planner import decide
from ganggate.core.topology import domain_of
from tests.test_topology import BLOCK, LEVELS, NOW, RACK, gang, node, running

LABEL = st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))


@st.composite
def clusters(draw):
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 12))):
        nodes.append(node(f"n{i}", draw(LABEL), draw(LABEL), gpus=draw(st.sampled_from([4, 8]))))
        used = draw(st.integers(0, 8))
        if used:
            pods.append(running(f"r{i}", f"n{i}", min(used, 4)))
    for g in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["required", "preferred", "none"]))
        level = draw(st.sampled_from([BLOCK, RACK]))
        pods += gang(f"g{g}", draw(st.integers(1, 5)), draw(st.sampled_from([1, 2, 4, 8])),
                     required=level if kind == "required" else None,
                     preferred=level if kind == "preferred" else None,
                     created=f"2024-01-01T00:00:{g:02d}Z")
    return nodes, pods


def run(nodes, pods, levels=LEVELS, starvation=300.0):
    state = ClusterState(topology_levels=levels)
    state.reset(nodes, pods)
    return state, decide(state, NOW + 600, starvation_seconds=starvation)


@settings(max_examples=300, deadline=None)
@given(clusters(), st.booleans(), st.booleans())
def test_required_topology_is_never_violated_and_nodes_never_overcommitted(cluster, with_levels, starving):
    nodes, pods = cluster
    state, (decisions, _) = run(nodes, pods, LEVELS if with_levels else (), 0.0 if starving else 300.0)
    raw = {n["metadata"]["name"]: n for n in nodes}
    placed_gpus: dict[str, int] = defaultdict(int)
    for d in decisions:
        members = [state.pods[key] for key in d.placement]
        required = (members[0].raw["metadata"]["annotations"] or {}).get("scheduling.k8s.io/group-topology-required")
        if required:
            assert len({domain_of(raw[n], required, LEVELS if with_levels else ()) for n in d.placement.values()}) == 1
        for key, name in d.placement.items():
            placed_gpus[name] += int(state.pods[key].request.get("nvidia.com/gpu", 0))
    for name, amount in placed_gpus.items():
        assert amount <= int(state.free(name).get("nvidia.com/gpu", 0))


@settings(max_examples=200, deadline=None)
@given(clusters(), st.sampled_from([BLOCK, RACK]))
def test_preferred_topology_never_makes_a_gang_wait(cluster, level):
    nodes, pods = cluster
    ours = [p for p in pods if p["metadata"]["name"].startswith("g0-")]
    plain = [p for p in pods if p["metadata"].get("namespace") == "busy"]
    for pod in ours:
        pod["metadata"]["annotations"].pop("scheduling.k8s.io/group-topology-required", None)
        pod["metadata"]["annotations"].pop("scheduling.k8s.io/group-topology-preferred", None)
    _, (without, _) = run(nodes, plain + ours, levels=())
    for pod in ours:
        pod["metadata"]["annotations"]["scheduling.k8s.io/group-topology-preferred"] = level
    _, (with_pref, _) = run(nodes, plain + ours)
    assert bool(without) == bool(with_pref)
