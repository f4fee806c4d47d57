"""FGD: choose the node and card that least increase the cluster's expected GPU fragmentation.

After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent" (USENIX ATC 2023) and its reference simulator, hkust-adsl/kubernetes-scheduler-
simulator (pkg/simulator/plugin/fgd_score.go, pkg/utils/frag.go). A node's fragmentation for a
target workload (the observed mix of pod shapes, each with its popularity) is the expected amount
of its free GPU that a pod drawn from the workload could not use:

    F(node) = sum over shapes m of  p_m * F(node, m)
    F(node, m) = all the node's free GPU          if m cannot run there (too few cards with room, too little CPU)
               = the free GPU of the cards with less free than m asks per card   otherwise

(frag.go NodeGpuShareFragAmount with GetNodePodFrag / GetGpuFragMilliByNodeResAndPodRes: Q3
"satisfied" counts only the too-small cards; every other quadrant counts all free GPU.) A pod goes
where F(after) - F(before) is least (fgd_score.go calculateGpuShareFragExtendScore: for a sharing
pod each card that fits is tried; a whole-GPU pod takes idle cards). Free GPU is counted in
thousandths of a card, so nodes with cards of different memory compare in GPUs, as the paper
does. Shapes that ask no GPU count all the node's free GPU as fragment (frag.go GetNodePodFrag:
XLSatisfied / XRLackCPU are not Q3), with the weight the reference gives them in the FGD
artifact's runs (scripts/generate_config_and_run.py: isInvolvedCpuPods true, popularity
threshold 95%): they add the same to every candidate's increase, but they scale the GPU shapes'
share and so where the score's steps fall. Like the reference, memory is not looked at.

The increase is compared as the reference scores it: int(100 * sigmoid(-increase / 1000))
(fgd_score.go calculateGpuShareFragExtendScore, sigmoid in plugin_utils.go), so increases within
one of its 100 score steps (about 40 thousandths of a GPU near zero) tie. The reference's
scheduler takes the tied node with the smallest name (the FGD artifact's vendored kube-scheduler,
generic_scheduler.go selectHost; upstream picks at random) and the node's first tied card;
ganggate gives every tie to best-fit instead: the tightest card (least left after the pod; for
whole-GPU pods the node with the fewest idle cards left; for pods asking no GPU the node with
least free GPU, then least CPU left), then the node name, then the card. So FGD decides wherever
its own measure sees a difference, and where it does not, the pod packs as tightly as best-fit
would, keeping emptier cards whole for the pods that come later (bench/fgd_reference.py: the
reference's loop with either tie rule allocates the same on the full-sharing list, with random
ties 5 points less). FGD(scored=False) compares the exact increases instead (ties only when they
are equal), for comparison in the benchmark.

Pods asking no GPU are scored too, as the reference scores every pod (`whole_node` with 0
cards): on a node with cards their CPU can take the node below what the typical GPU pods need,
stranding its free GPU. The planner asks this only when no node without cards holds the pod
(core/placement/capacity.py best_node).

Speed: F depends on a node only through its cards' free thousandths (as a sorted tuple) and on
which workload CPU thresholds its free CPU reaches, so it is cached on that key, and candidate
nodes in the same state are evaluated once. Pure: the cache is memoisation, no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ganggate.core.fit.gpushare import NodeCards, PodShape, Workload

MILLI = 1000  # a whole card, in thousandths


class _Shape(NamedTuple):
    per_card: int  # thousandths of a card needed on each card it uses
    cards: int  # how many such cards
    cpu_rank: int  # the node's CPU rank must reach this (see _Model.cpu_rank)
    weight: float  # popularity, normalised to sum 1


class _Model:
    """A workload prepared for fast evaluation, with its cache of node fragmentation by state."""

    def __init__(self, workload: Workload) -> None:
        shapes = [PodShape(*shape) for shape in workload]
        gpu_shapes = [s for s in shapes if (s.share_milli > 0 or s.whole_gpus > 0) and s.weight > 0]
        total = sum(s.weight for s in shapes if s.weight > 0) or 1.0
        # the pods asking no GPU: all free GPU is fragment to them
        self.no_gpu_weight = sum(s.weight for s in shapes if s.weight > 0 and s not in gpu_shapes) / total
        self.cpu_thresholds = sorted({max(0, s.cpu_milli) for s in gpu_shapes})
        self.shapes = [
            _Shape(
                s.share_milli if s.whole_gpus <= 0 else MILLI,
                max(1, s.whole_gpus),
                bisect.bisect_left(self.cpu_thresholds, max(0, s.cpu_milli)) + 1,
                s.weight / total,
            )
            for s in gpu_shapes
        ]
        self.cache: dict[tuple[tuple[int, ...], int], float] = {}

    def cpu_rank(self, free_cpu_milli: int | None) -> int:
        """How many of the workload's CPU thresholds the free CPU reaches (all when unknown)."""
        if free_cpu_milli is None:
            return len(self.cpu_thresholds)
        return bisect.bisect_right(self.cpu_thresholds, free_cpu_milli)

    def fragmentation(self, free: tuple[int, ...], cpu_rank: int) -> float:
        """F for a node whose usable cards have `free` thousandths left (sorted, largest first)."""
        key = (free, cpu_rank)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        total = sum(free)
        value = self.no_gpu_weight * total
        if total:
            for shape in self.shapes:
                roomy = 0
                small = 0
                for left in free:
                    if left >= shape.per_card:
                        roomy += 1
                    else:
                        small += left
                if roomy >= shape.cards and cpu_rank >= shape.cpu_rank:
                    value += shape.weight * small
                else:
                    value += shape.weight * total
        self.cache[key] = value
        return value


