"""Topology placement against the optimum: on randomly fragmented clusters of zones, blocks
and racks, the racks and blocks a gang spans as ganggate plans it (levels configured, no
annotation), against the fewest an exact search finds (small clusters) or a lower bound (large
ones), and against topology-blind best fit (the same planner without levels).

    .venv/bin/python bench/bench_topology_optimum.py                 # 64 to 4,096 nodes, 40 gangs each
    .venv/bin/python bench/bench_topology_optimum.py --cases 10 --sizes 64,256

Each case: nodes of 8 GPUs, each with a random share used by running pods (fragmentation), and
one gang of mixed members: often a launcher asking no GPU (cpu: 1), workers of 8, 4 or 2 GPUs,
sometimes of two sizes. The objective is ganggate's (docs/topology.md): the fewest zones, then
the fewest blocks, then the fewest racks. The exact search tries sets of zones, then of blocks
inside them, then of racks inside those, smallest first, each set checked by an exact packing
of the gang's GPU pods into its nodes' free GPUs (backtracking); the launcher fits on any node
(CPU is plentiful here). On large clusters the bound is the fewest racks whose free GPU in
chunks of the gang's smallest request reach its demand (no set of fewer racks can hold it).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

ZONE, BLOCK, RACK, HOST = "topology.kubernetes.io/zone", "ganggate.io/block", "ganggate.io/rack", "kubernetes.io/hostname"
LEVELS = (ZONE, BLOCK, RACK, HOST)
NOW = 1704067200.0
GPUS = 8
# nodes -> (zones, blocks per zone, racks per block, nodes per rack)
SHAPES = {64: (1, 4, 2, 8), 256: (2, 4, 4, 8), 1024: (2, 8, 8, 8), 4096: (4, 8, 16, 8)}
EXACT_UP_TO = 256  # nodes: the exact search runs on clusters this small


class Cluster:
    """A fragmented cluster: each node's free GPUs and its (zone, block, rack)."""

    def __init__(self, nodes: int, rng: random.Random) -> None:
        zones, blocks, racks, per_rack = SHAPES[nodes]
        self.place: dict[str, tuple[str, str, str]] = {}
        self.free: dict[str, int] = {}
        used_choices = [0, 0, 2, 4, 4, 6, 7, 8, 8, 8]
        for z in range(zones):
            for b in range(blocks):
                for r in range(racks):
                    rack_load = rng.random()  # some racks busier than others
                    for _ in range(per_rack):
                        name = f"n{len(self.free)}"
                        used = rng.choice(used_choices) if rng.random() < 0.5 + 0.5 * rack_load else 0
                        self.free[name] = GPUS - used
                        self.place[name] = (f"z{z}", f"z{z}b{b}", f"z{z}b{b}r{r}")

    def objects(self) -> tuple[list[dict], list[dict]]:
        """Its nodes, and the running pods that use the GPUs not free."""
        items, running = [], []
        for name, (zone, block, rack) in self.place.items():
            labels = {HOST: name, ZONE: zone, BLOCK: block.split("b")[1], RACK: rack.split("r")[1]}
            items.append(make_node(name, gpus=GPUS, labels=labels))
            if self.free[name] < GPUS:
                running.append(make_pod(f"busy-{name}", namespace="other", gpus=GPUS - self.free[name],
                                        node_name=name, phase="Running"))
        return items, running

    def spans(self, nodes: Sequence[str]) -> tuple[int, int, int]:
        """(zones, blocks, racks) these nodes span."""
        zones, blocks, racks = (len({self.place[n][i] for n in nodes}) for i in range(3))
        return zones, blocks, racks


