"""Benchmark the starvation guard: ganggate's default against the guard off and the
seed's count check, side by side, judged job by job, on the sample trace, the synthetic trace
of docs/replay.md, the Alibaba pod list read as gangs (`replay --alibaba ... --gangs`), and the
starvation trace (`replay --synth --starve`) at 1x, 2x and 4x its length, with and without
run-time bounds (activeDeadlineSeconds).

    .venv/bin/python bench/bench_starvation.py            # everything (see docs/benchmarks.md for the time)
    .venv/bin/python bench/bench_starvation.py --quick    # the sample trace and the 1x starvation trace
    .venv/bin/python bench/bench_starvation.py --only synth,alibaba-gangs --no-old
    .venv/bin/python bench/bench_starvation.py --only starve --jobs 120

`--only alibaba` replays the list one job per pod instead (as docs/replay.md's first example).

Policies: `count` (the seed's check), `ganggate, guard off` (--starvation-seconds and
--starvation-blind-seconds never reached), `ganggate, default` (the controller's defaults),
`ganggate, 300 s blind` (blind holds after 300 s; left out with --no-old), and on the
starvation trace `ganggate, default, deadlines` (every pod's activeDeadlineSeconds = 1.5 x its
run time: the guard holds after 300 s and lends held room to jobs that surely end in time).
Each row: mean utilisation, p95 and max wait, the largest gang-size class's max wait, GPU-hours
held idle, jobs never completed (deadlocked), and the share of start predictions that held.
The check lines say whether the default is within 1 point of utilisation and 5% of the p95 wait
of the guard off, and at least as good as count on both.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ganggate.replay.results.metrics import Summary
from ganggate.replay.results.predictions import score
from ganggate.replay.run import engine
from ganggate.replay.sweep import judge_default
from ganggate.replay.traces.alibaba import GANG_WINDOW, load_alibaba, load_alibaba_gangs
from ganggate.replay.traces.format import load_trace, with_deadlines
from ganggate.replay.traces.synth import StarveConfig, SynthConfig, generate, generate_starving

NEVER = {"starvation_seconds": 1e9, "starvation_blind_seconds": 1e9}
OLD = {"starvation_seconds": 300.0, "starvation_blind_seconds": 300.0}
ALIBABA = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"


@dataclass
class Row:
    label: str
    summary: Summary
    predictions: str
    wall: float


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


async def run(label: str, scenario: engine.Scenario, mode: str, settings: dict) -> Row:
    started = time.perf_counter()
    result = await engine.run_scenario(scenario, mode, exact_webhook=False, controller_settings=settings)
    wall = time.perf_counter() - started
    made = score(result.events, result.records, result.epoch_offset)
    print(f"  {label}: {wall:.0f} s wall, load average {os.getloadavg()[0]:.1f}", flush=True)
    return Row(label, result.summary, made.describe() if made.made else "-", wall)


def table(rows: list[Row]) -> str:
    lines = ["| policy | mean utilisation | p95 wait | max wait | largest class: max wait | "
             "GPU-hours held idle | never completed | start predictions held |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        s, f = row.summary, row.summary.jobs_figures
        big = f.largest_class() if f else None
        lines.append(f"| {row.label} | {s.mean_utilisation:.1%} | {hours(s.p95_queue_delay)} | "
                     f"{hours(f.max_wait if f else None)} | "
                     f"{big.name + ': ' + hours(big.max_wait) if big else '-'} | {s.held_idle_gpu_hours:.1f} | "
                     f"{s.deadlocked} | {row.predictions} |")
    return "\n".join(lines)


def check(rows: dict[str, Row]) -> str:
    """Whether the default is within 1 point and 5% of p95 of the guard off, and no worse than count."""
    return judge_default(rows["ganggate, default"].summary, rows["ganggate, guard off"].summary,
                         rows["count"].summary).line()


async def ordinary(name: str, scenario: engine.Scenario, old: bool = True) -> None:
    print(f"\n== {name}: {len(scenario.jobs)} jobs, {scenario.capacity} GPUs", flush=True)
    rows = {}
    policies = [("count", "count", {}), ("ganggate, guard off", "ganggate", NEVER), ("ganggate, default", "ganggate", {})]
    for label, mode, settings in policies + ([("ganggate, 300 s blind", "ganggate", OLD)] if old else []):
        rows[label] = await run(label, scenario, mode, settings)
    print(table(list(rows.values())))
    print(check(rows), flush=True)


async def starving(jobs: int, deadlines_only: bool = False) -> None:
    for scale in (1, 2, 4):
        trace = generate_starving(StarveConfig(jobs=jobs * scale))
        plain = engine.Scenario(trace, engine.uniform_nodes(4, 8))
        bounded = engine.Scenario(with_deadlines(trace, 1.5), engine.uniform_nodes(4, 8))
        print(f"\n== starvation trace {scale}x: {len(trace)} jobs "
              f"({sum(1 for j in trace if j.gpus > 8)} gangs of 16 GPUs) on 4 x 8 GPUs", flush=True)
        rows = [] if deadlines_only else [await run("ganggate, guard off", plain, "ganggate", NEVER),
                                          await run("ganggate, default", plain, "ganggate", {})]
        rows.append(await run("ganggate, default, deadlines 1.5x", bounded, "ganggate", {}))
        print(table(rows), flush=True)


async def main_async(args: argparse.Namespace) -> None:
    only = set(args.only.split(",")) if args.only else {"sample", "synth", "alibaba-gangs", "starve"}
    unknown = only - {"sample", "synth", "alibaba", "alibaba-gangs", "starve", "starve-deadlines"}
    if unknown:
        raise SystemExit(f"bench_starvation: --only: unknown part(s) {', '.join(sorted(unknown))}")
    if args.quick:
        only = {"sample", "quick-starve"}
    if "sample" in only:
        await ordinary("sample trace (examples/traces/sample.csv)",
                       engine.Scenario(load_trace(ROOT / "examples" / "traces" / "sample.csv"), engine.uniform_nodes(4, 8)))
    if "synth" in only:
        jobs = generate(SynthConfig(jobs=500, nodes=64, gpus_per_node=8, seed=1, load=1.5))
        await ordinary("synthetic trace of docs/replay.md (500 jobs, seed 1, load 1.5)",
                       engine.Scenario(jobs, engine.uniform_nodes(64, 8)), not args.no_old)
    if "alibaba" in only and ALIBABA.exists():
        await ordinary(f"Alibaba {ALIBABA.name}, first {args.alibaba_limit} pods, one job each, "
                       f"{args.alibaba_nodes} nodes",
                       engine.Scenario(load_alibaba(ALIBABA, args.alibaba_limit),
                                       engine.uniform_nodes(args.alibaba_nodes, 8, "128", "1Ti")),
                       not args.no_old)
    if "alibaba-gangs" in only:
        if not ALIBABA.exists():
            raise SystemExit(f"bench_starvation: {ALIBABA} is not there (see docs/replay.md)")
        gangs = load_alibaba_gangs(ALIBABA, args.gangs_limit, GANG_WINDOW)
        await ordinary(f"Alibaba {ALIBABA.name} read as gangs (same shape, created within {GANG_WINDOW:g} s), "
                       f"first {len(gangs)} gangs ({sum(j.pods for j in gangs)} pods, "
                       f"{sum(1 for j in gangs if j.pods > 1)} of several pods, "
                       f"{sum(1 for j in gangs if j.gpus >= 8)} of 8 GPUs or more), {args.gangs_nodes} nodes",
                       engine.Scenario(gangs, engine.uniform_nodes(args.gangs_nodes, 8, "128", "1Ti")),
                       not args.no_old)
    if "starve" in only or "starve-deadlines" in only:
        await starving(args.jobs, deadlines_only="starve" not in only)
    if "quick-starve" in only:
        trace = generate_starving(StarveConfig(jobs=args.jobs))
        plain = engine.Scenario(trace, engine.uniform_nodes(4, 8))
        print(f"\n== starvation trace: {len(trace)} jobs on 4 x 8 GPUs", flush=True)
        print(table([await run("ganggate, guard off", plain, "ganggate", NEVER),
                     await run("ganggate, default", plain, "ganggate", {})]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(only="starve-deadlines", jobs=6))
    parser.add_argument("--quick", action="store_true", help="the sample trace and the 1x starvation trace only")
    parser.add_argument("--only", default="", help="comma-separated: sample, synth, alibaba-gangs, alibaba (a job per "
                                                   "pod), starve, starve-deadlines (its deadline rows only)")
    parser.add_argument("--jobs", type=int, default=120, help="jobs of the 1x starvation trace (default 120)")
    parser.add_argument("--no-old", action="store_true",
                        help="leave out the row with blind holds after 300 s on the synthetic and Alibaba traces")
    parser.add_argument("--alibaba-limit", type=int, default=300, help="pods of the Alibaba list (default 300)")
    parser.add_argument("--alibaba-nodes", type=int, default=16,
                        help="nodes (8 GPUs, 128 CPUs, 1Ti each) for the Alibaba list (default 16, as docs/replay.md)")
    parser.add_argument("--gangs-limit", type=int, default=500,
                        help="gangs of the Alibaba list read as gangs (default 500)")
    parser.add_argument("--gangs-nodes", type=int, default=5,
                        help="nodes (8 GPUs, 128 CPUs, 1Ti each) for the Alibaba gangs (default 5: they contend)")
    args = parser.parse_args()
    for name in ("gate", "webhook", "kubesim", "certs", "ganggate", "aiohttp"):
        logging.getLogger(name).setLevel(logging.ERROR)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
