"""What telling "can never fit" from "cannot fit now" costs a decision round (GangCannotFit).

bench_decide's cluster (nodes of 8 GPUs, 40% partly used; waiting gangs of 1 to 64 pods): one
decide() round with the check (core.placement.feasibility.never_fits on every gang that does not fit)
against the same round without it (the planner's never_fits replaced by one that answers None),
interleaved, CPU time; in steady state (the node picture cached per layout) and in the first
round after a node change (the picture rebuilt), once with plain gangs and once with every gang
its own tolerations and selector (bench_decide's "constraints" round). The baseline is measured
in the same run. Run: .venv/bin/python bench/bench_cannot_fit.py (--help for a smaller cluster).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decide import build

from ganggate.core import planner
from ganggate.core.placement import feasibility
from ganggate.core.state.cluster import ClusterState


def _cpu(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def compare(state: ClusterState, repeat: int, fresh: bool) -> tuple[float, float, int]:
    """(CPU without the check, CPU with it, gangs that can never fit), medians of interleaved runs;
    fresh: the node picture is dropped before each round with the check (a node just changed)."""
    real = planner.never_fits
    without, with_check = [], []

    def checked() -> None:
        if fresh:
            feasibility._PICTURES.pop(state, None)
        planner.decide(state, 0.0)

    try:
        for _ in range(repeat):
            planner.never_fits = lambda *args: None
            without.append(_cpu(lambda: planner.decide(state, 0.0), 1))
            planner.never_fits = real
            with_check.append(_cpu(checked, 1))
    finally:
        planner.never_fits = real
    never = sum(1 for w in planner.decide(state, 0.0)[1] if w.event_reason == feasibility.CANNOT_FIT)
    return statistics.median(without), statistics.median(with_check), never


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=20, waiting_pods=40, repeat=1))
    parser.add_argument("--nodes", type=int, default=5000, help="nodes of 8 GPUs (default 5000)")
    parser.add_argument("--waiting-pods", type=int, default=10000, help="gated gang pods waiting (default 10000)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds of each kind; medians shown (default 7)")
    args = parser.parse_args(argv)
    nodes, pods = build(7, args.nodes, args.waiting_pods)
    plain = ClusterState()
    plain.reset(nodes, pods)
    varied = []
    for pod in pods:
        name = (pod["metadata"]["annotations"] or {}).get("scheduling.k8s.io/group-name")
        if name:
            pod = {**pod, "spec": {**pod["spec"], "nodeSelector": {"kubernetes.io/os": "linux"},
                                   "tolerations": [{"key": f"team/{name}", "operator": "Exists"}]}}
        varied.append(pod)
    constrained = ClusterState()
    constrained.reset(nodes, varied)
    gc.freeze()
    print(f"cluster: {args.nodes} nodes x 8 GPUs, {args.waiting_pods} waiting pods; CPU medians of {args.repeat}")
    for label, state in (("plain gangs", plain), ("a constraint per gang", constrained)):
        for fresh in (False, True):
            off, on, never = compare(state, args.repeat, fresh)
            when = "first round after a node change" if fresh else "steady state (picture cached)"
            print(f"{label:22s} {when:32s} without {off * 1000:7.1f} ms, with {on * 1000:7.1f} ms: "
                  f"{on / off:4.2f}x ({never} GangCannotFit)")


if __name__ == "__main__":
    main()
