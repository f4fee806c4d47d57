"""The scheduler's nominator: the pending pods nominated to a node (status.nominatedNodeName, or
a node preemption chose), and the room they hold there in a scheduling cycle.

kube-scheduler keeps nominated pods per node (pkg/scheduler/backend/queue/nominator.go,
nominatedPods map[string][]PodInfo) and, filtering a node, adds the nominated pods of that node
with at least the pod's priority (pkg/scheduler/framework/runtime/framework.go,
addGENominatedPods): the work grows with the nominated pods of the nodes a pod may go to, not
with every nominated pod of the cluster. kubesim filters all nodes at once (cache arrays), so it
adds the nominated pods' requests to the cache before a cycle and takes them out after; this
nominator keeps their sums per priority and node, so a cycle applies one sum per node with
nominations instead of one entry per nominated pod (a 1,000-pod gang nominated at once made
1,000 cycles of 1,000 entries each).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ganggate.sim.scheduler.cache import ClusterCache, PodEntry


@dataclass
class _Sum:
    """What the nominated pods of one priority hold on one node."""

    request: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    nonzero_cpu: int = 0
    nonzero_memory: int = 0

    def add(self, entry: PodEntry, sign: int) -> None:
        for resource, amount in entry.request.items():
            self.request[resource] = self.request.get(resource, 0) + sign * amount
        self.pods += sign
        self.nonzero_cpu += sign * entry.nonzero_cpu
        self.nonzero_memory += sign * entry.nonzero_memory


class Nominator:
    """Pending pod key -> its nomination (a PodEntry on the nominated node), with the sums."""

    def __init__(self) -> None:
        self._pods: dict[str, PodEntry] = {}
        self._sums: dict[int, dict[str, _Sum]] = {}  # priority -> node -> sum

    def __bool__(self) -> bool:
        return bool(self._pods)

    def get(self, key: str) -> PodEntry | None:
        return self._pods.get(key)

    def items(self) -> Iterator[tuple[str, PodEntry]]:
        return iter(list(self._pods.items()))

    def __setitem__(self, key: str, entry: PodEntry) -> None:
        self.pop(key)
        self._pods[key] = entry
        self._sums.setdefault(entry.priority, {}).setdefault(entry.node, _Sum()).add(entry, 1)

    def pop(self, key: str, default: PodEntry | None = None) -> PodEntry | None:
        entry = self._pods.pop(key, None)
        if entry is None:
            return default
        by_node = self._sums[entry.priority]
        held = by_node[entry.node]
        held.add(entry, -1)
        if not held.pods:
            del by_node[entry.node]
            if not by_node:
                del self._sums[entry.priority]
        return entry

    def hold(self, cache: ClusterCache, key: str, priority: int) -> list[tuple]:
        """Count on the cache the nominated pods of at least this priority on their nodes, the pod
        `key` itself left out (addNominatedPods); what was counted, for `release`."""
        index, applied = cache.index, []
        for held_priority, by_node in self._sums.items():
            if held_priority < priority:
                continue
            for node, held in by_node.items():
                slot = index.get(node)
                if slot is not None:
                    applied.append((dict(held.request), held.pods, held.nonzero_cpu, held.nonzero_memory, slot, 1))
        own = self._pods.get(key)
        if own is not None and own.priority >= priority and (slot := index.get(own.node)) is not None:
            applied.append((own.request, 1, own.nonzero_cpu, own.nonzero_memory, slot, -1))
        for request, pods, cpu, memory, slot, sign in applied:
            cache.apply_sum(request, pods, cpu, memory, slot, sign)
        return applied

    @staticmethod
    def release(cache: ClusterCache, applied: list[tuple]) -> None:
        """Take back what `hold` counted (the nominations may have changed since)."""
        for request, pods, cpu, memory, slot, sign in applied:
            cache.apply_sum(request, pods, cpu, memory, slot, -sign)
