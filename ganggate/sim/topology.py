"""Cluster topology for kubesim's nodes: blocks of racks of nodes, carried as node labels.

A shape `BLOCKSxRACKSxNODES` (e.g. `4x4x8`: 4 blocks of 4 racks of 8 nodes, 128 nodes) numbers
the nodes in order, rack by rack: node i is in rack i // NODES (of all racks) and block
i // (RACKS * NODES). Each node gets, besides the kubelet's `kubernetes.io/hostname`:

    topology.kubernetes.io/zone: <zone>        (one zone for the whole cluster, "zone-a")
    ganggate.io/block:           block-<b>
    ganggate.io/rack:            block-<b>-rack-<r>

Rack values include their block, so a rack label alone names one rack. The keys can be changed
(`TopologyShape(..., block_label=..., rack_label=..., zone_label=...)`).

With `cliques_per_rack` (`--nvlink-cliques`), each rack's nodes are also split into that many
NVLink domains (consecutive nodes, exactly that many, their sizes differing by at most one),
a level narrower than the rack,
labelled as NVIDIA's GPU feature discovery labels the nodes of a multi-node NVLink system
such as GB200 NVL72: `nvidia.com/gpu.clique: <ClusterUUID>.<CliqueId>`, the fabric's cluster
UUID and the clique id its GPUs report (NVIDIA/k8s-device-plugin, internal/lm/imex.go,
imexLabelerForConfigFile: `strings.Join([]string{clusterUUID, cliqueID}, ".")`). Here each rack
is one NVLink fabric (a UUID made from the rack's name) and its cliques are numbered from 0.
Pure: no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "ganggate.io/block"
RACK_LABEL = "ganggate.io/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CLIQUE_LABEL = "nvidia.com/gpu.clique"


@dataclass(frozen=True)
class TopologyShape:
    """Blocks x racks per block x nodes per rack, and the label keys to write."""

    blocks: int
    racks_per_block: int
    nodes_per_rack: int
    zone: str = "zone-a"
    zone_label: str = ZONE_LABEL
    block_label: str = BLOCK_LABEL
    rack_label: str = RACK_LABEL
    cliques_per_rack: int = 0  # NVLink domains per rack; 0: no clique label
    clique_label: str = CLIQUE_LABEL

    def __post_init__(self) -> None:
        for name in ("blocks", "racks_per_block", "nodes_per_rack"):
            if getattr(self, name) < 1:
                raise ValueError(f"topology: {name.replace('_', ' ')} must be at least 1")
        if not 0 <= self.cliques_per_rack <= self.nodes_per_rack:
            raise ValueError(f"topology: NVLink cliques per rack must be from 0 to the {self.nodes_per_rack} "
                             f"nodes of a rack, not {self.cliques_per_rack}")
        keys = [self.zone_label, self.block_label, self.rack_label]
        keys += [self.clique_label] if self.cliques_per_rack else []
        if len(set(keys)) != len(keys) or HOSTNAME_LABEL in keys or not all(keys):
            raise ValueError("topology: the zone, block, rack (and clique) label keys must be distinct, non-empty "
                             f"and not {HOSTNAME_LABEL}")

    @property
    def nodes(self) -> int:
        return self.blocks * self.racks_per_block * self.nodes_per_rack

    @property
    def levels(self) -> tuple[str, ...]:
        """The label keys from widest to narrowest, as the controller's --topology-levels takes them."""
        clique = (self.clique_label,) if self.cliques_per_rack else ()
        return (self.zone_label, self.block_label, self.rack_label, *clique, HOSTNAME_LABEL)

    def labels(self, index: int) -> dict[str, str]:
        """The topology labels of the index-th node (0-based)."""
        if not 0 <= index < self.nodes:
            raise ValueError(f"topology: node {index} is outside the {self.nodes} nodes of the shape")
        rack = index // self.nodes_per_rack
        block = rack // self.racks_per_block
        rack_name = f"block-{block}-rack-{rack % self.racks_per_block}"
        labels = {self.zone_label: self.zone, self.block_label: f"block-{block}", self.rack_label: rack_name}
        if self.cliques_per_rack:
            # Exactly cliques_per_rack cliques of consecutive nodes, sizes differing by at most one
            # (a ceiling size per clique would leave fewer: 4 nodes in 3 cliques of 2 make 2).
            clique = index % self.nodes_per_rack * self.cliques_per_rack // self.nodes_per_rack
            fabric = uuid.uuid5(uuid.NAMESPACE_DNS, f"{rack_name}.{self.zone}.kubesim")
            labels[self.clique_label] = f"{fabric}.{clique}"
        return labels

    @property
    def cliques(self) -> int:
        """How many NVLink cliques the nodes are in (0 without the clique label)."""
        return self.blocks * self.racks_per_block * self.cliques_per_rack


def parse_shape(text: str, **options: Any) -> TopologyShape:
    """`"4x4x8"` -> TopologyShape(4, 4, 8); ValueError naming the problem otherwise."""
    parts = text.lower().replace(" ", "").split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"topology {text!r}: expected BLOCKSxRACKSxNODES, e.g. 4x4x8")
    blocks, racks, nodes = (int(p) for p in parts)
    return TopologyShape(blocks, racks, nodes, **options)  # options: TopologyShape's other fields
