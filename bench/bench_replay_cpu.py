"""CPU seconds of one replay of the synthetic trace of docs/replay.md, in this checkout and in an
earlier commit (the baseline), one after the other in fresh processes: what a change to the
replay, kubesim or the controller costs or saves, read as CPU time, which a machine shared with
other work disturbs far less than wall time.

    .venv/bin/python bench/bench_replay_cpu.py --against REV                  # 500 jobs, default
    .venv/bin/python bench/bench_replay_cpu.py --against REV --jobs 300 --mode count

The baseline is `git archive`d into a temporary directory and imported from there (its own
ganggate, this virtualenv's packages). The simulated figures (steps, utilisation, p95 wait) are
printed too: a speed change should leave them alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE_RUN = r'''
import asyncio, logging, resource, sys, time
sys.path.insert(0, sys.argv[1])
from ganggate.replay.run import engine
from ganggate.replay.traces.synth import SynthConfig, generate
for name in ("gate", "webhook", "kubesim", "certs", "ganggate", "aiohttp"):
    logging.getLogger(name).setLevel(logging.ERROR)
jobs, mode = int(sys.argv[2]), sys.argv[3]
trace = generate(SynthConfig(jobs=jobs, nodes=64, gpus_per_node=8, seed=1, load=1.5))
scenario = engine.Scenario(trace, engine.uniform_nodes(64, 8))
async def main():
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = await engine.run_scenario(scenario, mode, exact_webhook=False)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    s = result.summary
    print(f"{cpu:.1f} {time.perf_counter() - started:.1f} {result.steps} {s.mean_utilisation:.4f} "
          f"{s.p95_queue_delay or 0:.0f}")
asyncio.run(main())
'''


def run(root: Path, jobs: int, mode: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", ONE_RUN, str(root), str(jobs), mode], cwd=root,
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    sys.path.insert(0, str(ROOT))
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(against="HEAD", jobs=5))
    parser.add_argument("--against", help="the baseline commit (anything git rev-parse reads; required)")
    parser.add_argument("--jobs", type=int, default=500, help="jobs of the synthetic trace (default 500)")
    parser.add_argument("--mode", default="ganggate", help="the admission mode (default ganggate, the defaults)")
    args = parser.parse_args()
    if not args.against:
        parser.error("the following arguments are required: --against")
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        archive = subprocess.run(["git", "archive", args.against], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        print(f"synthetic trace of docs/replay.md, {args.jobs} jobs, 64 x 8 GPUs, mode {args.mode}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        print("| checkout | CPU s | wall s | steps | mean utilisation | p95 wait s |\n|---|---:|---:|---:|---:|---:|")
        rows = {}
        for label, root in ((args.against, base), ("this checkout", ROOT)):
            rows[label] = run(root, args.jobs, args.mode)
            print(f"| {label} | " + " | ".join(rows[label]) + " |", flush=True)
        old, new = float(rows[args.against][0]), float(rows["this checkout"][0])
        print(f"CPU: x{new / old:.2f} of {args.against}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
