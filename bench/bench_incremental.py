"""Incremental rounds against full ones on a large cluster, and the memory of the picture.

The cluster of bench_decide (nodes of 8 GPUs, 40% partly used; gangs of 1-64 pods of 1-8 GPUs):
first at 5,000 nodes and 10,000 waiting pods, full rounds only; then at 20,000 nodes and
100,000 waiting pods. Prints, with the load average: the full round (planner.decide), then, once the first round's decisions are promised as
the shell does, the incremental round (IncrementalRounds) after one gang arrives (priority 0;
and priority 100, ahead of the older gangs), after one running pod finishes, and after nothing
changed, each beside the full round on the same state and checked to decide the same; and the
peak RSS of the process after building the ClusterState beside the size of the JSON it was
built from. Medians of --repeat runs. After each relist (ClusterState.reset) the picture is moved
out of the garbage collector's way with gc.freeze(), as the controller does (controller/round/loop.py
_reset), so that the rounds timed are the controller's.
Both backlogs are timed at the large size, each on a picture of its own: a fresh one (the rounds
run 300 s after the pods were created: no gang starves) and a starving one (2 hours after: every
waiting gang has waited past the starvation limit), both rounds with the controller's settings.
Run: .venv/bin/python bench/bench_incremental.py (--help for a smaller cluster).
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_decide import build
from ganggate.controller.config import BLIND_SECONDS
from ganggate.core.incremental import IncrementalRounds
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_pod

NOW = 1704067200.0 + 300  # nobody has waited 300 s: no gang starves
# The backlogs timed: when the rounds run after the pods were created (within 4 minutes of 00:00).
BACKLOGS = {
    "fresh (no gang waited 300 s)": NOW,
    "starving (every gang waited ~2 h, past the 300 s starvation limit)": 1704067200.0 + 7200,
}
# The controller's own settings (controller.config), given to both the incremental and the full rounds.
SETTINGS = {"starvation_seconds": 300.0, "blind_seconds": BLIND_SECONDS}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description="Time incremental decision rounds against full ones.")
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=100, waiting_pods=300, repeat=1, full_repeat=1, small_nodes=50,
                                                small_waiting_pods=100))
    parser.add_argument("--nodes", type=int, default=20000, help="nodes of 8 GPUs (default 20000)")
    parser.add_argument("--waiting-pods", type=int, default=100000, help="gated gang pods (default 100000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each incremental round (default 5)")
    parser.add_argument("--full-repeat", type=int, default=3, help="runs of the full round (default 3)")
    parser.add_argument("--small-nodes", type=int, default=5000,
                        help="nodes of the first cluster, timed with full rounds only (default 5000)")
    parser.add_argument("--small-waiting-pods", type=int, default=10000,
                        help="waiting pods of the first cluster (default 10000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the cluster (default 7)")
    args = parser.parse_args(argv)
    for name in ("nodes", "waiting_pods", "repeat", "full_repeat", "small_nodes", "small_waiting_pods"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def rss_mib() -> float:
    """The process's resident memory now (Linux /proc/self/statm), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_ms(fn) -> tuple[float, object]:
    start = time.process_time()
    out = fn()
    return (time.process_time() - start) * 1000, out