def _thousandths(cards: NodeCards, card: int, used: int, taken: set[int]) -> int:
    if card in taken or cards.capacity[card] <= 0:
        return 0
    return max(0, cards.capacity[card] - used) * MILLI // cards.capacity[card]


def _free_state(cards: NodeCards, taken: set[int], extra: tuple[int, int] | None = None) -> tuple[int, ...]:
    """The usable cards' free thousandths, largest first; `extra` = (card, amount) taken on top."""
    out = []
    for card in range(len(cards.capacity)):
        if card in taken:
            continue
        used = cards.used[card] + (extra[1] if extra is not None and extra[0] == card else 0)
        out.append(_thousandths(cards, card, used, taken))
    out.sort(reverse=True)
    return tuple(out)


def _ranks(model: _Model, cards: NodeCards, cpu_milli: int) -> tuple[int, int]:
    """The node's CPU rank before and after a pod of `cpu_milli`."""
    free = cards.free_cpu_milli
    return model.cpu_rank(free), model.cpu_rank(None if free is None else free - cpu_milli)


def reference_score(increase: float) -> int:
    """The reference's score of a fragmentation increase (thousandths of a GPU): 0..100, higher is
    better (fgd_score.go: int64(sigmoid((before - after) / 1000) * MaxNodeScore))."""
    return int(100.0 / (1.0 + math.exp(increase / 1000.0)))


