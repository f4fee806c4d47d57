"""The FGD reference's scheduling loop, redone in Python on bench_gpushare's arrivals.

    .venv/bin/python bench/fgd_reference.py --lists gpushare100 --seeds 1 --ties name,random,best-fit

Why: to tell what in a gap to the FGD artifact's figures is the experiment (the list, the
arrivals, the cluster) and what is the policy. This loop is the artifact's, not ganggate's: every
pod (those asking no GPU too) is scored on every node that fits its CPU, memory and cards by
hkust-adsl/kubernetes-scheduler-simulator pkg/simulator/plugin/fgd_score.go
(calculateGpuShareFragExtendScore: int(100 * sigmoid((F before - F after) / 1000)); a sharing
pod's card is the first best-scored one), the only score plugin the artifact's runs enable
(scripts/generate_config_and_run.py, percentageOfNodesToScore 100). Among the best-scored
nodes, `--ties`:

- `name`: the smallest node name, as the artifact's vendored scheduler picks
  (vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go selectHost: "for
  reproducibility, choose the smallest lexicographical order", upstream's random pick commented out);
- `random`: uniformly at random (upstream kube-scheduler's selectHost);
- `best-fit`: ganggate's fgd: the tightest card (then the name); a pod asking no GPU the node
  with least free GPU, then least CPU left; whole GPUs the node with fewest idle cards left.

F is ganggate's measure (core/placement/gpushare_fgd.py `_Model`: frag.go
NodeGpuShareFragAmount, unit-tested against it), over the list's typical pods (commonest
shapes covering 95%, as the artifact's runs set them). Nothing of ganggate's planner runs here.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_gpushare import PAPER_ALLOC_AT_100, mean, paper_key, read_list
from bench.gpushare_trace import MILLI, TRACE, Run, TracePod, arrivals, read_nodes, workload_of
from ganggate.core.placement.gpushare_fgd import _Model

TIES = ("name", "random", "best-fit")
CHECKPOINTS = (80, 85, 90, 95, 100)


class _Node:
    """A node as the reference sees it: CPU and memory left, each card's thousandths left."""

    def __init__(self, raw: dict) -> None:
        capacity = raw["status"]["capacity"]
        self.name: str = raw["metadata"]["name"]
        self.cpu = int(capacity["cpu"].removesuffix("m"))
        self.memory = int(capacity["memory"].removesuffix("Mi"))
        self.cards = [MILLI] * int(capacity["nvidia.com/gpu"])


def _score(model: _Model, before: float, cards: Sequence[int], cpu_rank: int) -> int:
    """fgd_score.go's score of a node whose cards would be left as `cards`."""
    after = model.fragmentation(tuple(sorted(cards, reverse=True)), cpu_rank)
    return int(100.0 / (1.0 + math.exp((after - before) / 1000.0)))


def _evaluate(model: _Model, cards: list[int], ranks: tuple[int, int], share: int, whole: int,
              tie: str) -> tuple[int, object]:
    """(score, what to take) on a node with these cards and CPU ranks (before, after the pod):
    the card (share), the cards (whole) or nothing (no GPU)."""
    after_rank = ranks[1]
    before = model.fragmentation(tuple(sorted(cards, reverse=True)), ranks[0])
    if share:
        best: tuple[int, int] | None = None
        for card, left in enumerate(cards):
            if left >= share:
                score = _score(model, before, cards[:card] + [left - share] + cards[card + 1:], after_rank)
                if best is None or score > best[0] or (tie == "best-fit" and score == best[0] and left < cards[best[1]]):
                    best = (score, card)
        assert best is not None
        return best
    if whole:
        idle = [card for card, left in enumerate(cards) if left == MILLI][:whole]
        return _score(model, before, [0 if card in idle else left for card, left in enumerate(cards)], after_rank), idle
    return _score(model, before, cards, after_rank), None


def _tie_key(node: _Node, pod: TracePod, share: int, whole: int, take: object) -> tuple:
    """best-fit ties, least first."""
    if share:
        return (node.cards[take] - share, node.name)  # type: ignore[index]  # take: a card index when share
    if whole:
        return (sum(1 for left in node.cards if left == MILLI) - whole, node.name)
    return (sum(node.cards), node.cpu - pod.cpu_milli, node.name)


