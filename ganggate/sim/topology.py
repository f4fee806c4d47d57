"""Cluster topology for kubesim's nodes: blocks of racks of nodes, carried as node labels.

A shape `BLOCKSxRACKSxNODES` (e.g. `4x4x8`: 4 blocks of 4 racks of 8 nodes, 128 nodes) numbers
the nodes in order, rack by rack: node i is in rack i // NODES (of all racks) and block
i // (RACKS * NODES). Each node gets, besides the kubelet's `kubernetes.io/hostname`:

    topology.kubernetes.io/zone: <zone>        (one zone for the whole cluster, "zone-a")
    ganggate.io/block:           block-<b>
    ganggate.io/rack:            block-<b>-rack-<r>

Rack values include their block, so a rack label alone names one rack. The keys can be changed
(`TopologyShape(..., block_label=..., rack_label=..., zone_label=...)`). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "ganggate.io/block"
RACK_LABEL = "ganggate.io/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"


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

    def __post_init__(self) -> None:
        for name in ("blocks", "racks_per_block", "nodes_per_rack"):
            if getattr(self, name) < 1:
                raise ValueError(f"topology: {name.replace('_', ' ')} must be at least 1")
        keys = [self.zone_label, self.block_label, self.rack_label]
        if len(set(keys)) != len(keys) or HOSTNAME_LABEL in keys or not all(keys):
            raise ValueError("topology: the zone, block and rack label keys must be distinct, non-empty "
                             f"and not {HOSTNAME_LABEL}")

    @property
    def nodes(self) -> int:
        return self.blocks * self.racks_per_block * self.nodes_per_rack

    @property
    def levels(self) -> tuple[str, ...]:
        """The label keys from widest to narrowest, as the controller's --topology-levels takes them."""
        return (self.zone_label, self.block_label, self.rack_label, HOSTNAME_LABEL)

    def labels(self, index: int) -> dict[str, str]:
        """The topology labels of the index-th node (0-based)."""
        if not 0 <= index < self.nodes:
            raise ValueError(f"topology: node {index} is outside the {self.nodes} nodes of the shape")
        rack = index // self.nodes_per_rack
        block = rack // self.racks_per_block
        return {self.zone_label: self.zone, self.block_label: f"block-{block}",
                self.rack_label: f"block-{block}-rack-{rack % self.racks_per_block}"}


def parse_shape(text: str, **labels: str) -> TopologyShape:
    """`"4x4x8"` -> TopologyShape(4, 4, 8); ValueError naming the problem otherwise."""
    parts = text.lower().replace(" ", "").split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"topology {text!r}: expected BLOCKSxRACKSxNODES, e.g. 4x4x8")
    blocks, racks, nodes = (int(p) for p in parts)
    return TopologyShape(blocks, racks, nodes, **labels)
