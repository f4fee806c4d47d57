"""kubesim clusters built from the Alibaba trace's node list: cards, memory per card by model, sampling."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from ganggate.sim import Simulator
from ganggate.sim.alibaba_nodes import MODEL_LABEL, read_node_list, sample_evenly

# The trace's whole GPU node list (42 kB), kept in the repo with its attribution (CC-BY 4.0, Weng et
# al., ATC 2023) so these run in a fresh clone: its first line is that attribution, as a comment.
NODE_LIST_WITH_ATTRIBUTION = Path(__file__).resolve().parent / "data" / "alibaba-gpu-v2023-gpu-nodes.csv"


def _write(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(row + "\n" for row in rows))
    return path


def test_each_row_becomes_a_node_with_its_cards_and_model_memory(tmp_path):
    path = _write(tmp_path, "a,64000,262144,2,P100", "b,96000,786432,8,V100M32", "cpu,32000,1024,0,")
    a, b = read_node_list(path)
    assert a == {"name": "a", "cpu": "64000m", "memory": "262144Mi", "gpus": 2,
                 "labels": {MODEL_LABEL: "P100"}, "gpu_mem_per_card": 16}
    assert b["gpu_mem_per_card"] == 32
    assert read_node_list(path, unit="MiB")[1]["gpu_mem_per_card"] == 32 * 1024
    assert len(read_node_list(path, gpu_only=False)) == 3


def test_an_unknown_model_or_a_bad_row_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="GPU model 'H100' has no known memory"):
        read_node_list(_write(tmp_path, "a,64000,262144,2,H100"))
    assert read_node_list(_write(tmp_path, "a,64000,262144,2,H100"), model_memory={"H100": 80})[0]["gpu_mem_per_card"] == 80
    with pytest.raises(ValueError, match="nodes.csv:2"):
        read_node_list(_write(tmp_path, "a,lots,262144,2,P100"))


def without_comments(source: Path, tmp_path: Path) -> Path:
    """The CSV the trace ships: the attribution line left out."""
    rows = [line for line in source.read_text().splitlines() if not line.startswith("#")]
    (tmp_path / "nodes.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "nodes.csv"


def test_the_trace_has_1213_gpu_nodes_and_sampling_keeps_the_model_mix(tmp_path):
    specs = read_node_list(without_comments(NODE_LIST_WITH_ATTRIBUTION, tmp_path))
    assert len(specs) == 1213
    assert sum(s["gpus"] for s in specs) == 6212
    sample = sample_evenly(specs, 40)
    assert len(sample) == 40 and len({s["name"] for s in sample}) == 40
    models = Counter(s["labels"][MODEL_LABEL] for s in sample)
    assert models["G2"] > models["T4"] > 0  # the two biggest groups both appear, in their order


async def test_a_sampled_cluster_serves_the_nodes(tmp_path):
    specs = sample_evenly(read_node_list(without_comments(NODE_LIST_WITH_ATTRIBUTION, tmp_path)), 12)
    async with Simulator(node_specs=specs, scheduler=False, kubelet=False) as sim, aiohttp.ClientSession() as session:
        async with session.get(f"{sim.url}/api/v1/nodes") as response:
            nodes = {n["metadata"]["name"]: n for n in (await response.json())["items"]}
    assert set(nodes) == {s["name"] for s in specs}
    for spec in specs:
        allocatable = nodes[spec["name"]]["status"]["allocatable"]
        assert allocatable["aliyun.com/gpu-count"] == str(spec["gpus"])
        assert allocatable["aliyun.com/gpu-mem"] == str(spec["gpus"] * spec["gpu_mem_per_card"])
