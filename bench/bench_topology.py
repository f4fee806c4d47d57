"""Benchmark topology-aware placement (#10): a synthetic trace replayed on blocks of racks of
nodes under each placement policy, with the placement figures per policy.

    .venv/bin/python bench/bench_topology.py                      # 4x4x8 nodes x 8 GPUs, 150 jobs
    .venv/bin/python bench/bench_topology.py --jobs 300 --seed 2

Policies: `free` (the planner admits, the scheduler places: --placement=free), `ganggate`
(pinned best fit, no topology levels) and `topology` (pinned with --topology-levels).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ganggate.replay import engine  # noqa: E402
from ganggate.replay.synth import SynthConfig, generate  # noqa: E402
from ganggate.replay.topology import markdown_table, summarise_topology, topology_nodes  # noqa: E402
from ganggate.sim.topology import parse_shape  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="4x4x8", help="BLOCKSxRACKSxNODES (default 4x4x8)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=150)
    parser.add_argument("--load", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for name in ("gate", "webhook", "kubesim", "certs", "aiohttp", "ganggate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    shape = parse_shape(args.topology)
    nodes = topology_nodes(shape, args.gpus_per_node)
    jobs = generate(SynthConfig(jobs=args.jobs, nodes=shape.nodes, gpus_per_node=args.gpus_per_node,
                                seed=args.seed, load=args.load))
    scenario = engine.Scenario(jobs, nodes, topology_levels=shape.levels)
    policies = ["free", "ganggate", "topology"]
    print(f"bench_topology: {os.cpu_count()} CPUs; {len(jobs)} jobs (seed {args.seed}, load {args.load:g}) on "
          f"{shape.blocks} blocks x {shape.racks_per_block} racks x {shape.nodes_per_rack} nodes x "
          f"{args.gpus_per_node} GPUs; policies: {', '.join(policies)}", flush=True)
    rows = []
    for mode in policies:
        started = time.perf_counter()
        result = asyncio.run(engine.run_scenario(scenario, mode, exact_webhook=False))
        print(f"  {mode}: {result.steps} steps, {result.summary.completed}/{result.summary.jobs} jobs completed, "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        rows.append(summarise_topology(result.summary, jobs, result.records, nodes))
    print()
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
