"""Topology in view (pure): the levels a controller records on its lease, and the domain
`ganggate status` shows per node and per gang."""

from __future__ import annotations

from ganggate.controller.reporting.topology_view import gang_domain, levels_annotation, levels_from_lease, node_domain
from ganggate.controller.status.tables import format_status
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from tests.test_status import NOW, pod

LEVELS = ("topology.kubernetes.io/zone", "ganggate.io/block", "ganggate.io/rack", "kubernetes.io/hostname")


def rack_node(name: str, block: int, rack: int) -> dict:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "zone-a",
              "ganggate.io/block": f"block-{block}", "ganggate.io/rack": f"block-{block}-rack-{rack}"}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_lease_carries_the_levels_and_an_older_lease_none() -> None:
    lease = {"metadata": {"annotations": levels_annotation(LEVELS)}}
    assert levels_from_lease(lease) == LEVELS
    assert levels_from_lease({"metadata": {"annotations": levels_annotation(())}}) == ()
    assert levels_from_lease({"metadata": {}}) is None and levels_from_lease(None) is None


def test_domains_name_the_narrowest_level_holding_the_pods() -> None:
    labels = [rack_node(f"n{i}", 0, i // 2)["metadata"]["labels"] for i in range(4)]
    assert node_domain(labels[0], LEVELS) == "rack=block-0-rack-0"
    assert node_domain({"kubernetes.io/hostname": "x"}, LEVELS) == "-"
    assert gang_domain(labels[:2], LEVELS) == "rack=block-0-rack-0"
    assert gang_domain(labels, LEVELS) == "block=block-0"
    other = rack_node("m", 1, 0)["metadata"]["labels"] | {"topology.kubernetes.io/zone": "zone-b"}
    assert gang_domain([labels[0], other], LEVELS) == "2 zones"
    assert gang_domain([], LEVELS, "ganggate.io/rack") == "needs one rack"
    assert gang_domain([], LEVELS) == "-"


def test_status_shows_a_domain_column_only_with_levels() -> None:
    nodes = [rack_node(f"node-{i}", 0, i // 2) for i in range(4)]
    pods = [pod(f"w-{i}", "g", 2, 8, gated=False, node_name=f"node-{i}") for i in range(2)]
    for levels in (LEVELS, ()):
        state = ClusterState(topology_levels=levels)
        state.reset(nodes, pods)
        decisions, waitings = decide(state, NOW)
        text = format_status(state, decisions, waitings, NOW)
        gang_header, gang_row = text.splitlines()[:2]
        if levels:
            assert gang_header.split()[4] == "DOMAIN" and gang_row.split()[4] == "rack=block-0-rack-0"
            assert text.splitlines()[3].split()[-1] == "DOMAIN"
            assert text.splitlines()[-1].split()[-1] == "rack=block-0-rack-1"
        else:
            assert "DOMAIN" not in text
