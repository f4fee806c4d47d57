"""How long the gate controller's decision core takes on a big cluster.

5,000 nodes of 8 GPUs (40% partly used by running pods) and 10,000 waiting gated pods in gangs
of 1, 2, 4, 8, 16 and 64 pods of 1, 2, 4 or 8 GPUs. Prints the time of ClusterState.reset (a
relist), of one full decide() round (nobody starving: the ordinary case), of the same round
with every unfit gang starving, of one round after a decision's promises, of one round where
every gang has its own node constraints, of one incremental apply_pod, and of the ordinary
round again on the same nodes labelled into 8 blocks x 16 racks (--topology-levels
example.com/block,example.com/rack,kubernetes.io/hostname; every fourth gang requires one
rack, every fourth prefers one) with the ratio of the two rounds.
After each relist the picture is moved out of the garbage collector's way with gc.freeze(), as
the controller does (controller/round/loop.py _reset): the rounds timed are the controller's, not
rounds that now and then pay for a full collection over the whole picture.
Run: .venv/bin/python bench/bench_decide.py (--help for a smaller cluster).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

NODES = 5000
WAITING_PODS = 10000
GANG_SIZES = (1, 2, 4, 8, 16, 64)
GPUS_PER_POD = (1, 2, 4, 8)


BLOCK, RACK, HOSTNAME = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
TOPOLOGY_LEVELS = (BLOCK, RACK, HOSTNAME)
BLOCKS, RACKS_PER_BLOCK = 8, 16


def with_topology(nodes: list[dict], pods: list[dict]) -> tuple[list[dict], list[dict]]:
    """The same nodes labelled into BLOCKS x RACKS_PER_BLOCK racks of consecutive nodes, and the
    same pods, every fourth gang requiring one rack and every fourth preferring one."""
    racks = BLOCKS * RACKS_PER_BLOCK
    labelled = []
    for i, node in enumerate(nodes):
        rack = i * racks // len(nodes)
        labels = {**node["metadata"]["labels"], BLOCK: f"block-{rack // RACKS_PER_BLOCK}", RACK: f"rack-{rack}"}
        labelled.append({**node, "metadata": {**node["metadata"], "labels": labels}})
    annotated = []
    for pod in pods:
        annotations = pod["metadata"].get("annotations") or {}
        name = annotations.get("scheduling.k8s.io/group-name")
        if name and int(name[1:]) % 4 in (1, 2):
            key = "required" if int(name[1:]) % 4 == 1 else "preferred"
            annotations = {**annotations, f"scheduling.k8s.io/group-topology-{key}": RACK}
            pod = {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}
        annotated.append(pod)
    return labelled, annotated


def build(seed: int = 7, node_count: int = NODES, waiting_pods: int = WAITING_PODS) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    nodes = [make_node(f"node-{i:05d}", gpus=8, cpu="96", memory="768Gi") for i in range(node_count)]
    pods: list[dict] = []
    for i in range(node_count):
        if rng.random() < 0.4:
            pods.append(make_pod(f"run-{i}", namespace="busy", gpus=rng.choice((1, 2, 4, 6)), cpu="8",
                                 node_name=f"node-{i:05d}", phase="Running"))
    waiting = 0
    gang = 0
    while waiting < waiting_pods:
        size = min(rng.choice(GANG_SIZES), waiting_pods - waiting)
        gpus = rng.choice(GPUS_PER_POD)
        second = rng.randrange(240)
        created = f"2024-01-01T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
        for j in range(size):
            pods.append(make_pod(f"g{gang}-{j}", namespace=f"team-{gang % 20}", gang=f"g{gang}", pod_num=size,
                                 gpus=gpus, cpu="4", memory="32Gi", created=created,
                                 priority=rng.choice((0, 0, 0, 100))))
        waiting += size
        gang += 1
    return nodes, pods


class Timing:
    """Wall-clock and CPU seconds of repeated runs; CPU time is less sensitive to other load."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def ms(self) -> str:
        return f"median {statistics.median(self.wall) * 1000:8.1f} ms wall, {statistics.median(self.cpu) * 1000:8.1f} ms CPU"

    def us(self) -> str:
        return f"median {statistics.median(self.wall) * 1e6:8.1f} us wall, {statistics.median(self.cpu) * 1e6:8.1f} us CPU"


