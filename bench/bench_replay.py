"""Benchmark the trace replay: wall time, steps per second and simulated hours per wall second
of each admission mode, and the figures the replay measures, for the sample trace and a 500-job
synthetic trace on 64 nodes x 8 GPUs. The controller runs on the replay's simulated clock, so its
policies fire in simulated time: each gated mode also prints how many gangs its starvation
hold-back held capacity for (their GangUnschedulable Event says "capacity held back"), and the
GangBindTimeout and GangTimedOut Events. The load average is printed beside the figures.

    .venv/bin/python bench/bench_replay.py            # both (a few minutes on 2 cores)
    .venv/bin/python bench/bench_replay.py --quick    # the sample trace only
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

from ganggate.replay.results import report
from ganggate.replay.run import engine
from ganggate.replay.traces.format import load_trace
from ganggate.replay.traces.synth import SynthConfig, generate

MODES = ("none", "count", "ganggate")


def policy_line(result: engine.RunResult) -> str:
    """What the controller's time-driven policies did, from the Events it left."""
    held = {pod.rsplit("-", 1)[0] for reason, pod, message, _ in result.events
            if reason == "GangUnschedulable" and "capacity held back" in message}
    def count(reason):
        return sum(1 for r, *_ in result.events if r == reason)
    return (f"starvation hold-back for {len(held)} gangs, {count('GangBindTimeout')} GangBindTimeout, "
            f"{count('GangTimedOut')} GangTimedOut")


async def bench(name: str, scenario: engine.Scenario, modes: list[str]) -> None:
    pods = sum(j.pods for j in scenario.jobs)
    print(f"\n== {name}: {len(scenario.jobs)} jobs, {pods} pods, {len(scenario.nodes)} nodes, "
          f"{scenario.capacity} GPUs", flush=True)
    summaries = []
    for mode in modes:
        started = time.perf_counter()
        result = await engine.run_scenario(scenario, mode, exact_webhook=False)
        wall = time.perf_counter() - started
        summaries.append(result.summary)
        simulated = (result.end - min((j.submit_time for j in scenario.jobs), default=0.0)) / 3600
        print(f"{mode:>9}: {result.steps:5d} steps in {wall:6.1f} s wall = {result.steps / wall:6.1f} steps/s; "
              f"{simulated:.1f} h simulated = {simulated / wall:.3f} simulated h per wall s; "
              f"{policy_line(result)}; load average {os.getloadavg()[0]:.1f}", flush=True)
    print(report.markdown_table(summaries), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(sample=False, jobs=8, nodes=2, modes="ganggate"))
    parser.add_argument("--quick", action="store_true", help="the sample trace only")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--load", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES), help="admission modes (default: all three)")
    parser.add_argument("--no-sample", dest="sample", action="store_false", help="leave out the sample trace")
    args = parser.parse_args()
    for name in ("gate", "webhook", "kubesim", "certs", "aiohttp", "ganggate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    print(f"bench_replay: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    modes = args.modes.split(",")
    if args.sample:
        sample = engine.Scenario(load_trace(ROOT / "examples/traces/sample.csv"), engine.uniform_nodes(4, 8))
        asyncio.run(bench("sample trace (examples/traces/sample.csv) on 4 x 8 GPUs", sample, modes))
    if not args.quick:
        jobs = generate(SynthConfig(jobs=args.jobs, nodes=args.nodes, gpus_per_node=8, seed=args.seed,
                                    load=args.load))
        synthetic = engine.Scenario(jobs, engine.uniform_nodes(args.nodes, 8))
        asyncio.run(bench(f"synthetic (seed {args.seed}, load {args.load:g}) on {args.nodes} x 8 GPUs", synthetic, modes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
