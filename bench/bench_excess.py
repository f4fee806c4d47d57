"""The per-round cost of reporting pods beyond their gang's group-pod-num (controller/reporting/excess.py).

A round's `_after_round` asks `ExcessReporter.report` for new excess pods on the event loop. It
reads only the gangs in `ClusterState.over_declared` (kept as gangs refresh). The baseline, in the
same run, is the scan it replaced: every gang's live count against its group-pod-num. Gangs of 4
gated pods, a few of them with a fifth (excess) pod. Prints medians of --repeat rounds.
Run: .venv/bin/python bench/bench_excess.py (--gangs for another size).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ganggate.controller.reporting.excess import ExcessReporter
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod


class _Quiet:
    def emit(self, *args: object, **kwargs: object) -> None:
        pass


def build(gangs: int, over: int) -> ClusterState:
    pods = [make_pod(f"g{g}-{i}", namespace="ml", gang=f"g{g}", pod_num=4, gpus=1)
            for g in range(gangs) for i in range(4 + (1 if g < over else 0))]
    state = ClusterState()
    state.reset([make_node("n0", gpus=8)], pods)
    return state


def scan_all(state: ClusterState) -> int:
    """The baseline: every gang read for more live pods than declared."""
    return sum(1 for gang in list(state.gangs.values())
               if gang.spec is not None and gang.live_count > gang.spec.pod_num and gang.excess_pods())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(gangs=200, over=3, repeat=2))
    parser.add_argument("--gangs", type=int, default=20000)
    parser.add_argument("--over", type=int, default=10, help="gangs with one pod beyond their number")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    state = build(args.gangs, args.over)
    reporter = ExcessReporter(_Quiet())
    assert reporter.report(state) == args.over == scan_all(state)
    timings: dict[str, list[float]] = {"scan every gang (baseline)": [], "ExcessReporter.report": []}
    for _ in range(args.repeat):
        for name, work in (("scan every gang (baseline)", lambda: scan_all(state)),
                           ("ExcessReporter.report", lambda: reporter.report(state))):
            started = time.perf_counter()
            work()
            timings[name].append(time.perf_counter() - started)
    print(f"{args.gangs} gangs of 4 pods, {args.over} with a fifth; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    base = statistics.median(timings["scan every gang (baseline)"])
    for name, values in timings.items():
        value = statistics.median(values)
        print(f"  {name:28s} {value * 1000:8.3f} ms a round  ({value / base:.4f}x the baseline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
