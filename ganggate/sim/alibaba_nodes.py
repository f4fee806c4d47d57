"""kubesim nodes from the Alibaba GPU cluster's node list (openb_node_list_gpu_node.csv), cards shared by memory.

The list (alibaba/clusterdata cluster-trace-gpu-v2023, the FGD paper's trace) gives per node:
`sn,cpu_milli,memory_mib,gpu,model`. Each node becomes a kubesim node named after `sn` with that
CPU and memory, `gpu` cards advertised whole (`nvidia.com/gpu`) and shared (`aliyun.com/gpu-mem`,
`aliyun.com/gpu-count`), the card memory taken from the model, and the model in the label
`nvidia.com/gpu.product` (the label NVIDIA gpu-feature-discovery writes).

Memory per card, from NVIDIA's data sheets: P100 16 GB (the PCIe card also exists with 12 GB; we
assume 16), T4 16 GB, V100M16 16 GB, V100M32 32 GB, A10 24 GB. G1, G2 and G3 are Alibaba's
undisclosed models (the trace's README says so): we ASSUME 16 GB for them, the smallest of the
disclosed models; `model_memory` overrides any of these. Pure apart from reading the file.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODEL_LABEL = "nvidia.com/gpu.product"
# GiB per card by the trace's model name (see the module docstring for sources and assumptions).
MODEL_MEMORY_GIB: dict[str, int] = {
    "P100": 16, "T4": 16, "V100M16": 16, "V100M32": 32, "A10": 24,
    "G1": 16, "G2": 16, "G3": 16,
}
UNITS = {"GiB": 1, "MiB": 1024}  # gpushare-device-plugin --memory-unit (GiB by default)


def read_node_list(path: str | Path, *, unit: str = "GiB", model_memory: Mapping[str, int] | None = None,
                   gpu_only: bool = True) -> list[dict[str, Any]]:
    """One `Simulator.add_node` keyword dict per row; ValueError naming the row for a bad one.

    `model_memory` adds to or overrides MODEL_MEMORY_GIB (GiB per card); `unit` is the gpu-mem unit."""
    if unit not in UNITS:
        raise ValueError(f"gpu memory unit {unit!r}: expected one of {', '.join(UNITS)}")
    memory = dict(MODEL_MEMORY_GIB, **(model_memory or {}))
    specs: list[dict[str, Any]] = []
    with open(path, newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                name, cpu_milli = row["sn"].strip(), int(row["cpu_milli"])
                memory_mib, cards, model = int(row["memory_mib"]), int(row["gpu"] or 0), (row["model"] or "").strip()
            except (KeyError, ValueError, AttributeError) as exc:
                raise ValueError(f"{path}:{line}: expected sn,cpu_milli,memory_mib,gpu,model: {exc}") from None
            if cards <= 0 and gpu_only:
                continue
            if cards > 0 and model not in memory:
                raise ValueError(f"{path}:{line}: GPU model {model!r} has no known memory per card; "
                                 f"give it (known: {', '.join(sorted(memory))})")
            specs.append({
                "name": name, "cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "gpus": cards,
                "labels": {MODEL_LABEL: model} if model else None,
                "gpu_mem_per_card": memory[model] * UNITS[unit] if cards > 0 else 0,
            })
    return specs


def sample_evenly(specs: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """`count` nodes spread evenly over the list (every k-th), so a small cluster keeps the list's model mix."""
    if count <= 0 or count >= len(specs):
        return list(specs)
    return [specs[i * len(specs) // count] for i in range(count)]
