"""The whole controller round at 20,000 nodes and 100,000 pods, and each part of it.

A user pays for the controller's whole round, not for `decide()` alone: before and after the
decision the shell acts on member losses and gang timeouts, works out when a round is next due
on time alone, carries out the decisions (promises), searches for a preemption for the gangs that
do not fit, reports the waiting gangs (Events), acts on expired promises and refreshes the
gauges. This bench times `Controller.round` (the round on the event loop, `--planning=loop`:
the same work `--planning=thread` does, the decision in a worker thread) with every one of those
parts, on bench_decide's cluster: 20,000 nodes of 8 GPUs (40% partly used), 100,000 gated pods
in gangs of 1-64. The first round releases every gang that fits (the releases are promised as the
shell promises them, and not sent: no API server is involved; the watch events of their pods
bound and running are then applied); then, each --repeat times:

- one gang arrives (4 pods x 1 GPU, priority 0);
- nothing changed (an idle round, as the 1 s tick makes one);
- one running pod finishes (its watch event: Succeeded): the gangs that may use its node plan
  again; on the starving backlog each of them that does not fit looks for a hold
  (`holdback.hold_back`);
- one gang arrives (8 pods x 8 GPUs, priority 1000, above every other): it does not fit, and the preemption search
  plans the eviction of lower-priority gangs for it (not carried out: the next round searches
  again).

Prints the median CPU time of the whole round and of each part, with, as the baseline of the same
run, the decision alone (`IncrementalRounds.decide` on the same state, which the round includes)
and a full `decide()` round (on the state the last round of each scenario plans, before it), both with the
controller's own settings (starvation limits, card
policies). Both backlogs are timed, each on a controller of its own: a fresh one (the rounds run
300 s after the pods were created: no gang starves) and a starving one (2 hours after: every
waiting gang has waited past the starvation limit, as most have on a busy cluster). Not included: the API calls
(releases, Events, evictions are not
sent), the watch events' own cost (applied before the round), the budgets' pass
(controller.lifecycle.protection runs it as a task of its own, after the round).

    .venv/bin/python bench/bench_round.py [--nodes 20000] [--waiting-pods 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import logging
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_decide import build
from ganggate.contract import DECISION_ANNOTATION, GROUP_NAME
from ganggate.controller.round import offloop
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.core.fit.gpushare import cards_of
from ganggate.core.placement import capacity as capacity_module
from ganggate.core.planner import decide
from ganggate.core.state.cluster import NodeInfo, PodInfo
from ganggate.core.state.snapshot import make_pod

NOW = 1704067200.0 + 300  # nobody has waited 300 s: no gang starves
# The backlogs timed: when the rounds run after the pods were created (within 4 minutes of 00:00).
BACKLOGS = {
    "fresh (no gang waited 300 s)": NOW,
    "starving (every gang waited ~2 h, past the 300 s starvation limit)": 1704067200.0 + 7200,
}

# The parts, in the order a round runs them (nested ones are also counted in their caller).
PARTS = ("losses+timeouts", "decide", "  Capacity.from_state", "next-due timers", "releases (promises)",
         "preemption search", "waiting-gang report", "expired promises", "bypass report", "gauges")
ROWS = ("whole round", "whole round (wall)", *PARTS)  # (wall: ms on the clock, the machine's load included)


class Parts:
    """CPU time per part of the rounds being timed."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, attribute: str, part: str) -> None:
        """Count the CPU time of owner.attribute (a function or a bound method) as `part`."""
        original: Callable[..., Any] = getattr(owner, attribute)
        spent = self.spent

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[part] += time.process_time() - start

        setattr(owner, attribute, staticmethod(timed) if isinstance(owner, type) else timed)