def same(a: tuple[list, list], b: tuple[list, list]) -> bool:
    """The same decisions in the same order, and the same Waiting per gang."""
    return [(d.gang_key, d.placement) for d in a[0]] == [(d.gang_key, d.placement) for d in b[0]] and {
        w.gang_key: w.message for w in a[1]} == {w.gang_key: w.message for w in b[1]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    small = ClusterState()
    small.reset(*build(args.seed, args.small_nodes, args.small_waiting_pods))
    gc.freeze()  # as the controller does after a relist
    small_full = [cpu_ms(functools.partial(decide, small, NOW))[0] for _ in range(max(args.repeat, args.full_repeat))]
    gc.unfreeze()  # the small picture is done with: let the collector have it back
    del small
    print(f"full round (planner.decide), {args.small_nodes} nodes / {args.small_waiting_pods} waiting pods: "
          f"median {statistics.median(small_full):.1f} ms CPU")
    print(f"settings of both the incremental and the full rounds (the controller's): {SETTINGS}")
    for backlog, now in BACKLOGS.items():
        print(f"== backlog: {backlog}")
        run_backlog(args, now)
        gc.unfreeze()
        gc.collect()


def run_backlog(args: argparse.Namespace, NOW: float) -> None:  # the bench's clock
    """The incremental rounds against full ones on one backlog: the rounds run at NOW."""
    nodes, pods = build(args.seed, args.nodes, args.waiting_pods)
    rss_before = rss_mib()
    state = ClusterState()
    reset_ms, _ = cpu_ms(lambda: state.reset(nodes, pods))
    gc.freeze()
    rss_after = rss_mib()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    json_bytes = sum(len(json.dumps(o, separators=(",", ":"))) for o in nodes + pods)
    full = [cpu_ms(lambda: decide(state, NOW, **SETTINGS)) for _ in range(args.full_repeat)]
    decisions, waiting = full[-1][1]
    rounds = IncrementalRounds(**SETTINGS)
    first_ms, first = cpu_ms(lambda: rounds.decide(state, NOW, **SETTINGS))
    assert same(first, full[-1][1])
    for d in decisions:  # the shell promises what was decided, then the next round sees it
        state.promise(d.gang_key, d.placement, NOW + 120)
    promised_ms, _ = cpu_ms(lambda: rounds.decide(state, NOW, **SETTINGS))
    running = [p for p in pods if p["metadata"]["namespace"] == "busy"]
    scenarios = {
        "one gang arrives (4 pods x 1 GPU, priority 0)": lambda i: [
            state.apply_pod("ADDED", make_pod(f"new{i}-{j}", namespace="arrivals", gang=f"new{i}", pod_num=4, gpus=1,
                                              cpu="4", memory="32Gi", created="2024-01-01T01:00:00Z"))
            for j in range(4)],
        "one gang arrives (4 pods x 1 GPU, priority 100)": lambda i: [
            state.apply_pod("ADDED", make_pod(f"hi{i}-{j}", namespace="arrivals", gang=f"hi{i}", pod_num=4, gpus=1,
                                              cpu="4", memory="32Gi", created="2024-01-01T01:00:00Z", priority=100))
            for j in range(4)],
        "nothing changed": lambda i: None,
        "one running pod finishes": lambda i: state.apply_pod(  # (last: on a starving backlog the slowest)
            "MODIFIED", {**copy.deepcopy(running[i]), "status": {"phase": "Succeeded"}}),
    }
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          "(figures are noisy on a shared machine; CPU time less so)")
    print(f"cluster: {args.nodes} nodes x 8 GPUs, {len(running)} running pods, {args.waiting_pods} waiting pods "
          f"in {len(state.gangs)} gangs; ClusterState.reset {reset_ms:.0f} ms CPU")
    print(f"full round (planner.decide):        median {statistics.median(t for t, _ in full):8.1f} ms CPU  "
          f"({len(decisions)} gangs released, {len(waiting)} wait)")
    print(f"IncrementalRounds, first (full):    {first_ms:8.1f} ms CPU; after the decisions are promised: "
          f"{promised_ms:.1f} ms CPU ({rounds.turns} gangs given a turn)")
    for name, event in scenarios.items():
        inc: list[float] = []
        ref: list[float] = []
        turns: list[int] = []
        agree = True
        # On a starving backlog, room freed on a node has every starving gang that may use it
        # (nothing held for one yet: the holds are blind, given back before BLIND_SECONDS) look
        # for a hold, in the full round and the incremental one alike (holdback.hold_back ranks
        # the nodes once per shape and round, not once per gang).
        for i in range(args.repeat):
            event(i)
            t, got = cpu_ms(lambda: rounds.decide(state, NOW, **SETTINGS))
            inc.append(t)
            turns.append(rounds.turns)
            t, want = cpu_ms(lambda: decide(state, NOW, **SETTINGS))
            ref.append(t)
            agree = agree and same(got, want)
            for d in want[0]:  # as the shell would, so that the next run starts from a settled state
                state.promise(d.gang_key, d.placement, NOW + 120)
            rounds.decide(state, NOW, **SETTINGS)
        print(f"  {name:47s} incremental median {statistics.median(inc):7.2f} ms CPU "
              f"({statistics.median(turns):.0f} gangs given a turn), full {statistics.median(ref):7.1f} ms CPU; "
              f"same decisions: {'yes' if agree else 'NO'}", flush=True)
    print(f"memory: RSS {rss_before:.0f} MiB with the node and pod objects alone, {rss_after:.0f} MiB with the "
          f"ClusterState built from them (+{rss_after - rss_before:.0f} MiB; the benchmark still holds the objects: the "
          f"controller's own footprint is bench/bench_memory.py's); peak RSS {peak:.0f} MiB; "
          f"the objects' JSON is {json_bytes / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
