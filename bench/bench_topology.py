"""Benchmark topology-aware placement: synthetic traces replayed on blocks of racks of
nodes under each placement policy, several seeds each, with the placement figures per policy
(mean across the seeds and their spread), then a replay where a share of the jobs requires one
rack, checked for violations.

    .venv/bin/python bench/bench_topology.py                          # 4x4x8 nodes x 8 GPUs, 3 seeds of 300 jobs
    .venv/bin/python bench/bench_topology.py --jobs 1000 --seeds 1,2,3 --require-share 0.3

Policies: `free` (the planner admits, the scheduler places: --placement=free), `ganggate`
(pinned best fit, no topology levels) and `topology` (pinned with --topology-levels). The
issue's bar: `topology` spans fewer racks than `ganggate` without lowering GPU utilisation by
more than a point or raising the p95 wait by more than 10%; and a required rack is never left.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ganggate.replay.results.topology import (
    TopologySummary,
    markdown_table,
    required_line,
    required_violations,
    summarise_topology,
    topology_nodes,
)
from ganggate.replay.run import engine
from ganggate.replay.traces.synth import SynthConfig, generate
from ganggate.sim.topology import parse_shape

POLICIES = ("free", "ganggate", "topology")
#: (column, attribute, digits) of the figures averaged across seeds.
FIGURES = (
    ("racks mean", "mean_racks", 2),
    ("racks p95", "p95_racks", 1),
    ("blocks mean", "mean_blocks", 2),
    ("blocks p95", "p95_blocks", 1),
    ("one rack when it could", "one_rack_share", 3),
    ("GPU utilisation", "mean_utilisation", 3),
    ("p95 wait (s)", "p95_queue_delay", 0),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(topology="1x2x4", jobs=6, seeds="1"))
    parser.add_argument("--topology", default="4x4x8", help="BLOCKSxRACKSxNODES (default 4x4x8)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=300, help="jobs per trace (default 300)")
    parser.add_argument("--load", type=float, default=1.5, help="offered load of the traces (default 1.5)")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated trace seeds (default 1,2,3)")
    parser.add_argument("--require-share", type=float, default=0.3,
                        help="share of the multi-pod jobs that require one rack in the last replay (default 0.3; "
                             "0 skips it)")
    args = parser.parse_args(argv)
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: expected integers separated by commas")
    if not args.seeds or args.jobs < 1 or not 0 <= args.require_share <= 1:
        parser.error("need at least one seed, --jobs of at least 1 and --require-share from 0 to 1")
    return args


def value(row: TopologySummary, attribute: str) -> float | None:
    found = getattr(row, attribute)
    return None if found is None else float(found)


def spread_table(rows: dict[str, list[TopologySummary]]) -> str:
    """Per policy, each figure's mean across the seeds and its range (min-max)."""
    head = "| policy | seeds | multi-node gangs | " + " | ".join(name for name, _, _ in FIGURES) + " |"
    lines = [head, "|---|---:|---:|" + "---:|" * len(FIGURES)]
    for policy, found in rows.items():
        cells = [policy, str(len(found)), f"{statistics.mean(r.multi_node_gangs for r in found):.1f}"]
        for _, attribute, digits in FIGURES:
            values = [v for v in (value(r, attribute) for r in found) if v is not None]
            if not values:
                cells.append("-")
                continue
            scale, unit = (100, "%") if attribute in ("one_rack_share", "mean_utilisation") else (1, "")
            shown = digits - 2 if unit else digits
            mean = statistics.mean(values) * scale
            cells.append(f"{mean:.{max(shown, 0)}f}{unit} ({min(values) * scale:.{max(shown, 0)}f}-"
                         f"{max(values) * scale:.{max(shown, 0)}f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(rows: dict[str, list[TopologySummary]]) -> str:
    """The issue's bar, topology against best fit, on the means across seeds."""
    def mean(policy: str, attribute: str) -> float:
        values = [v for v in (value(r, attribute) for r in rows[policy]) if v is not None]
        return statistics.mean(values) if values else 0.0

    racks = (mean("topology", "mean_racks"), mean("ganggate", "mean_racks"))
    utilisation = (mean("topology", "mean_utilisation") - mean("ganggate", "mean_utilisation")) * 100
    waits = (mean("topology", "p95_queue_delay"), mean("ganggate", "p95_queue_delay"))
    wait_change = (waits[0] / waits[1] - 1) * 100 if waits[1] else 0.0
    kept = racks[0] < racks[1] and utilisation >= -1 and wait_change <= 10
    return (f"topology vs best fit: racks mean {racks[0]:.2f} vs {racks[1]:.2f}, utilisation {utilisation:+.1f} points, "
            f"p95 wait {wait_change:+.0f}% -> {'meets' if kept else 'MISSES'} the bar (fewer racks, at most -1 point, "
            "at most +10%)")


async def replay(scenario: engine.Scenario, mode: str) -> engine.RunResult:
    return await engine.run_scenario(scenario, mode, exact_webhook=False)


def run_policies(args: argparse.Namespace, shape, nodes: Sequence) -> dict[str, list[TopologySummary]]:
    rows: dict[str, list[TopologySummary]] = {policy: [] for policy in POLICIES}
    for seed in args.seeds:
        jobs = generate(SynthConfig(jobs=args.jobs, nodes=shape.nodes, gpus_per_node=args.gpus_per_node,
                                    seed=seed, load=args.load))
        scenario = engine.Scenario(jobs, nodes, topology_levels=shape.levels)
        for policy in POLICIES:
            started = time.perf_counter()
            result = asyncio.run(replay(scenario, policy))
            print(f"  seed {seed}, {policy}: {result.summary.completed}/{result.summary.jobs} jobs completed, "
                  f"{time.perf_counter() - started:.1f} s wall", flush=True)
            rows[policy].append(summarise_topology(result.summary, jobs, result.records, nodes))
    return rows


def run_required(args: argparse.Namespace, shape, nodes: Sequence) -> int:
    """The same traces with a share of the jobs requiring one rack, under `topology`; returns
    the number of violations (0 is the only right answer)."""
    violations = 0
    rows = []
    for seed in args.seeds:
        jobs = generate(SynthConfig(jobs=args.jobs, nodes=shape.nodes, gpus_per_node=args.gpus_per_node,
                                    seed=seed, load=args.load, require_share=args.require_share,
                                    topology_level=shape.rack_label))
        scenario = engine.Scenario(jobs, nodes, topology_levels=shape.levels)
        result = asyncio.run(replay(scenario, "topology"))
        broken = required_violations(jobs, result.records, nodes)
        violations += len(broken)
        print(f"  seed {seed}, topology: {result.summary.completed}/{result.summary.jobs} jobs completed; "
              f"{required_line(jobs, result.records, nodes)}", flush=True)
        rows.append(replace(summarise_topology(result.summary, jobs, result.records, nodes),
                            mode=f"topology, seed {seed}"))
    print()
    print(markdown_table(rows))
    return violations


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in ("gate", "webhook", "kubesim", "certs", "aiohttp", "ganggate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    shape = parse_shape(args.topology)
    nodes = topology_nodes(shape, args.gpus_per_node)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"bench_topology: {os.cpu_count()} CPUs, load average {load}; seeds {args.seeds} x {args.jobs} jobs "
          f"(load {args.load:g}) on {shape.blocks} blocks x {shape.racks_per_block} racks x {shape.nodes_per_rack} "
          f"nodes x {args.gpus_per_node} GPUs; policies: {', '.join(POLICIES)}", flush=True)
    rows = run_policies(args, shape, nodes)
    print("\nMean across the seeds (min-max in brackets):\n")
    print(spread_table(rows))
    print()
    print(verdict(rows))
    violations = 0
    if args.require_share:
        print(f"\nThe same traces, {args.require_share:.0%} of the multi-pod jobs requiring one rack "
              f"({shape.rack_label}), under topology:", flush=True)
        violations = run_required(args, shape, nodes)
        print(f"\nrequired rack left by {violations} jobs" + (" (must be 0)" if violations else ""))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