def make_controller(nodes: list[dict], pods: list[dict], parts: Parts) -> Controller:
    """A leader (no election) with the cluster in its state, its parts timed, releases promised
    and not sent."""
    from kubernetes_asyncio import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # never called
    controller = Controller(api, ControllerConfig(leader_election=False, planning="loop"))

    def start_release(decision: Any, now: float) -> None:  # what _start_release does before the API
        controller.state.promise(decision.gang_key, dict(decision.placement),
                                 now + controller.config.bind_timeout_seconds, cards=cards_of(decision.annotations))

    controller._start_release = start_release
    controller._replace([NodeInfo.from_node(n) for n in nodes], [PodInfo.from_pod(p) for p in pods])
    parts.wrap(controller.lifecycle, "handle", "losses+timeouts")
    assert controller.incremental is not None
    parts.wrap(controller.incremental, "decide", "decide")
    original_from_state = ORIGINAL_FROM_STATE
    spent = parts.spent

    def from_state(cls: type, state: Any, **kwargs: Any) -> Any:  # (the signature the planner calls)
        start = time.process_time()
        try:
            return original_from_state(cls, state, **kwargs)
        finally:
            spent["  Capacity.from_state"] += time.process_time() - start

    capacity_module.Capacity.from_state = classmethod(from_state)  # type: ignore[method-assign]  # timed for the run
    parts.wrap(offloop, "next_due", "next-due timers")
    parts.wrap(controller, "_start_release", "releases (promises)")
    if controller.preemptor is not None:
        parts.wrap(controller.preemptor, "round", "preemption search")

        async def carry_out(plan: Any, now: float) -> None:  # not carried out: searched again next round
            controller.preemptor.in_flight = None

        controller.preemptor._run = carry_out
    parts.wrap(controller, "_report_waiting", "waiting-gang report")
    parts.wrap(controller.bind_timeouts, "handle_expired", "expired promises")
    parts.wrap(controller, "_report_bypassed", "bypass report")
    parts.wrap(controller, "_update_gauges", "gauges")
    return controller


ORIGINAL_FROM_STATE = capacity_module.Capacity.from_state.__func__  # (unwrapped once: a bench makes two controllers)


def settings(controller: Controller) -> dict[str, Any]:
    """The controller's own round settings, which the baselines are given: the incremental rounds
    refuse others (core.incremental), and a full decide() with others would decide otherwise."""
    plan = controller._plan_settings()
    return {k: plan[k] for k in ("starvation_seconds", "blind_seconds", "card_policy", "whole_gpu_policy")}


def arrive(controller: Controller, name: str, priority: int, pods: int = 4, gpus: int = 1) -> None:
    for j in range(pods):
        controller._on_pod_event("ADDED", make_pod(f"{name}-{j}", namespace="arrivals", gang=name, pod_num=pods,
                                                   gpus=gpus, cpu="4", memory="32Gi", created="2024-01-01T01:00:00Z",
                                                   priority=priority))


def finish(controller: Controller, pod: dict) -> None:
    """A running pod's watch event: it succeeded (its node's room is free again)."""
    controller._on_pod_event("MODIFIED", {**copy.deepcopy(pod), "status": {"phase": "Succeeded"}})


def cpu_ms(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def main(argv: list[str] | None = None) -> None:
    asyncio.run(_main(argv))  # the controller's client and queues want a running loop


async def _main(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=100, waiting_pods=300, repeat=1))
    parser.add_argument("--nodes", type=int, default=20000, help="nodes of 8 GPUs (default 20000)")
    parser.add_argument("--waiting-pods", type=int, default=100000, help="gated gang pods (default 100000)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds timed per scenario (default 5)")
    parser.add_argument("--verbose", action="store_true", help="print the new gang's Waiting")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the cluster (default 7)")
    args = parser.parse_args(argv)
    if min(args.nodes, args.waiting_pods, args.repeat) < 1:
        parser.error("--nodes, --waiting-pods and --repeat must be at least 1")
    logging.basicConfig(level=logging.ERROR)
    for backlog, now in BACKLOGS.items():
        print(f"== backlog: {backlog}")
        await run_backlog(args, now)
        gc.unfreeze()
        gc.collect()


