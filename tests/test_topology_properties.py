"""Properties of topology-aware placement over random clusters and gangs."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.placement.domains import domain_of
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from tests.test_topology import BLOCK, LEVELS, NOW, RACK, gang, members, node, running

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
    pod_objects = {f"{p['metadata'].get('namespace') or 'default'}/{p['metadata']['name']}": p for p in pods}
    placed_gpus: dict[str, int] = defaultdict(int)
    for d in decisions:
        first = pod_objects[next(iter(d.placement))]
        required = (first["metadata"]["annotations"] or {}).get("scheduling.k8s.io/group-topology-required")
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


@st.composite
def gangs_under_way(draw):
    """A random cluster (as clusters()) plus gangs with members already released into one domain
    of their required level: bound (a started gang's extras wait) or released unbound with a
    decision (a release cut short, to roll forward)."""
    nodes, pods = draw(clusters())
    with_levels = draw(st.booleans())
    levels = LEVELS if with_levels else ()
    for g in range(draw(st.integers(1, 3))):
        level = draw(st.sampled_from([BLOCK, RACK]))
        anchor = draw(st.sampled_from(nodes))
        domain = domain_of(anchor, level, levels)
        same = [n["metadata"]["name"] for n in nodes if domain_of(n, level, levels) == domain]
        n, released = draw(st.integers(2, 5)), draw(st.integers(1, 4))
        released = min(released, n - 1)
        started = draw(st.booleans())  # min-available reached (extras) or not (cut short)
        kind = draw(st.sampled_from(["required", "preferred", "none"]))
        ours = members(f"u{g}", n, draw(st.sampled_from([1, 2, 4])),
                       released_on=[draw(st.sampled_from(same)) for _ in range(released)],
                       min_available=released if started else n, bound=started,
                       required=level if kind == "required" else None,
                       preferred=level if kind == "preferred" else None)
        pods += ours
    return nodes, pods, levels


@settings(max_examples=300, deadline=None)
@given(gangs_under_way(), st.booleans())
def test_extras_and_the_rest_of_a_cut_short_release_never_leave_the_required_domain(cluster, starving):
    nodes, pods, levels = cluster
    state, (decisions, _) = run(nodes, pods, levels, 0.0 if starving else 300.0)
    raw = {n["metadata"]["name"]: n for n in nodes}
    for d in decisions:
        gang = state.gangs[d.gang_key]
        required = gang.spec.topology_required
        if not required:
            continue
        already = {p.node_name or p.decision["node"] for p in gang.released_pods()}
        placed = set(d.placement.values()) | already
        assert len({domain_of(raw[n], required, levels) for n in placed}) == 1, (d, already)