def random_gang(rng: random.Random, rack_free: float) -> list[int]:
    """GPU requests of the gang's members (0: a launcher without GPU): from half a rack's free
    GPUs to four racks' (so that one rack, or one block, often does not do), at most 16 workers."""
    size = rng.choice([8, 8, 4, 4, 2])
    workers = max(2, min(16, round(rng.uniform(0.5, 4) * rack_free / size)))
    gang = [size] * workers
    if rng.random() < 0.3 and size > 2:  # members of two sizes
        gang[: workers // 2] = [size // 2] * (workers // 2)
    if rng.random() < 0.6:
        gang.append(0)
    return gang


def plan(cluster: Cluster, gang: list[int], levels: Sequence[str]) -> list[str] | None:
    """The nodes ganggate's planner puts the gang's GPU pods on (None: it does not fit)."""
    pods = [make_pod(f"g-{i}", namespace="ml", gang="g", pod_num=len(gang), gpus=g) for i, g in enumerate(gang)]
    state = ClusterState(topology_levels=tuple(levels))
    nodes, running = cluster.objects()
    state.reset(nodes, running + pods)
    decisions, _ = decide(state, NOW)
    if not decisions:
        return None
    gpu_pods = {f"ml/g-{i}" for i, g in enumerate(gang) if g > 0}
    return [node for key, node in decisions[0].placement.items() if key in gpu_pods and node]


def packs(sizes: Sequence[int], free: Sequence[int]) -> bool:
    """Whether these GPU requests fit into bins of these free GPUs (exact: backtracking,
    largest request first, bins of equal free GPU tried once)."""
    sizes = sorted((s for s in sizes if s > 0), reverse=True)
    bins = sorted((f for f in free if f > 0), reverse=True)
    if sum(sizes) > sum(bins):
        return False

    def fit(i: int) -> bool:
        if i == len(sizes):
            return True
        seen = set()
        for j, room in enumerate(bins):
            if room >= sizes[i] and room not in seen:
                seen.add(room)
                bins[j] -= sizes[i]
                if fit(i + 1):
                    return True
                bins[j] += sizes[i]
        return False

    return fit(0)


def exact(cluster: Cluster, gang: list[int]) -> tuple[int, int, int] | None:
    """The fewest (zones, blocks, racks), lexicographically, that hold the gang."""
    nodes_of: dict[tuple[int, str], list[str]] = {}
    for name, where in cluster.place.items():
        for i in range(3):
            nodes_of.setdefault((i, where[i]), []).append(name)
    children: dict[tuple[int, str], list[str]] = {}
    for where in {w for w in cluster.place.values()}:
        for i in range(2):
            kids = children.setdefault((i, where[i]), [])
            if where[i + 1] not in kids:
                kids.append(where[i + 1])
    demand = sum(gang)
    cache: dict[frozenset, bool] = {}

    def holds(level: int, domains: Sequence[str]) -> bool:
        key = frozenset((level, d) for d in domains)
        if key not in cache:
            free = [cluster.free[n] for d in domains for n in nodes_of[(level, d)]]
            cache[key] = sum(free) >= demand and packs(gang, free)
        return cache[key]

    def best(level: int, scope: list[str]) -> tuple[int, ...] | None:
        """Lexicographic fewest from `level` down, choosing among `scope`."""
        for k in range(1, len(scope) + 1):
            found = None
            for chosen in combinations(scope, k):
                if not holds(level, chosen):
                    continue
                if level == 2:
                    return (k,)
                below = best(level + 1, [c for d in chosen for c in children[(level, d)]])
                if below is not None and (found is None or below < found):
                    found = below
            if found is not None:
                return (k, *found)
        return None

    zones = sorted({w[0] for w in cluster.place.values()})
    result = best(0, zones)
    return None if result is None else result  # type: ignore[return-value]  # one count per level: three


def rack_bound(cluster: Cluster, gang: list[int]) -> int | None:
    """A lower bound of the racks any placement spans: the fewest racks whose free GPU, in
    chunks of the smallest request, reaches the gang's GPUs."""
    sizes = [g for g in gang if g > 0]
    chunk = min(sizes)
    room: dict[str, int] = {}
    for name, where in cluster.place.items():
        room[where[2]] = room.get(where[2], 0) + cluster.free[name] // chunk * chunk
    total = 0
    for k, r in enumerate(sorted(room.values(), reverse=True), start=1):
        total += r
        if total >= sum(sizes):
            return k
    return None


def run_size(nodes: int, cases: int, seed: int) -> dict:
    rng = random.Random(seed * 1000 + nodes)
    rows = {"cases": 0, "ganggate": [], "bestfit": [], "optimum": [], "bound": [], "equal": 0, "worse": 0,
            "seconds": 0.0}
    while rows["cases"] < cases:
        cluster = Cluster(nodes, rng)
        gang = random_gang(rng, sum(cluster.free.values()) / len({w[2] for w in cluster.place.values()}))
        started = time.process_time()
        ours = plan(cluster, gang, LEVELS)
        rows["seconds"] += time.process_time() - started
        blind = plan(cluster, gang, ())
        if ours is None or blind is None:
            continue  # a gang that fits nowhere says nothing about placement
        rows["cases"] += 1
        rows["ganggate"].append(cluster.spans(ours))
        rows["bestfit"].append(cluster.spans(blind))
        rows["bound"].append(rack_bound(cluster, gang))
        if nodes <= EXACT_UP_TO:
            best = exact(cluster, gang)
            rows["optimum"].append(best)
            if best == cluster.spans(ours):
                rows["equal"] += 1
            elif best is not None and best < cluster.spans(ours):
                rows["worse"] += 1
    return rows


def mean_of(spans: list, i: int) -> float:
    return statistics.fmean(s[i] for s in spans)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(sizes="64", cases=3))
    parser.add_argument("--sizes", default="64,256,1024,4096", help="cluster sizes in nodes (64, 256, 1024, 4096)")
    parser.add_argument("--cases", type=int, default=40, help="gangs per size (default 40)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if any(s not in SHAPES for s in sizes) or args.cases < 1:
        parser.error(f"--sizes takes {', '.join(map(str, SHAPES))}; --cases at least 1")
    print("| nodes | gangs | racks: ganggate | optimum / bound | best fit | blocks: ganggate | optimum | best fit "
          "| ganggate = optimum | ms per plan |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for nodes in sizes:
        rows = run_size(nodes, args.cases, args.seed)
        ours, blind = rows["ganggate"], rows["bestfit"]
        if rows["optimum"]:
            opt = [o for o in rows["optimum"] if o is not None]
            optimum = f"{mean_of(opt, 2):.2f} (exact)"
            blocks_opt = f"{mean_of(opt, 1):.2f}"
            equal = f"{rows['equal']}/{rows['cases']}" + (f" ({rows['worse']} worse)" if rows["worse"] else "")
        else:
            optimum = f">= {statistics.fmean(b for b in rows['bound'] if b):.2f} (bound)"
            blocks_opt, equal = "-", "-"
        print(f"| {nodes} | {rows['cases']} | {mean_of(ours, 2):.2f} | {optimum} | {mean_of(blind, 2):.2f} | "
              f"{mean_of(ours, 1):.2f} | {blocks_opt} | {mean_of(blind, 1):.2f} | {equal} | "
              f"{1000 * rows['seconds'] / rows['cases']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
