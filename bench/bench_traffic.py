"""Gangs released among ordinary pods on a nearly full cluster: do gangs run partly?

kubesim (its scheduler, kubelet and Job controller in a process of their own) with the webhook
and the gate controller as `ganggate sim up` assembles them, on the wall clock. Ordinary ungated
1-GPU pods arrive all the time and live seconds, keeping the cluster about 80% busy; Jobs whose
pods form gangs arrive among them. Each latency (seconds added to every API write) is run in
three modes on the same arrivals: `ganggate` (the Jobs carry the gang annotations),
`ganggate-no-nominate` (the same, the controller run with --no-nominate) and `baseline` (the same
plain Jobs, the default scheduler alone). Figures: see bench/traffic.py and docs/benchmarks.md.

    .venv/bin/python bench/bench_traffic.py                         # 200 gangs, latency 0 and 0.3 s
    .venv/bin/python bench/bench_traffic.py --gangs 30 --latency 0  # a quick look
    .venv/bin/python bench/bench_traffic.py --scheduler-emulated-version 1.30  # an older kube-scheduler's gates
    .venv/bin/python bench/bench_traffic.py --ordinary-rate 1 --ordinary-seconds 30 90  # long-lived ordinary pods
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.traffic import MODES, Figures, TrafficConfig, run
from ganggate.sim.componentbase.featuregate import EMULATABLE
from ganggate.sim.componentbase.featuregate import parse as parse_gates

HEADER = ("| latency | mode | gangs done | partial GPU-s | median window | partial >= 2 s | partial >= 5 s "
          "| longest window | stranded | in pieces | restarted | mean wait | busy | wall |")


def row(latency: float, mode: str, f: Figures, wall: float) -> str:
    return (f"| {latency:g} s | {mode} | {f.completed}/{f.gangs} | {f.partial_gpu_seconds:.1f} | {f.median_window:.2f} s "
            f"| {f.partial_over_2s} | {f.partial_over_5s} | {f.longest_window:.1f} s | {f.stranded} | {f.in_pieces} "
            f"| {f.restarted} | {f.mean_wait:.1f} s | {f.busy:.0%} | {wall:.0f} s |")


async def main(args: argparse.Namespace) -> None:
    base = TrafficConfig(gangs=args.gangs, nodes=args.nodes, seed=args.seed, ordinary_rate=args.ordinary_rate,
                         gang_seconds=tuple(args.gang_seconds), ordinary_seconds=tuple(args.ordinary_seconds),
                         scheduler_gates=args.scheduler_feature_gates, scheduler_version=args.scheduler_emulated_version)
    print(f"{base.nodes} nodes x {base.gpus_per_node} GPUs; {base.gangs} gangs of {base.gang_sizes} pods every "
          f"{base.gang_interval:g} s on average, running {base.gang_seconds} s; ordinary 1-GPU pods "
          f"{base.ordinary_rate:g}/s running {base.ordinary_seconds} s; load average "
          f"{os.getloadavg()[0]:.1f}; scheduler gates: {parse_gates(base.scheduler_gates, base.scheduler_version).describe()}",
          flush=True)
    print(HEADER)
    print("|---|---|" + "---:|" * 12)
    for latency in args.latency:
        for mode in args.modes:
            started = time.perf_counter()
            figures = await run(replace(base, latency=latency), mode)
            print(row(latency, mode, figures, time.perf_counter() - started), flush=True)
            if args.dra and mode != "baseline":  # the same arrivals with GPUs as DRA devices
                started = time.perf_counter()
                figures = await run(replace(base, latency=latency, dra=True), mode)
                print(row(latency, f"{mode} (DRA)", figures, time.perf_counter() - started), flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(gangs=2, nodes=2, latency=[0.0], modes=["ganggate"],
                                                gang_seconds=(1.0, 2.0), ordinary_seconds=(1.0, 3.0)))
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.3])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dra", action="store_true",
                        help="after each gated mode, the same run with GPUs as DRA devices claimed through a template")
    parser.add_argument("--gang-seconds", type=float, nargs=2, default=TrafficConfig.gang_seconds, metavar=("MIN", "MAX"),
                        help="a gang member's run time, uniform (default %(default)s)")
    parser.add_argument("--ordinary-rate", type=float, default=TrafficConfig.ordinary_rate, help="ordinary pods a second")
    parser.add_argument("--ordinary-seconds", type=float, nargs=2, default=list(TrafficConfig.ordinary_seconds),
                        metavar=("MIN", "MAX"), help="an ordinary pod's run time, uniform (default %(default)s)")
    parser.add_argument("--scheduler-feature-gates", default="", metavar="A=true,B=false")
    parser.add_argument("--scheduler-emulated-version", default="1.35", choices=EMULATABLE)
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)  # requests cut short when a run's cluster stops
    asyncio.run(main(parse()))
