"""One scheduling cycle over the cache: filter, score, select a host (no I/O).

Follows pkg/scheduler/schedule_one.go schedulePod: findNodesThatFitPod (node-level filters
then NodeResourcesFit, stopping after numFeasibleNodesToFind feasible nodes, starting where
the previous cycle stopped: nextStartNodeIndex), prioritizeNodes (LeastAllocated +
BalancedAllocation, weight 1 each, neither normalizes) and selectHost (highest total score,
ties broken uniformly at random; the real one samples a reservoir, here a seeded
random.Random so runs are reproducible). The per-node semantics are those of
ganggate.sim.scheduler.plugins, evaluated here as numpy vector operations.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ganggate.sim.helpers.podrequests import CPU, MEMORY, PODS, Resources
from ganggate.sim.scheduler import hints
from ganggate.sim.scheduler import plugins as sched_filters
from ganggate.sim.scheduler.cache import ClusterCache, PodEntry

if TYPE_CHECKING:
    from ganggate.sim.scheduler.dynamicresources import DynamicResources


@dataclass(frozen=True)
class Decision:
    """The outcome of one cycle: a node, or the FitError message when none fits."""

    node: str | None
    message: str = ""
    feasible: int = 0
    rejected_by: frozenset[str] = frozenset()  # Diagnosis.UnschedulablePlugins when node is None


class Algorithm:
    """Chooses a node for one pod at a time and assumes the pod onto it."""

    def __init__(self, cache: ClusterCache, *, seed: int = 0, percentage_of_nodes_to_score: int = 0) -> None:
        self.cache = cache
        self.rng = random.Random(seed)
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.next_start_index = 0
        self.dra: DynamicResources | None = None  # the DynamicResources plugin (ganggate/sim/scheduler/dynamicresources.py), when on

    def feasible_mask(self, pod: Mapping, request: Mapping[str, int]) -> tuple[np.ndarray, dict[str, int]]:
        """Which slots pass every filter, and (for the fit error) the reasons of the others."""
        cache = self.cache
        verdict = cache.static_verdict(pod)
        ok = verdict.ok
        fits = ok & (cache.pod_count + 1 <= cache.pod_limit)
        checks: list[tuple[str, np.ndarray | None, int]] = []
        mapped: dict[str, str] = self.dra.mapped_extended() if self.dra is not None else {}
        for name, amount in request.items():
            if name == PODS or amount <= 0:
                continue
            row = cache.resources.get(name)
            free = None if row is None else cache.allocatable[row] - cache.requested[row]
            checks.append((name, free, amount))
            if name in mapped:  # NodeResourcesFit leaves a DRA-served extended resource to DRA where the node has none
                fits = fits & ((free >= amount) | (cache.allocatable[row] == 0)) if free is not None else fits
                continue
            fits = fits & (free >= amount) if free is not None else np.zeros_like(fits)
        dra_counts: dict[str, int] = {}
        if self.dra is not None and self.dra.uses_dra(pod):
            fits, dra_counts = self.dra.filter(pod, fits, cache.names, lambda slot: self.node_has(mapped, slot))
        if fits.any():
            return fits, {}
        counts = dict(verdict.counts)
        too_many = int(np.count_nonzero(ok & (cache.pod_count + 1 > cache.pod_limit)))
        if too_many:
            counts["Too many pods"] = too_many
        counts.update(dra_counts)
        for name, free, amount in checks:
            short = int(np.count_nonzero(ok)) if free is None else int(np.count_nonzero(ok & (free < amount)))
            if short:
                counts[f"Insufficient {name}"] = short
        return fits, counts

    def node_has(self, resources: Mapping[str, str], slot: int) -> dict[str, bool]:
        """Whether the node in `slot` has each resource in its allocatable (device plugin or DRA)."""
        rows = {name: self.cache.resources.get(name) for name in resources}
        return {name: row is not None and bool(self.cache.allocatable[row, slot] > 0) for name, row in rows.items()}

    def _candidates(self, fits: np.ndarray) -> np.ndarray:
        """The first numFeasibleNodesToFind feasible slots from nextStartNodeIndex on."""
        feasible = np.flatnonzero(fits)
        limit = sched_filters.num_feasible_nodes_to_find(self.cache.num_nodes, self.percentage_of_nodes_to_score)
        span = max(self.cache.slots_in_use, 1)
        start = self.next_start_index % span
        if len(feasible) <= limit:
            # Every node was examined: the start index moves by all of them (a full turn).
            return feasible
        cut = int(np.searchsorted(feasible, start))
        rotated = np.concatenate((feasible[cut:], feasible[:cut]))
        chosen = rotated[:limit]
        processed = (int(chosen[-1]) - start) % span + 1
        self.next_start_index = (start + processed) % span
        return chosen

    def scores(self, candidates: np.ndarray, request: Mapping[str, int], nonzero: tuple[int, int]) -> np.ndarray:
        """LeastAllocated + BalancedAllocation for each candidate slot."""
        cache = self.cache
        cpu_row, memory_row = cache.resources[CPU], cache.resources[MEMORY]
        cap_cpu = cache.allocatable[cpu_row, candidates]
        cap_memory = cache.allocatable[memory_row, candidates]
        has_cpu, has_memory = cap_cpu > 0, cap_memory > 0
        safe_cpu, safe_memory = np.maximum(cap_cpu, 1), np.maximum(cap_memory, 1)

        # noderesources/least_allocated.go, on the non-zero requested amounts.
        nz_cpu = cache.nonzero_cpu[candidates] + nonzero[0]
        nz_memory = cache.nonzero_memory[candidates] + nonzero[1]
        least_cpu = np.where(has_cpu & (nz_cpu <= cap_cpu), (cap_cpu - nz_cpu) * 100 // safe_cpu, 0)
        least_memory = np.where(has_memory & (nz_memory <= cap_memory), (cap_memory - nz_memory) * 100 // safe_memory, 0)
        weights = has_cpu.astype(np.int64) + has_memory.astype(np.int64)
        least = np.where(weights > 0, (least_cpu * has_cpu + least_memory * has_memory) // np.maximum(weights, 1), 0)

        if sched_filters.is_best_effort(request):
            return least
        # noderesources/balanced_allocation.go, on the requested amounts.
        fraction_cpu = np.minimum((cache.requested[cpu_row, candidates] + request.get(CPU, 0)) / safe_cpu, 1.0)
        fraction_memory = np.minimum((cache.requested[memory_row, candidates] + request.get(MEMORY, 0)) / safe_memory, 1.0)
        std = np.where(has_cpu & has_memory, np.abs((fraction_cpu - fraction_memory) / 2), 0.0)
        balanced = ((1 - std) * sched_filters.MAX_NODE_SCORE).astype(np.int64)
        return least + balanced

    def schedule(self, pod: Mapping, request: Mapping[str, int], nonzero: tuple[int, int]) -> Decision:
        """Pick a node for the pod (without assuming it), or explain why none fits."""
        cache = self.cache
        if cache.num_nodes == 0:
            return Decision(None, sched_filters.NO_NODES_AVAILABLE)
        fits, counts = self.feasible_mask(pod, request)
        candidates = self._candidates(fits)
        if len(candidates) == 0:
            return Decision(None, sched_filters.fit_error_from_counts(cache.num_nodes, counts),
                            rejected_by=frozenset(hints.rejecting_plugin(reason) for reason in counts))
        if len(candidates) == 1:
            return Decision(cache.names[int(candidates[0])], feasible=1)
        total = self.scores(candidates, request, nonzero)
        best = np.flatnonzero(total == total.max())
        pick = int(best[0]) if len(best) == 1 else int(best[self.rng.randrange(len(best))])
        return Decision(cache.names[int(candidates[pick])], feasible=len(candidates))

    def assume(self, key: str, node: str, request: Resources, nonzero: tuple[int, int], priority: int = 0) -> None:
        """Count the pod on the node now, before the bind is confirmed (cache.AssumePod)."""
        self.cache.add_pod(key, PodEntry(node, dict(request), nonzero[0], nonzero[1], assumed=True, priority=priority))
