"""The scheduler's cache: every node's allocatable and requested amounts, kept incrementally.

Like pkg/scheduler/backend/cache (NodeInfo.Requested / NonZeroRequested / Pods), but held
as numpy columns, one slot per node, so that a decision filters and scores all nodes with
a handful of vector operations instead of a Python loop. Pods count on their node from
the moment they are assumed (before the bind round-trip) until they are deleted or
terminate (the real scheduler's pod informer excludes Succeeded/Failed pods).

The node-level filters (readiness, cordon, taints, node selection) depend only on the pod's
placement fields and the nodes, so their verdicts are cached per distinct pod "signature"
and thrown away whenever a node's labels, taints, cordon or readiness change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

import numpy as np

from ganggate.sim.helpers import taints
from ganggate.sim.helpers.nodeaffinity import RequiredNodeAffinity
from ganggate.sim.helpers.podrequests import CPU, MEMORY, PODS, Resources, node_allocatable
from ganggate.sim.scheduler.plugins import AFFINITY, NOT_READY, UNSCHEDULABLE, node_is_ready

_MAX_SIGNATURES = 4096

# The columns are int64 milli-units, so 9.2e15 bytes at most; the real scheduler's int64 counts
# whole bytes. Larger amounts (an "1E" quantity) saturate here instead of overflowing, with room
# left for sums.
SATURATED = 2**62


def _saturate(amount: int) -> int:
    return amount if -SATURATED < amount < SATURATED else (SATURATED if amount > 0 else -SATURATED)


@dataclass
class PodEntry:
    """A pod the cache counts on a node."""

    node: str
    request: Resources
    nonzero_cpu: int
    nonzero_memory: int
    assumed: bool = False
    priority: int = 0  # spec.priority: preemption looks for lower-priority pods


@dataclass
class StaticVerdict:
    """The node-level filters' verdict for one pod signature over all slots."""

    ok: np.ndarray  # bool per slot: passes readiness, cordon, taints and node selection
    counts: dict[str, int] = field(default_factory=dict)  # reason -> number of nodes rejected