def timed(fn, repeat: int) -> Timing:
    out = Timing()
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        out.cpu.append(time.process_time() - cpu)
        out.wall.append(time.perf_counter() - wall)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description="Time the decision core (ClusterState, decide) on a synthetic cluster.")
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=50, waiting_pods=100, repeat=1))
    parser.add_argument("--nodes", type=int, default=NODES, help=f"nodes of 8 GPUs (default {NODES})")
    parser.add_argument("--waiting-pods", type=int, default=WAITING_PODS,
                        help=f"gated gang pods waiting (default {WAITING_PODS})")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each round; the median is shown (default 3)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the cluster (default 7)")
    args = parser.parse_args(argv)
    for name in ("nodes", "waiting_pods", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    repeat = args.repeat
    nodes, pods = build(args.seed, args.nodes, args.waiting_pods)
    state = ClusterState()
    reset = timed(lambda: state.reset(nodes, pods), repeat)
    gc.freeze()  # as the controller does after a relist
    gangs = len(state.gangs)
    now = 1704067200.0 + 300  # nobody has waited 300 s: the ordinary case
    result: dict = {}

    def one_round() -> None:
        result["out"] = decide(state, now)

    rounds = timed(one_round, repeat)
    decisions, waiting = result["out"]
    starving = timed(lambda: decide(state, now, starvation_seconds=0.0), repeat)
    released = sum(len(d.placement) for d in decisions)
    # Promise every decision (as the shell does before patching), then decide again: the
    # second round sees those gangs as in flight and the capacity as taken.
    for d in decisions:
        state.promise(d.gang_key, d.placement, now + 120)
    after = timed(one_round, repeat)
    # One pod event: a released pod becomes bound (when anything was released at all).
    apply = None
    if decisions:
        key, node = next(iter(decisions[0].placement.items()))
        raw = next(p for p in pods if f"{p['metadata']['namespace']}/{p['metadata']['name']}" == key)
        bound = {**raw, "spec": {**raw["spec"], "schedulingGates": [], "nodeName": node}}
        apply = timed(lambda: state.apply_pod("MODIFIED", bound), 200)
    # The same cluster where every gang has its own tolerations and a pool selector (one
    # constraint per gang): eligibility is shared, not recomputed per constraint.
    varied = []
    for pod in pods:
        name = (pod["metadata"]["annotations"] or {}).get("scheduling.k8s.io/group-name")
        if name:
            pod = {**pod, "spec": {**pod["spec"], "nodeSelector": {"kubernetes.io/os": "linux"},
                                   "tolerations": [{"key": f"team/{name}", "operator": "Exists"}]}}
        varied.append(pod)
    other = ClusterState()
    other.reset(nodes, varied)
    gc.freeze()
    distinct = len({p.constraint_key for p in other.pods.values() if p.gated})
    per_constraint = timed(lambda: decide(other, now), repeat)
    topo_nodes, topo_pods = with_topology(nodes, pods)
    topo = ClusterState(topology_levels=TOPOLOGY_LEVELS)
    topo.reset(topo_nodes, topo_pods)
    gc.freeze()
    topo_out: dict = {}

    def topo_round() -> None:
        topo_out["out"] = decide(topo, now)

    topology = timed(topo_round, repeat)
    topo_decisions, topo_waiting = topo_out["out"]
    ratio = statistics.median(topology.cpu) / statistics.median(rounds.cpu)
    topo_released = sum(len(d.placement) for d in topo_decisions)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          "(figures are noisy on a shared machine; CPU time less so)")
    print(f"cluster: {args.nodes} nodes x 8 GPUs, {len(pods) - args.waiting_pods} running pods, "
          f"{args.waiting_pods} waiting pods in {gangs} gangs")
    print(f"ClusterState.reset:        {reset.ms()}")
    print(f"decide() round:            {rounds.ms()}  "
          f"({len(decisions)} gangs / {released} pods released, {len(waiting)} gangs wait)")
    print(f"decide(), all starving:    {starving.ms()}  "
          "(starvation_seconds=0: every gang that does not fit holds capacity back)")
    print(f"decide() after promises:   {after.ms()}  "
          f"({len(result['out'][0])} more gangs released)")
    print(f"decide(), {distinct} constraints: {per_constraint.ms()}  "
          "(every gang its own tolerations and selector)")
    print(f"decide() with topology:    {topology.ms()}  "
          f"({len(topo_decisions)} gangs / {topo_released} pods released, {len(topo_waiting)} gangs wait; "
          f"same nodes and gangs in {BLOCKS} blocks x {RACKS_PER_BLOCK} racks; every 4th gang requires a rack, "
          "every 4th prefers one)")
    print(f"topology / plain round:    {ratio:.2f}x CPU (the goal: at most 1.5x); plain released "
          f"{len(decisions)} gangs, topology {len(topo_decisions)}: a gang that requires a rack and fits in "
          "none waits, and smaller gangs behind it go instead")
    print(f"apply_pod (one event):     {apply.us() if apply else 'not measured: nothing was released'}")


if __name__ == "__main__":
    main()