def place_all(raw_nodes: list[dict], order: Sequence[TracePod], workload: Sequence, tie: str = "name",
              seed: int = 1, chosen: list[str | None] | None = None) -> Run:
    """Place the arrivals one by one as the reference would; the allocation curve (and each
    pod's node, None when it fits nowhere, appended to `chosen` if given)."""
    started = time.perf_counter()
    model, rng = _Model(workload), random.Random(seed)
    nodes = [_Node(raw) for raw in raw_nodes]
    total = sum(len(node.cards) for node in nodes) * MILLI
    arrived = allocated = failed = 0
    first_failure: float | None = None
    points: list[tuple[float, float]] = []
    for pod in order:
        arrived += pod.gpu_demand
        share = pod.gpu_milli if pod.num_gpu == 1 and 0 < pod.gpu_milli < MILLI else 0
        whole = pod.num_gpu if pod.num_gpu >= 1 and pod.gpu_milli >= MILLI else 0
        best: list[tuple[tuple, _Node, object]] = []
        seen: dict[tuple, tuple[int, object]] = {}  # nodes alike score alike: once per state
        for node in nodes:
            if node.cpu < pod.cpu_milli or node.memory < pod.memory_mib:
                continue
            if (share and max(node.cards, default=0) < share) or (whole and node.cards.count(MILLI) < whole):
                continue
            ranks = (model.cpu_rank(node.cpu), model.cpu_rank(node.cpu - pod.cpu_milli))
            state = (tuple(node.cards), ranks)
            found = seen.get(state)
            if found is None:
                found = seen[state] = _evaluate(model, node.cards, ranks, share, whole, tie)
            score, take = found
            key = (-score,) + (_tie_key(node, pod, share, whole, take) if tie == "best-fit" else (node.name,))
            best.append((key, node, take))
        if chosen is not None:
            chosen.append(None)
        if not best:
            failed += 1
            first_failure = first_failure if first_failure is not None else 100.0 * arrived / total
        else:
            top = min(entry[0][0] for entry in best)
            _, node, take = (rng.choice([e for e in best if e[0][0] == top]) if tie == "random" else min(best, key=lambda e: e[0]))
            node.cpu -= pod.cpu_milli
            node.memory -= pod.memory_mib
            if share:
                node.cards[take] -= share  # type: ignore[index]  # take: a card index when share,
            for card in (take if whole else ()):  # type: ignore[union-attr]  # the cards taken when whole
                node.cards[card] = 0
            allocated += pod.gpu_demand
            if chosen is not None:
                chosen[-1] = node.name
        points.append((100.0 * arrived / total, 100.0 * allocated / total))
    return Run(points, first_failure, failed, time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help=f"the trace directory (default {TRACE})")
    parser.add_argument("--lists", default="gpushare100", help="pod lists, as bench_gpushare's --lists (default gpushare100)")
    parser.add_argument("--ties", default=",".join(TIES), help=f"tie rules, of {', '.join(TIES)} (default: all)")
    parser.add_argument("--seeds", type=int, default=1, help="arrival orders per list (default 1: seed 1)")
    args = parser.parse_args(argv)
    ties = [t for t in args.ties.split(",") if t]
    if [t for t in ties if t not in TIES] or args.seeds < 1:
        parser.error(f"--ties takes {', '.join(TIES)}; --seeds at least 1")
    nodes = read_nodes(args.trace / "openb_node_list_gpu_node.csv")
    total = sum(int(n["status"]["capacity"]["nvidia.com/gpu"]) for n in nodes) * MILLI
    print("| list | ties | " + " | ".join(f"alloc @{c}%" for c in CHECKPOINTS)
          + " | unallocated @100% | s/run | FGD artifact alloc @100% |")
    print("|---|---|" + "---|" * (len(CHECKPOINTS) + 3))
    for name in [x for x in args.lists.split(",") if x]:
        pods = read_list(args.trace, name)
        workload = workload_of(pods)
        for tie in ties:
            runs = [place_all(nodes, arrivals(pods, total, seed), workload, tie, seed) for seed in range(1, args.seeds + 1)]
            cells = [f"{mean([r.allocated_at(c) for r in runs]):.1f}" for c in CHECKPOINTS]
            paper = PAPER_ALLOC_AT_100.get((paper_key(name), "fgd"))
            print(f"| {Path(name).name} | {tie} | " + " | ".join(cells)
                  + f" | {100 - mean([r.allocated_at(100) for r in runs]):.1f} | {mean([r.seconds for r in runs]):.0f}"
                  + f" | {'n/a' if paper is None else f'{paper:.1f}'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
