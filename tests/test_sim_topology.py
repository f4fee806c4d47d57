"""kubesim clusters with a topology: blocks of racks of nodes, as zone / block / rack node labels."""

from __future__ import annotations

import pytest

from ganggate.sim import Simulator
from ganggate.sim.topology import TopologyShape, parse_shape


def test_a_shape_numbers_nodes_rack_by_rack():
    shape = parse_shape("2x3x4")
    assert (shape.blocks, shape.racks_per_block, shape.nodes_per_rack, shape.nodes) == (2, 3, 4, 24)
    assert shape.labels(0) == {"topology.kubernetes.io/zone": "zone-a", "ganggate.io/block": "block-0",
                               "ganggate.io/rack": "block-0-rack-0"}
    assert shape.labels(3)["ganggate.io/rack"] == "block-0-rack-0"
    assert shape.labels(4)["ganggate.io/rack"] == "block-0-rack-1"
    assert shape.labels(12) == {"topology.kubernetes.io/zone": "zone-a", "ganggate.io/block": "block-1",
                                "ganggate.io/rack": "block-1-rack-0"}
    assert shape.labels(23)["ganggate.io/rack"] == "block-1-rack-2"
    assert shape.levels == ("topology.kubernetes.io/zone", "ganggate.io/block", "ganggate.io/rack",
                            "kubernetes.io/hostname")


@pytest.mark.parametrize("text", ["4x4", "4x4x8x2", "axbxc", "0x1x1", "1x-1x1", ""])
def test_a_bad_shape_is_refused(text):
    with pytest.raises(ValueError, match="topology"):
        parse_shape(text)


def test_label_keys_can_be_chosen_but_not_clash():
    shape = parse_shape("1x2x1", block_label="example.com/block", rack_label="example.com/rack")
    assert shape.labels(1) == {"topology.kubernetes.io/zone": "zone-a", "example.com/block": "block-0",
                               "example.com/rack": "block-0-rack-1"}
    with pytest.raises(ValueError, match="distinct"):
        TopologyShape(1, 1, 1, rack_label="ganggate.io/block")
    with pytest.raises(ValueError, match="distinct"):
        TopologyShape(1, 1, 1, rack_label="kubernetes.io/hostname")


async def test_the_simulator_labels_its_nodes_by_topology():
    async with Simulator(topology="2x2x2", gpus_per_node=4, scheduler=False, kubelet=False, controllers=False) as sim:
        nodes = [stored.obj for _, stored in sim.store.iter("nodes")]
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    assert sorted(labels) == [f"node-{i}" for i in range(8)]
    assert labels["node-5"]["ganggate.io/block"] == "block-1"
    assert labels["node-5"]["ganggate.io/rack"] == "block-1-rack-0"
    assert labels["node-5"]["kubernetes.io/hostname"] == "node-5"
    assert all(n["status"]["capacity"]["nvidia.com/gpu"] == "4" for n in nodes)


def test_sim_serve_refuses_a_bad_topology(capsys):
    from ganggate.cli import main

    assert main(["sim", "serve", "--topology", "4x4"]) == 2
    assert main(["sim", "serve", "--topology", "1x1x1", "--rack-label", "ganggate.io/block"]) == 2
    out = capsys.readouterr().out
    assert "BLOCKSxRACKSxNODES" in out and "distinct" in out


def test_nvlink_cliques_split_each_rack_and_are_labelled_as_gpu_feature_discovery_does():
    shape = parse_shape("1x2x4", cliques_per_rack=2)
    assert shape.levels == ("topology.kubernetes.io/zone", "ganggate.io/block", "ganggate.io/rack",
                            "nvidia.com/gpu.clique", "kubernetes.io/hostname")
    cliques = [shape.labels(i)["nvidia.com/gpu.clique"] for i in range(8)]
    # <ClusterUUID>.<CliqueId>: one fabric per rack, cliques numbered within it.
    fabric, _, clique = cliques[0].rpartition(".")
    assert len(fabric) == 36 and clique == "0"
    assert cliques[0] == cliques[1] != cliques[2] == cliques[3]
    assert {c.rpartition(".")[0] for c in cliques[:4]} == {fabric} != {c.rpartition(".")[0] for c in cliques[4:]}
    assert [c.rpartition(".")[2] for c in cliques] == ["0", "0", "1", "1", "0", "0", "1", "1"]
    assert shape.cliques == 4
    assert parse_shape("1x1x5", cliques_per_rack=2).cliques == 2  # 3 + 2 nodes
    assert "nvidia.com/gpu.clique" not in parse_shape("1x1x4").labels(0)


def test_a_rack_is_split_into_exactly_the_cliques_asked_for():
    # A ceiling size per clique once gave 4 nodes in 3 cliques as 2 cliques of 2.
    for nodes, asked, sizes in [(4, 3, [2, 1, 1]), (5, 4, [2, 1, 1, 1]), (8, 5, [2, 2, 1, 2, 1]), (3, 3, [1, 1, 1])]:
        shape = parse_shape(f"1x2x{nodes}", cliques_per_rack=asked)
        ids = [int(shape.labels(i)["nvidia.com/gpu.clique"].rpartition(".")[2]) for i in range(nodes)]
        assert ids == sorted(ids)  # consecutive nodes
        assert [ids.count(c) for c in range(asked)] == sizes
        assert len({shape.labels(i)["nvidia.com/gpu.clique"] for i in range(shape.nodes)}) == shape.cliques == 2 * asked


def test_a_bad_clique_count_is_refused():
    with pytest.raises(ValueError, match="cliques per rack"):
        parse_shape("1x1x4", cliques_per_rack=5)
    with pytest.raises(ValueError, match="cliques per rack"):
        parse_shape("1x1x4", cliques_per_rack=-1)
    with pytest.raises(ValueError, match="distinct"):
        parse_shape("1x1x4", cliques_per_rack=2, clique_label="ganggate.io/rack")


def test_sim_serve_refuses_cliques_without_a_topology(capsys):
    from ganggate.cli import main

    assert main(["sim", "serve", "--nvlink-cliques", "2"]) == 2
    assert main(["sim", "serve", "--topology", "1x1x2", "--nvlink-cliques", "3"]) == 2
    out = capsys.readouterr().out
    assert "--nvlink-cliques needs --topology" in out and "cliques per rack" in out
