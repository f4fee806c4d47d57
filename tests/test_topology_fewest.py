"""Fewest domains when no one domain holds the gang, GPU-less members counted right (#21)."""

from __future__ import annotations

import json
from itertools import combinations

import pytest

from ganggate.cli import main
from ganggate.contract import GROUP_TOPOLOGY_PREFERRED, GROUP_TOPOLOGY_REQUIRED
from ganggate.core.placement.fewest import choose, fewest_count
from ganggate.core.state.snapshot import make_node, make_pod

RACK, BLOCK = "ganggate.io/rack", "ganggate.io/block"


def plan(capsys, tmp_path, items: list[dict], levels: str) -> dict:
    """`ganggate plan --snapshot` on these nodes and pods, as JSON: the one gang's entry."""
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code = main(["plan", "--snapshot", str(path), "-o", "json", "--topology-levels", levels])
    out, _ = capsys.readouterr()
    assert code == 0
    (gang,) = json.loads(out)["gangs"]
    return gang


def racks(count: int, per_rack: int = 2, block_of=lambda r: None) -> list[dict]:
    nodes = []
    for i in range(count * per_rack):
        labels = {"kubernetes.io/hostname": f"node-{i}", RACK: f"rack-{i // per_rack}"}
        if block_of(i // per_rack) is not None:
            labels[BLOCK] = block_of(i // per_rack)
        nodes.append(make_node(f"node-{i}", gpus=8, labels=labels))
    return nodes


def busy(node: str, gpus: int, name: str | None = None) -> dict:
    return make_pod(name or f"busy-{node}", namespace="other", gpus=gpus, node_name=node, phase="Running")


def gang(name: str, shapes: list[dict], preferred: str | None = RACK) -> list[dict]:
    pods = [make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=len(shapes), **shape)
            for i, shape in enumerate(shapes)]
    if preferred:
        for pod in pods:
            pod["metadata"]["annotations"][GROUP_TOPOLOGY_PREFERRED] = preferred
    return pods


def racks_used(placement: dict) -> set[str]:
    return {f"rack-{int(node.split('-')[1]) // 2}" for node in placement.values()}


@pytest.mark.parametrize("preferred", [RACK, None])
def test_a_gang_that_fits_no_rack_goes_into_the_fewest_racks_not_four(capsys, tmp_path, preferred):
    # The reproduction: 4 racks of 2 nodes x 8 GPUs, 4-GPU pods on node-0, 1, 2, 3 and 6:
    # racks 0 and 1 have 4+4 free, rack 2 8+8, rack 3 4+8. Six 4-GPU pods (24 GPUs) fit in no
    # rack; two racks hold them (rack 2 with rack 0 wastes nothing), where best fit over all
    # nodes took all four racks.
    items = racks(4) + [busy(f"node-{i}", 4) for i in (0, 1, 2, 3, 6)] + gang("ddp", [{"gpus": 4}] * 6, preferred)
    found = plan(capsys, tmp_path, items, f"{RACK},kubernetes.io/hostname")
    assert found["fits"]
    assert racks_used(found["placement"]) == {"rack-0", "rack-2"}


def test_a_launcher_without_gpu_goes_with_its_workers_into_the_one_rack_that_holds_them(capsys, tmp_path):
    # Racks 0-2 each have 3 + 5 GPUs free, rack 3 is empty: a launcher (cpu: 1, no GPU) and two
    # 4-GPU workers fit in rack 3 alone (the fragmented racks need two).
    items = racks(4)
    for r in range(3):
        items += [busy(f"node-{2 * r}", 5), busy(f"node-{2 * r + 1}", 3)]
    items += gang("mpi", [{"cpu": "1"}, {"gpus": 4}, {"gpus": 4}])
    found = plan(capsys, tmp_path, items, f"{RACK},kubernetes.io/hostname")
    assert found["fits"]
    assert racks_used(found["placement"]) == {"rack-3"}


def test_a_launcher_gang_that_requires_a_rack_goes_into_the_rack_that_holds_it(capsys, tmp_path):
    items = racks(4)
    for r in range(3):
        items += [busy(f"node-{2 * r}", 5), busy(f"node-{2 * r + 1}", 3)]
    pods = gang("mpi", [{"cpu": "1"}, {"gpus": 4}, {"gpus": 4}], preferred=None)
    for pod in pods:
        pod["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = RACK
    found = plan(capsys, tmp_path, items + pods, f"{RACK},kubernetes.io/hostname")
    assert found["fits"] and racks_used(found["placement"]) == {"rack-3"}


def test_by_default_the_block_that_needs_fewer_racks_wins_over_the_tighter_one(capsys, tmp_path):
    # Block a: racks 0-2 with 8 GPUs free each (one node of each busy); block b: racks 3 and 4
    # with 16 each. Three 8-GPU pods fit in no rack; block a holds them in three racks with
    # nothing left over, block b in two: the fewest racks inside one block is b's two.
    items = racks(5, block_of=lambda r: "a" if r < 3 else "b")
    items += [busy(f"node-{2 * r}", 8) for r in range(3)]
    items += gang("ddp", [{"gpus": 8}] * 3, preferred=None)
    found = plan(capsys, tmp_path, items, f"{BLOCK},{RACK},kubernetes.io/hostname")
    assert found["fits"]
    assert racks_used(found["placement"]) == {"rack-3", "rack-4"}


def test_the_count_is_the_fewest_the_rooms_allow():
    assert fewest_count([4, 8, 16, 12], 24) == 2
    assert fewest_count([4, 4], 9) is None


def brute_force(rooms: dict[str, int], demand: int) -> tuple[int, int]:
    for k in range(1, len(rooms) + 1):
        sums = [sum(rooms[d] for d in s) for s in combinations(rooms, k)]
        fitting = [s for s in sums if s >= demand]
        if fitting:
            return k, min(fitting) - demand
    raise AssertionError("no set")


@pytest.mark.parametrize("seed", range(20))
def test_one_level_choice_is_the_fewest_domains_then_the_least_waste(seed):
    import random

    rng = random.Random(seed)
    rooms = {f"r{i}": rng.choice([0, 4, 8, 12, 16, 24, 32]) for i in range(rng.randint(2, 9))}
    rooms["last"] = rng.choice([4, 8, 16])
    demand = rng.randint(1, sum(rooms.values()))
    found = choose(lambda i, d: rooms[d], lambda i, d: (), 1, 0, list(rooms), demand)
    assert found is not None
    assert (found.counts[0], found.waste) == brute_force(rooms, demand)
