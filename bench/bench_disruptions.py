"""Benchmark the cluster fighting back: a trace replayed with injected preemptions, drains,
node failures and pod failures, in each admission mode, and the GPU-seconds held by incomplete
gangs (GPUs bound to a job not all of whose pods run), integrated exactly between the replay's
quiescent steps.

    .venv/bin/python bench/bench_disruptions.py                 # 300 jobs on 32 x 8 GPUs
    .venv/bin/python bench/bench_disruptions.py --quick         # the sample trace on 4 x 8 GPUs
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

from ganggate.replay.results.report import _duration
from ganggate.replay.run import disruptions, engine
from ganggate.replay.traces.format import load_trace
from ganggate.replay.traces.synth import SynthConfig, generate

MODES = ("none", "count", "ganggate")


def table(results: dict[str, engine.RunResult], walls: dict[str, float]) -> str:
    lines = ["| mode | jobs completed | GPU-seconds held by incomplete gangs | GPU-hours | runs lost (restarts) "
             "| eviction attempts refused | p95 wait | wall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, r in results.items():
        s = r.summary
        held = s.held_idle_gpu_hours * 3600
        lines.append(f"| {mode} | {s.completed}/{s.jobs} | {held:,.0f} | {s.held_idle_gpu_hours:.1f} | "
                     f"{r.interruptions} | {r.disruptions.get('refused evictions', 0)} | "
                     f"{_duration(s.p95_queue_delay)} | {walls[mode]:.0f} s |")
    return "\n".join(lines)


async def bench(name: str, scenario: engine.Scenario, modes: list[str]) -> None:
    kinds: dict[str, int] = {}
    for d in scenario.disruptions:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    print(f"\n== {name}: {len(scenario.jobs)} jobs, {sum(j.pods for j in scenario.jobs)} pods, "
          f"{len(scenario.nodes)} nodes, {scenario.capacity} GPUs; disruptions: "
          f"{', '.join(f'{k} {n}' for k, n in kinds.items())}", flush=True)
    results, walls = {}, {}
    for mode in modes:
        started = time.perf_counter()
        results[mode] = await engine.run_scenario(scenario, mode, exact_webhook=False)
        walls[mode] = time.perf_counter() - started
        print(f"{mode:>9}: {results[mode].steps} steps, {walls[mode]:.1f} s wall; applied {results[mode].disruptions}",
              flush=True)
    print(table(results, walls), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(jobs=8, nodes=2, modes="ganggate",
                                                disruptions="preempt=1,drain=1,node-failure=1,pod-failure=1"))
    parser.add_argument("--quick", action="store_true", help="the sample trace on 4 x 8 GPUs")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--load", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--disruptions", default="preempt=8,drain=4,node-failure=4,pod-failure=12",
                        help="counts per kind, spread uniformly over the arrivals (seeded)")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    for logger in ("gate", "webhook", "kubesim", "certs", "aiohttp", "ganggate"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    print(f"bench_disruptions: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    counts = {k.replace("-", "_"): n for k, n in disruptions.parse(args.disruptions).items()}
    if args.quick:
        jobs, nodes, name = load_trace(ROOT / "examples/traces/sample.csv"), 4, "sample trace"
    else:
        jobs = generate(SynthConfig(jobs=args.jobs, nodes=args.nodes, gpus_per_node=8, seed=args.seed,
                                    load=args.load))
        nodes, name = args.nodes, f"synthetic (seed {args.seed}, load {args.load:g})"
    specs = engine.uniform_nodes(nodes, 8)
    horizon = max(j.submit_time for j in jobs)
    schedule = disruptions.schedule(args.seed, horizon, [n.name for n in specs], **counts)
    scenario = engine.Scenario(jobs, specs, disruptions=schedule)
    asyncio.run(bench(f"{name} on {nodes} x 8 GPUs", scenario, args.modes.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
