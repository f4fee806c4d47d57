"""The longest event-loop stall of a busy gate controller, with its rounds planned on the event
loop (`--planning=loop`, the old path) and off it (`--planning=thread`, the default).

A Controller holds a synthetic cluster (bench_decide.build: by default 20,000 nodes of 8 GPUs,
40% partly used, and 20,000 waiting gated pods in gangs of 1-64) and runs back-to-back rounds,
as a controller does under a steady stream of changes, while two tasks share its event loop:
a feeder that delivers pod watch events (200 a second, as an informer would) and a ticker that
sleeps 1 ms at a time and records how late it wakes (the stall: how long anything else on the
loop, a watch read, a lease renewal, a metrics scrape, would have waited). No API server is
involved: releases are not sent (the decisions are the same every round), so the figure is the
planning and the round's own work on the loop. A first run without rounds (`idle`) gives the
stall the machine and the feeder cause alone. Prints the longest and the 99th-percentile
stall, the round time, and the load average beside them (the machine may be shared).

    .venv/bin/python bench/bench_loop_stall.py [--nodes 20000] [--waiting-pods 20000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_decide import build  # noqa: E402
from ganggate.controller.loop import Controller, ControllerConfig  # noqa: E402
from ganggate.core.state.cluster import NodeInfo, PodInfo  # noqa: E402
from ganggate.core.state.snapshot import make_pod  # noqa: E402

TICK = 0.001
FEED_PER_SECOND = 200


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def measure(nodes: list[dict], pods: list[dict], planning: str, seconds: float) -> dict[str, float]:
    """Rounds back to back for `seconds` with the feeder and the ticker; the stall figures."""
    from kubernetes_asyncio import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # never called
    controller = Controller(api, ControllerConfig(leader_election=False, planning="loop" if planning == "idle" else planning, preemption="off",
                                                  protect_running_gangs=False))
    controller._start_release = lambda decision, now: None  # no API: decide the same each round
    controller._replace([NodeInfo.from_node(n) for n in nodes], [PodInfo.from_pod(p) for p in pods])  # as relists do
    stalls: list[float] = []
    rounds: list[float] = []
    running = True

    async def ticker() -> None:
        while running:
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            stalls.append(time.perf_counter() - before - TICK)

    async def feeder() -> None:
        i = 0
        while running:
            # A pod of a running gang changes (a status update): what an informer delivers.
            controller._on_pod_event("MODIFIED", make_pod(f"run-{i % 1000}", namespace="busy", gpus=1, cpu="8",
                                                          node_name=f"node-{i % len(nodes):05d}", phase="Running"))
            i += 1
            await asyncio.sleep(1 / FEED_PER_SECOND)

    tasks = [asyncio.create_task(ticker()), asyncio.create_task(feeder())]
    await asyncio.sleep(0.2)
    stalls.clear()
    deadline = time.perf_counter() + seconds
    now = time.time()
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        if planning == "idle":  # no rounds: the stall the machine and the feeder cause alone
            await asyncio.sleep(0.05)
            continue
        if planning == "thread":
            await controller.round_off_loop(now)
        else:
            controller.round(now)
        rounds.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)  # a pause between rounds, as the loop's debounce gives
    running = False
    await asyncio.gather(*tasks)
    await api.close()
    ordered = sorted(stalls)
    return {"max": ordered[-1], "p99": ordered[int(0.99 * (len(ordered) - 1))], "rounds": len(rounds),
            "round": statistics.median(rounds) if rounds else float("nan"), "held": controller._changes.held_total}


async def main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    nodes, pods = build(node_count=args.nodes, waiting_pods=args.waiting_pods)
    print(f"{args.nodes} nodes, {len(pods)} pods ({args.waiting_pods} waiting, gated), built in "
          f"{time.perf_counter() - started:.1f} s; load average {load()}", flush=True)
    print(f"{'planning':>9} {'rounds':>7} {'round (median)':>15} {'stall: longest':>15} {'p99':>8} {'held changes':>13}")
    for planning in args.planning:
        result = await measure(nodes, pods, planning, args.seconds)
        print(f"{planning:>9} {result['rounds']:>7} {result['round'] * 1000:>12.0f} ms {result['max'] * 1000:>12.1f} ms "
              f"{result['p99'] * 1000:>5.1f} ms {result['held']:>13}", flush=True)
    print(f"load average {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20000, help="nodes of 8 GPUs (default 20000)")
    parser.add_argument("--waiting-pods", type=int, default=20000, help="waiting gated pods (default 20000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each mode runs (default 10)")
    parser.add_argument("--planning", nargs="+", default=["idle", "loop", "thread"], choices=["idle", "loop", "thread"],
                        help="idle: no rounds (the machine's own noise); loop: decide() on the event loop (the "
                        "old path); thread: in a worker thread (default: all three)")
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(parser.parse_args()))