class ClusterCache:
    """Nodes and the pods assigned to them, with per-node sums kept up to date."""

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self.names: list[str | None] = [None] * capacity
        self.nodes: list[Mapping | None] = [None] * capacity
        self.index: dict[str, int] = {}
        self._free: list[int] = []
        self._next_slot = 0
        self.resources: dict[str, int] = {CPU: 0, MEMORY: 1}  # resource -> row
        self.valid = np.zeros(capacity, dtype=bool)
        self.ready = np.zeros(capacity, dtype=bool)
        self.cordoned = np.zeros(capacity, dtype=bool)
        self.tainted = np.zeros(capacity, dtype=bool)
        self.allocatable = np.zeros((len(self.resources), capacity), dtype=np.int64)
        self.requested = np.zeros((len(self.resources), capacity), dtype=np.int64)
        self.pod_limit = np.zeros(capacity, dtype=np.int64)
        self.pod_count = np.zeros(capacity, dtype=np.int64)
        self.nonzero_cpu = np.zeros(capacity, dtype=np.int64)
        self.nonzero_memory = np.zeros(capacity, dtype=np.int64)
        self.pods: dict[str, PodEntry] = {}
        self.pods_by_node: dict[str, set[str]] = {}
        self.priority_counts: dict[int, int] = {}  # priority -> pods counted with it (preemption's quick no)
        self.generation = 0  # bumped when a node-level filter input changes
        self.layout = 0  # bumped when a slot gets or loses its node, or the arrays grow (rows or slots)
        self._verdicts: dict[str, tuple[int, StaticVerdict]] = {}
        self._label_masks: dict[tuple[str, str], tuple[int, np.ndarray]] = {}

    # -- nodes ---------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.index)

    @property
    def slots_in_use(self) -> int:
        """One past the highest slot ever given to a node (the nodes' order is slot order)."""
        return self._next_slot

    def _grow(self) -> None:
        old = self._capacity
        new = old * 2
        self._capacity = new
        self.generation += 1  # cached verdicts and label masks have the old length
        self.layout += 1
        self.names.extend([None] * (new - old))
        self.nodes.extend([None] * (new - old))
        for attr in ("valid", "ready", "cordoned", "tainted", "pod_limit", "pod_count", "nonzero_cpu", "nonzero_memory"):
            array = getattr(self, attr)
            grown = np.zeros(new, dtype=array.dtype)
            grown[:old] = array
            setattr(self, attr, grown)
        for attr in ("allocatable", "requested"):
            array = getattr(self, attr)
            grown = np.zeros((array.shape[0], new), dtype=np.int64)
            grown[:, :old] = array
            setattr(self, attr, grown)

    def resource_row(self, name: str) -> int:
        """The row of `resource` in allocatable and requested, added (the arrays grown) if new."""
        return self._resource_row(name)

    def _resource_row(self, name: str) -> int:
        row = self.resources.get(name)
        if row is None:
            row = len(self.resources)
            self.resources[name] = row
            self.layout += 1
            for attr in ("allocatable", "requested"):
                array = getattr(self, attr)
                setattr(self, attr, np.vstack([array, np.zeros((1, self._capacity), dtype=np.int64)]))
        return row

    @staticmethod
    def _filter_inputs(node: Mapping) -> tuple:
        metadata = node.get("metadata") or {}
        spec = node.get("spec") or {}
        return (
            metadata.get("labels") or {},
            spec.get("taints") or [],
            bool(spec.get("unschedulable")),
            node_is_ready(node),
        )

    def set_node(self, node: Mapping) -> bool:
        """Add or update a node; True when this may let a waiting pod fit somewhere new."""
        name = node["metadata"]["name"]
        slot = self.index.get(name)
        old = self.nodes[slot] if slot is not None else None
        if slot is None:
            if self._free:
                slot = self._free.pop()
            else:
                if self._next_slot >= self._capacity:
                    self._grow()
                slot = self._next_slot
                self._next_slot += 1
            self.index[name] = slot
            self.names[slot] = name
            self.valid[slot] = True
            self.layout += 1
        self.nodes[slot] = node
        if old is None or self._filter_inputs(old) != self._filter_inputs(node):
            self.generation += 1
        self.ready[slot] = node_is_ready(node)
        self.cordoned[slot] = taints.is_unschedulable(node)
        self.tainted[slot] = any(t.get("effect") in taints.DO_NOT_SCHEDULE_EFFECTS for t in taints.node_taints(node))
        allocatable = node_allocatable(node)
        self.allocatable[:, slot] = 0
        for resource, amount in allocatable.items():
            if resource == PODS:
                continue
            row = self._resource_row(resource)  # may grow the arrays: look it up first
            self.allocatable[row, slot] = _saturate(amount)
        self.pod_limit[slot] = _saturate(allocatable.get(PODS, 0) // 1000)
        if old is None:
            self._recount(name, slot)
        return True

    def remove_node(self, name: str) -> bool:
        """Forget a node; its pods stay known and count again if it comes back."""
        slot = self.index.pop(name, None)
        if slot is None:
            return False
        self.names[slot] = None
        self.nodes[slot] = None
        self.valid[slot] = False
        self.ready[slot] = self.cordoned[slot] = self.tainted[slot] = False
        self.allocatable[:, slot] = 0
        self.requested[:, slot] = 0
        self.pod_limit[slot] = self.pod_count[slot] = 0
        self.nonzero_cpu[slot] = self.nonzero_memory[slot] = 0
        self._free.append(slot)
        self.generation += 1
        self.layout += 1
        return True

    def _recount(self, name: str, slot: int) -> None:
        self.requested[:, slot] = 0
        self.pod_count[slot] = self.nonzero_cpu[slot] = self.nonzero_memory[slot] = 0
        for key in self.pods_by_node.get(name, ()):
            self._apply(self.pods[key], slot, 1)

    # -- pods ----------------------------------------------------------------------------

    def _apply(self, entry: PodEntry, slot: int, sign: int) -> None:
        self.apply_sum(entry.request, 1, entry.nonzero_cpu, entry.nonzero_memory, slot, sign)

    def apply_sum(self, request: Resources, pods: int, nonzero_cpu: int, nonzero_memory: int, slot: int,
                  sign: int) -> None:
        """Count (sign 1) or stop counting (-1) on a node what `pods` pods request together."""
        for resource, amount in request.items():
            if resource != PODS:
                row = self._resource_row(resource)  # may grow the arrays: look it up first
                self.requested[row, slot] += sign * _saturate(amount)
        self.pod_count[slot] += sign * pods
        self.nonzero_cpu[slot] += sign * nonzero_cpu
        self.nonzero_memory[slot] += sign * nonzero_memory

    def add_pod(self, key: str, entry: PodEntry) -> None:
        """Count a pod on its node (replacing what was counted for the same key)."""
        self.remove_pod(key)
        self.pods[key] = entry
        self.pods_by_node.setdefault(entry.node, set()).add(key)
        self.priority_counts[entry.priority] = self.priority_counts.get(entry.priority, 0) + 1
        slot = self.index.get(entry.node)
        if slot is not None:
            self._apply(entry, slot, 1)

    def remove_pod(self, key: str) -> PodEntry | None:
        """Stop counting a pod; returns what was counted, if anything."""
        entry = self.pods.pop(key, None)
        if entry is None:
            return None
        left = self.priority_counts.pop(entry.priority, 1) - 1
        if left:
            self.priority_counts[entry.priority] = left
        keys = self.pods_by_node.get(entry.node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.pods_by_node[entry.node]
        slot = self.index.get(entry.node)
        if slot is not None:
            self._apply(entry, slot, -1)
        return entry

    def free(self, node: str) -> Resources:
        """What is left on a node (allocatable - requested), for tests and reports."""
        slot = self.index[node]
        out = {name: int(self.allocatable[row, slot] - self.requested[row, slot]) for name, row in self.resources.items()}
        out[PODS] = int(self.pod_limit[slot] - self.pod_count[slot]) * 1000
        return out

    # -- node-level filters --------------------------------------------------------------

    @staticmethod
    def signature(pod: Mapping) -> str:
        """The pod fields the node-level filters read (nodeSelector, required node affinity,
        tolerations) as one canonical string: pods with equal signatures get equal verdicts."""
        spec = pod.get("spec") or {}
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        fields = (
            spec.get("nodeSelector") or {},
            node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
            spec.get("tolerations") or [],
        )
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)

    def _node(self, slot: SupportsIndex) -> Mapping[str, Any]:
        """The node in a slot the index or a mask names (such a slot is never empty)."""
        node = self.nodes[slot]
        assert node is not None, f"slot {slot} is empty"
        return node

    def _label_mask(self, key: str, value: str) -> np.ndarray:
        cached = self._label_masks.get((key, value))
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        mask = np.zeros(self._capacity, dtype=bool)
        for slot in self.index.values():
            labels = (self._node(slot).get("metadata") or {}).get("labels") or {}
            if labels.get(key) == value:
                mask[slot] = True
        if len(self._label_masks) > _MAX_SIGNATURES:
            self._label_masks.clear()
        self._label_masks[(key, value)] = (self.generation, mask)
        return mask

    def static_verdict(self, pod: Mapping) -> StaticVerdict:
        """NodeUnschedulable, TaintToleration, NodeAffinity (and readiness) over every node.

        A node is rejected by the first of these that fails, in the default plugin order
        (ganggate.sim.scheduler.plugins.node_rejects gives the same verdict one node at a time).
        """
        sig = self.signature(pod)
        cached = self._verdicts.get(sig)
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        verdict = self._compute_verdict(pod)
        if len(self._verdicts) > _MAX_SIGNATURES:
            self._verdicts.clear()
        self._verdicts[sig] = (self.generation, verdict)
        return verdict

    def _compute_verdict(self, pod: Mapping) -> StaticVerdict:
        counts: dict[str, int] = {}
        remaining = self.valid.copy()
        not_ready = remaining & ~self.ready
        counts[NOT_READY] = int(np.count_nonzero(not_ready))
        remaining &= ~not_ready
        tolerations = taints.pod_tolerations(pod)
        if not taints.tolerates_unschedulable(tolerations):
            cordoned = remaining & self.cordoned
            counts[UNSCHEDULABLE] = int(np.count_nonzero(cordoned))
            remaining &= ~cordoned
        for slot in np.flatnonzero(remaining & self.tainted):
            taint = taints.untolerated_taint(taints.node_taints(self._node(slot)), tolerations)
            if taint is not None:
                remaining[slot] = False
                reason = taints.taint_reason(taint)
                counts[reason] = counts.get(reason, 0) + 1
        affinity = RequiredNodeAffinity(pod)
        selected = remaining
        for key, value in affinity.node_selector.items():
            selected = selected & self._label_mask(key, value)
        if affinity.has_terms:
            selected = selected.copy()
            for slot in np.flatnonzero(selected):
                if not affinity.match_terms(self._node(slot)):
                    selected[slot] = False
        counts[AFFINITY] = int(np.count_nonzero(remaining & ~selected))
        return StaticVerdict(ok=selected, counts={k: v for k, v in counts.items() if v})