async def run_backlog(args: argparse.Namespace, NOW: float) -> None:  # the bench's clock
    """Every scenario on one backlog: the rounds run at NOW."""
    nodes, pods = build(args.seed, args.nodes, args.waiting_pods)
    parts = Parts()
    controller = make_controller(nodes, pods, parts)
    gc.collect()
    gc.freeze()  # as the controller does after a relist
    first = cpu_ms(lambda: controller.round(NOW))
    state = controller.state
    released = len(state.promises)
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    for key, promise in list(state.promises.items()):  # the watch: each released pod bound and running
        pod = copy.deepcopy(by_key[key])
        pod["spec"]["schedulingGates"] = []
        pod["spec"]["nodeName"] = promise.node
        pod["status"]["phase"] = "Running"
        decision = {"id": "bench", "time": "2024-01-01T00:05:00Z", "node": promise.node, "pods": 1}
        pod["metadata"]["annotations"][DECISION_ANNOTATION] = json.dumps(decision)  # as a release writes
        job = pod["metadata"]["annotations"][GROUP_NAME]  # owned by a Job: a gang preemption may evict it
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                               "uid": f"uid-{job}", "controller": True}]
        controller._on_pod_event("MODIFIED", pod)
    running = [p for p in pods if p["metadata"]["namespace"] == "busy"]
    del nodes, pods, by_key
    settle = cpu_ms(lambda: controller.round(NOW))  # the round after the first's releases are bound
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          "(figures are noisy on a shared machine; CPU time less so)")
    print(f"cluster: {args.nodes} nodes x 8 GPUs, {len(state.pods)} pods in {len(state.gangs)} gangs, "
          f"{released} released by the first round and bound; first round {first:.0f} ms CPU, "
          f"the next {settle:.0f} ms CPU")
    scenarios: dict[str, Callable[[int], None]] = {
        "one gang arrives (priority 0)": lambda i: arrive(controller, f"new{i}", 0),
        "nothing changed (idle round)": lambda i: None,
        "one running pod finishes": lambda i: finish(controller, running[i]),
        "one gang arrives, preempting": lambda i: arrive(controller, f"hi{i}", 1000, pods=8, gpus=8),
    }
    own = settings(controller)
    header = f"{'part (median ms CPU)':24s}" + "".join(f"{name[:31]:>33s}" for name in scenarios)
    columns: dict[str, dict[str, float]] = {}
    baselines: dict[str, tuple[float, float]] = {}
    for name, event in scenarios.items():
        runs: list[dict[str, float]] = []
        planned = 0
        alone: list[float] = []
        for i in range(args.repeat):
            event(i)
            if i == args.repeat - 1:  # the full round on the state the last round is about to plan
                full = cpu_ms(lambda: decide(state, NOW, **own))
            if args.verbose:
                waiting = controller.incremental.decide(state, NOW, **settings(controller))[1]
                print(name, [w for w in waiting if w.gang_key[0] == "arrivals"][-1:])
            parts.spent.clear()
            wall = time.perf_counter()
            whole = cpu_ms(lambda: controller.round(NOW))
            wall = (time.perf_counter() - wall) * 1000
            searched = controller.preemptor is not None and controller.preemptor.in_flight is not None
            if searched:
                planned += 1
                controller.preemptor.in_flight = None
            runs.append({"whole round": whole, "whole round (wall)": wall, **{k: v * 1000 for k, v in parts.spent.items()}})
            # The baselines plan with the controller's own settings (the incremental rounds would
            # refuse others: planned, they would turn the controller's next round into a full one).
            alone.append(cpu_ms(lambda: controller.incremental.decide(state, NOW, **own)))  # nothing changed since
        columns[name] = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in ROWS}
        baselines[name] = (statistics.median(alone), full)
        if planned:
            print(f"{name}: a preemption was planned in {planned} of {args.repeat} rounds")
    print(header)
    for part in ROWS:
        print(f"{part:24s}" + "".join(f"{columns[name][part]:>33.2f}" for name in scenarios))
    print(f"{'baseline: decide again':24s}" + "".join(f"{baselines[name][0]:>33.2f}" for name in scenarios))
    print(f"{'baseline: full decide()':24s}" + "".join(f"{baselines[name][1]:>33.1f}" for name in scenarios))
    await controller.api_client.close()


if __name__ == "__main__":
    main()
