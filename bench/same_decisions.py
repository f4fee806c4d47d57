"""Check that two checkouts of ganggate decide the same on bench_decide's clusters.

Not a benchmark and not a test: a check to run by hand after a change to the decision core
that should change its speed and nothing else. It dumps every round bench_decide times (the
ordinary round, all starving, after promises, one constraint per gang, with topology; and the
incremental rounds on a backlog that waited 2 hours, round after round, beside full ones) at a
few seeds, with this checkout's code and with another's (e.g. a `git worktree` of the commit
before the change), and compares them: each decision's placement, message and annotations,
and each waiting gang's reason and message.
With --replays it also replays, in each checkout (`ganggate replay --modes ganggate`: kubesim,
the webhook and the controller in simulated time), a synthetic trace and the first pods of each
Alibaba pod list given, and compares what the replays write (summary.csv and timeseries.csv:
when each job started and finished follows from every release).
Run: .venv/bin/python bench/same_decisions.py /tmp/base-checkout [--seeds 1 2 3] [--nodes N] [--replays]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def mixed_shapes(pods: list[dict]) -> list[dict]:
    """The same pods, every third gang of two shapes: its odd pods ask twice the CPU and half
    the GPUs (at least one); so packing runs with the gang's nodes in play, and its extra tries."""
    out = []
    for pod in pods:
        name = (pod["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name")
        if name and int(name[1:]) % 3 == 0 and int(pod["metadata"]["name"].rsplit("-", 1)[1]) % 2:
            container = pod["spec"]["containers"][0]
            resources = container["resources"]
            gpus = max(1, int(resources["limits"]["nvidia.com/gpu"]) // 2)
            resources = {"requests": {**resources["requests"], "cpu": "8"}, "limits": {"nvidia.com/gpu": str(gpus)}}
            pod = {**pod, "spec": {**pod["spec"], "containers": [{**container, "resources": resources}]}}
        out.append(pod)
    return out


def rivals(seed: int, node_count: int) -> list[dict]:
    """Pending pods without a gate, each pinned to one node, that the scheduler may bind first
    (contention: a gang's plan must leave them their room, or go elsewhere)."""
    try:
        from ganggate.core.state.snapshot import make_pod
    except ImportError:  # a checkout from before the core's layers (#18)
        from ganggate.core.snapshot import make_pod  # type: ignore[no-redef]  # the older path

    rng = random.Random(seed)
    return [make_pod(f"rival-{i}", namespace="other", gpus=rng.choice((1, 2, 4)), cpu="2", memory="8Gi",
                     node_selector={"kubernetes.io/hostname": f"node-{rng.randrange(node_count):05d}"})
            for i in range(max(1, node_count // 20))]


def with_deadlines(pods: list[dict], seed: int) -> list[dict]:
    """The same pods, the running ones started at different times before the rounds, two in three
    with spec.activeDeadlineSeconds (the kubelet ends them by startTime + deadline): holds then
    have known starts on some nodes and blind ones on others, and rank nodes by both."""
    rng = random.Random(seed)
    out = []
    for pod in pods:
        if pod["metadata"]["namespace"] == "busy":
            second = rng.randrange(6 * 3600)  # started up to 6 hours before 2024-01-01T02:00:00Z
            started = 1704067200 + 7200 - second
            stamp = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(started))}Z"
            spec = dict(pod["spec"])
            if rng.random() < 2 / 3:
                spec["activeDeadlineSeconds"] = second + rng.randrange(60, 4 * 3600)
            pod = {**pod, "spec": spec, "status": {**(pod.get("status") or {}), "startTime": stamp}}
        out.append(pod)
    return out


def dump(root: Path, seed: int, node_count: int, waiting_pods: int) -> dict:
    """Every round's decisions and waitings, as JSON-able lists, with the ganggate (and the
    bench_decide) of the checkout at `root`."""
    sys.path[:0] = [str(root / "bench"), str(root)]
    from bench_decide import TOPOLOGY_LEVELS, build, with_topology

    try:
        from ganggate.core.state.cluster import ClusterState
    except ImportError:  # a checkout from before the core's layers (#18)
        from ganggate.core.cluster import ClusterState  # type: ignore[no-redef]  # the older path
    from ganggate.core.planner import decide

    def rows(out) -> dict:
        decisions, waiting = out
        return {
            "decisions": [[list(d.gang_key), d.placement, d.reason, d.roll_forward, d.domain, d.annotations]
                          for d in decisions],
            "waiting": sorted([list(w.gang_key), w.event_reason, w.message] for w in waiting),
        }

    now = 1704067200.0 + 300
    nodes, pods = build(seed, node_count, waiting_pods)
    state = ClusterState()
    state.reset(nodes, pods)
    out: dict = {}
    first = decide(state, now)
    out["round"] = rows(first)
    out["starving"] = rows(decide(state, now, starvation_seconds=0.0))
    for d in first[0]:
        state.promise(d.gang_key, d.placement, now + 120)
    out["after promises"] = rows(decide(state, now))
    out["after promises, starving"] = rows(decide(state, now, starvation_seconds=0.0))
    varied = []
    for pod in pods:
        name = (pod["metadata"]["annotations"] or {}).get("scheduling.k8s.io/group-name")
        if name and int(name[1:]) % 3 == 0:
            pod = {**pod, "spec": {**pod["spec"], "nodeSelector": {"kubernetes.io/os": "linux"},
                                   "tolerations": [{"key": f"team/{name}", "operator": "Exists"}]}}
        varied.append(pod)
    other = ClusterState()
    other.reset(nodes, varied)
    out["constraints"] = rows(decide(other, now))
    mixed = ClusterState()
    mixed.reset(nodes, mixed_shapes(pods) + rivals(seed, node_count))
    out["mixed shapes, rivals"] = rows(decide(mixed, now))
    out["mixed shapes, rivals, starving"] = rows(decide(mixed, now, starvation_seconds=0.0))
    out.update(incremental_rows(nodes, pods, rows))
    out.update(incremental_rows(nodes, with_deadlines(pods, seed), rows, "deadlines, "))
    topo_nodes, topo_pods = with_topology(nodes, pods)
    topo = ClusterState(topology_levels=TOPOLOGY_LEVELS)
    topo.reset(topo_nodes, topo_pods)
    out["topology"] = rows(decide(topo, now))
    out["topology, starving"] = rows(decide(topo, now, starvation_seconds=0.0))
    return out


def incremental_rows(nodes: list[dict], pods: list[dict], rows, label: str = "") -> dict:
    """The controller's incremental rounds on a starving backlog (every gang waited 2 hours),
    with its settings, round after round: the first, after its releases are promised, after one
    gang arrives, an idle one, and after each of three running pods finishes; each beside the full round on
    the same state (a checkout's incremental rounds must decide as its full rounds, and as the
    other checkout's)."""
    from ganggate.core.incremental import IncrementalRounds
    from ganggate.core.planner import decide
    try:
        from ganggate.core.state.cluster import ClusterState
        from ganggate.core.state.snapshot import make_pod
    except ImportError:  # a checkout from before the core's layers (#18)
        from ganggate.core.cluster import ClusterState  # type: ignore[no-redef]  # the older path
        from ganggate.core.snapshot import make_pod  # type: ignore[no-redef]  # the older path

    settings = {"starvation_seconds": 300.0, "blind_seconds": 6 * 3600.0}  # the controller's
    try:
        rounds = IncrementalRounds(**settings)
    except TypeError:  # a checkout whose rounds take the settings at each call
        rounds = IncrementalRounds()
    now = 1704067200.0 + 7200
    state = ClusterState()
    state.reset(nodes, pods)
    out: dict = {}

    def both(name: str) -> None:
        out[f"{label}starving, incremental: {name}"] = rows(rounds.decide(state, now, **settings))
        out[f"{label}starving, full: {name}"] = rows(decide(state, now, **settings))

    both("first")
    for d in decide(state, now, **settings)[0]:
        state.promise(d.gang_key, d.placement, now + 120)
    both("after promises")
    for j in range(4):
        state.apply_pod("ADDED", make_pod(f"new-{j}", namespace="arrivals", gang="new", pod_num=4, gpus=1, cpu="4",
                                          memory="32Gi", created="2024-01-01T01:00:00Z"))
    both("one gang arrives")
    both("nothing changed")
    busy = [p for p in pods if p["metadata"]["namespace"] == "busy"]
    for i, pod in enumerate(busy[:3]):  # (the first alone: as before; each releases or holds on its node)
        state.apply_pod("MODIFIED", {**pod, "status": {**(pod.get("status") or {}), "phase": "Succeeded"}})
        both("a running pod finishes" + (f" ({i + 1})" if i else ""))
        for d in out[f"{label}starving, full: a running pod finishes" + (f" ({i + 1})" if i else "")]["decisions"]:
            state.promise(tuple(d[0]), d[1], now + 120)
    return out


def counts(round_: dict) -> str:
    """'N gangs / M pods released, K wait' of one dumped round."""
    released = sum(len(d[1]) for d in round_["decisions"])
    return f"{len(round_['decisions'])} gangs / {released} pods released, {len(round_['waiting'])} wait"


TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "alibaba-gpu-v2023"


def replay(root: Path, args: list[str], out: Path) -> dict[str, str]:
    """The files a replay with the checkout at `root` writes (summary and time series)."""
    subprocess.run([sys.executable, "-m", "ganggate", "--log-level", "ERROR", "replay", *args, "--modes", "ganggate",
                    "--out", str(out)], check=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                   stdout=subprocess.DEVNULL)
    return {name: (out / name).read_text() for name in ("summary.csv", "timeseries.csv")}


def same_replays(other: Path, traces: list[str], limit: int, jobs: int) -> int:
    """Replay each trace with both checkouts; print and count the replays that differ."""
    runs = [("synthetic", ["--synth", "--jobs", str(jobs)])]
    runs += [(Path(t).name, ["--alibaba", str(t), "--limit", str(limit), "--nodes", "4", "--node-cpu", "128",
                              "--node-memory", "1Ti"]) for t in traces]  # (docs/replay.md's nodes; 4: pods queue)
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, replay_args in runs:
            mine, theirs = (replay(root, replay_args, Path(tmp) / f"{name}-{i}") for i, root in enumerate((HERE, other)))
            same = mine == theirs
            differ += not same
            print(f"replay {name:34s} {'same' if same else 'DIFFERENT'}: {mine['summary.csv'].splitlines()[-1]}")
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("other", help="the other checkout's root (its ganggate is imported from there)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 7])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--waiting-pods", type=int, default=10000)
    parser.add_argument("--dump", type=int, help=argparse.SUPPRESS)  # (the child's side)
    parser.add_argument("--replays", action="store_true", help="also compare replays of traces (see above)")
    parser.add_argument("--alibaba", nargs="*", default=[str(TRACES / "openb_pod_list_default.csv"),
                                                        str(TRACES / "openb_pod_list_gpushare40.csv")],
                        help="Alibaba pod lists to replay with --replays")
    parser.add_argument("--limit", type=int, default=300, help="pods of each Alibaba list replayed (default 300)")
    parser.add_argument("--jobs", type=int, default=60, help="jobs of the synthetic trace replayed (default 60)")
    parser.add_argument("--skip-rounds", action="store_true", help="compare the replays only")
    args = parser.parse_args()
    if args.dump is not None:
        json.dump(dump(Path(args.other).resolve(), args.dump, args.nodes, args.waiting_pods), sys.stdout)
        return 0
    differ = 0
    for seed in [] if args.skip_rounds else args.seeds:
        answers = []
        for root in (HERE, Path(args.other).resolve()):
            command = [sys.executable, __file__, str(root), "--dump", str(seed),
                       "--nodes", str(args.nodes), "--waiting-pods", str(args.waiting_pods)]
            answers.append(json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE).stdout))
        mine, theirs = answers
        for name in [n for n in mine if "starving, incremental: " in n]:  # within this checkout too
            full = name.replace("incremental", "full")
            same = mine[name] == mine[full]
            differ += not same
            print(f"seed {seed:3d} {name:26s} {'the same as' if same else 'DIFFERENT from'} the full round")
        for name in mine:
            same = mine[name] == theirs[name]
            differ += not same
            print(f"seed {seed:3d} {name:26s} {'same' if same else 'DIFFERENT'}: {counts(mine[name])}"
                  + ("" if same else f" (the other checkout: {counts(theirs[name])})"))
    if args.replays:
        differ += same_replays(Path(args.other).resolve(), args.alibaba, args.limit, args.jobs)
    print("all the same" if not differ else f"{differ} rounds or replays differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