class FGD:
    """The FGD card policy (CardPolicy signature), with its per-workload cache of node fragmentation.
    `scored`: compare increases by the reference's 0..100 score (ties to best-fit), else exactly."""

    def __init__(self, scored: bool = True) -> None:
        self._models: dict[tuple[Any, ...], _Model] = {}
        self.scored = scored

    def _rank(self, increase: float) -> float:
        """What is compared, least first: minus the reference's score, or the exact increase."""
        return -reference_score(increase) if self.scored else increase

    def model(self, workload: Workload) -> _Model:
        key = tuple(tuple(shape) for shape in workload)
        found = self._models.get(key)
        if found is None:
            if len(self._models) > 8:  # a controller sees a slowly changing mix: keep the recent ones
                self._models.pop(next(iter(self._models)))
            found = self._models[key] = _Model(workload)
        return found

    def node_fragmentation(self, cards: NodeCards, workload: Workload) -> float:
        """F(node) for the workload, in thousandths of a card."""
        model = self.model(workload)
        return model.fragmentation(_free_state(cards, cards.whole_cards()), model.cpu_rank(cards.free_cpu_milli))

    def __call__(self, amount: int, candidates: Sequence[NodeCards], workload: Workload = (),
                 cpu_milli: int = 0) -> tuple[str, int] | None:
        """The (node, card) for a pod asking `amount` of one card's memory (and `cpu_milli`) whose
        placement least increases F; None when no card holds it."""
        model = self.model(workload)
        best: tuple[Any, ...] | None = None
        for cards, (rank_before, rank_after) in _distinct(model, candidates, cpu_milli):
            taken = cards.whole_cards()
            before = model.fragmentation(_free_state(cards, taken), rank_before)
            for card in cards.fits(amount):
                after = model.fragmentation(_free_state(cards, taken, (card, amount)), rank_after)
                key = (self._rank(after - before), cards.capacity[card] - cards.used[card] - amount, cards.node, card)
                if best is None or key < best:
                    best = key
        return None if best is None else (best[2], best[3])

    def whole_node(self, gpus: int, candidates: Sequence[NodeCards], workload: Workload = (),
                   cpu_milli: int = 0) -> str | None:
        """The node for a pod asking `gpus` whole cards (0: a pod asking no GPU, _no_gpu_node) that
        least increases F (FGD places these too); None when no candidate has that many idle cards."""
        model = self.model(workload)
        if gpus <= 0:
            return self._no_gpu_node(model, candidates, cpu_milli)
        best: tuple[Any, ...] | None = None
        for cards, (rank_before, rank_after) in _distinct(model, candidates, cpu_milli):
            if cards.idle() < gpus:
                continue
            before = model.fragmentation(_free_state(cards, cards.whole_cards()), rank_before)
            after_cards = NodeCards(cards.node, cards.capacity, cards.used, cards.whole + gpus)
            after_free = _free_state(after_cards, after_cards.whole_cards())
            key = (self._rank(model.fragmentation(after_free, rank_after) - before), cards.idle() - gpus, cards.node)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def _no_gpu_node(self, model: _Model, candidates: Sequence[NodeCards], cpu_milli: int) -> str | None:
        """The node with cards for a pod asking no GPU whose CPU least increases F (fgd_score.go
        scores every pod, those without GPU too: a node whose free CPU it takes below what the
        typical GPU pods need leaves that node's free GPU stranded); among equal scores, the node
        with least free GPU, then least CPU left (best fit), then the name."""
        best: tuple[Any, ...] | None = None
        for cards, (rank_before, rank_after) in _distinct(model, candidates, cpu_milli):
            free = _free_state(cards, cards.whole_cards())
            increase = model.fragmentation(free, rank_after) - model.fragmentation(free, rank_before)
            key = (self._rank(increase), sum(free), (cards.free_cpu_milli or 0) - cpu_milli, cards.node)
            if best is None or key < best:
                best = key
        return None if best is None else best[3]


def _distinct(model: _Model, candidates: Iterable[NodeCards], cpu_milli: int) -> list[tuple[NodeCards, tuple[int, int]]]:
    """One candidate per state (the first by name), with its CPU ranks: nodes alike give the same
    result, so each state is evaluated once, and the name breaks the tie."""
    first: dict[tuple[Any, ...], tuple[NodeCards, tuple[int, int]]] = {}
    for cards in candidates:
        ranks = _ranks(model, cards, cpu_milli)
        state = (tuple(cards.capacity), tuple(cards.used), cards.whole, ranks)
        kept = first.get(state)
        if kept is None or cards.node < kept[0].node:
            first[state] = (cards, ranks)
    return list(first.values())


def target_workload(shapes: Iterable[tuple[int, int, int, int]], coverage: float = 1.0) -> list[PodShape]:
    """The target workload from observed pods' (share_milli, whole_gpus, cpu_milli, memory_bytes):
    one PodShape per distinct shape weighted by its count, most popular first, cut once `coverage`
    of the pods is covered (the reference's typical pods: frag.go GetTypicalPods)."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage {coverage} must be in (0, 1]")
    counts: dict[tuple[int, int, int, int], int] = {}
    for shape in shapes:
        share_milli, whole_gpus, cpu_milli, memory_bytes = shape
        key = (int(share_milli), int(whole_gpus), int(cpu_milli), int(memory_bytes))
        counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    out: list[PodShape] = []
    covered = 0
    for shape, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if total and covered >= coverage * total:
            break
        out.append(PodShape(*shape, weight=float(count)))
        covered += count
    return out


#: The policy object ganggate's resolver registers as "fgd".
fgd_policy = FGD()
