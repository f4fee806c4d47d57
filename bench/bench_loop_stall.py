"""The longest event-loop stall of a busy gate controller, with its rounds planned on the event
loop (`--planning=loop`, the old path) and off it (`--planning=thread`, the default).

The controller runs with its defaults: preemption on (a plan is made, its evictions are not
sent), a PodDisruptionBudget per released gang (the API's answers come at once, and the budgets
back over their watch), and releases carried out (promised, then their pods come back over the
watch bound and running, one event per loop step), so the cluster fills up as it would.
Beside the 99th percentile per tick (a 60 ms stall is one sample, 60 ms of free loop about 60)
it prints the percentile weighted by time, as a watch event arriving at a random instant meets
it, and the share of wall time spent in stalls over 20 ms.

A Controller holds a synthetic cluster (bench_decide.build: by default 20,000 nodes of 8 GPUs,
40% partly used, and 20,000 waiting gated pods in gangs of 1-64) and runs back-to-back rounds,
as a controller does under a steady stream of changes, while two tasks share its event loop:
a feeder that delivers pod watch events (200 a second, as an informer would) and a ticker that
sleeps 1 ms at a time and records how late it wakes (the stall: how long anything else on the
loop, a watch read, a lease renewal, a metrics scrape, would have waited). No API server is
involved, so the figure is the planning and the round's own work on the loop. A first run without rounds (`idle`) gives the
stall the machine and the feeder cause alone; two last runs have every round follow a relist of
all the pods, as after a 410 Gone: the controller's own pod informer lists them (its `list`, page
by page of 500: each page's JSON bytes parsed and read into PodInfo, the API's answer an await;
the bytes are made beforehand, so no API server is involved), then the controller's picture is
rebuilt: `relist` rebuilds it in
a worker thread (the default, with --planning=thread), `relist-loop` on the loop (the old path). Prints
the longest and the 99th-percentile stall, the round time, and the load average beside them
(the machine may be shared). The controller's garbage collection is its own
(controller/round/collector.py: no full collection of the collector's own accord, the picture frozen
after lists, what survived frozen after rounds, everything collected once an hour, which each
run ends with, timed); `--collector on off` runs each mode twice, the second as before the
collector ('nosettle': CPython's thresholds, frozen after lists alone), a baseline in the same run.

    .venv/bin/python bench/bench_loop_stall.py [--nodes 20000] [--waiting-pods 100000] [--seconds 10]
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_decide import build
from ganggate.contract import DECISION_ANNOTATION, GROUP_NAME
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.controller.round.offloop import share_the_gil
from ganggate.core.state.cluster import NodeInfo, PodInfo
from ganggate.core.state.snapshot import make_pod

TICK = 0.001
FEED_PER_SECOND = 200


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class _Page:
    """A list response as kubernetes-asyncio hands it over with _preload_content=False."""

    status, reason, headers = 200, "OK", {}

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass


def pages_of(pods: list[dict], page: int = 500) -> list[bytes]:
    """The PodList pages an API server would answer a paged list with, as JSON bytes."""
    out = []
    for number, start in enumerate(range(0, len(pods), page)):
        more = start + page < len(pods)
        meta = {"resourceVersion": "1", **({"continue": str(number + 1)} if more else {})}
        out.append(json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                               "items": pods[start:start + page]}).encode())
    return out


async def relist(controller: Controller, pages: list[bytes]) -> None:
    """What the controller's pod informer does after a 410 (controller/round/informer.py list): each
    page parsed and read into PodInfo as it arrives, then the whole list handed to the controller,
    which rebuilds its picture with it (off the loop with --planning=thread)."""
    async def list_pods(*, limit: int, _continue: str | None = None, **_: object) -> _Page:
        await asyncio.sleep(0)  # where the API's answer would come
        return _Page(pages[int(_continue or 0)])

    controller.pods.list_fn = list_pods
    await controller.pods.list()
    await asyncio.sleep(0)


async def measure(nodes: list[dict], pods: list[dict], planning: str, seconds: float,
                  pages: list[bytes] | None = None, settle: bool = True) -> dict[str, float]:
    """Rounds back to back for `seconds` with the feeder and the ticker; the stall figures.
    `settle`: the controller's Collector.settle after rounds (False: the picture frozen after
    lists alone, as before it, for a baseline)."""
    from kubernetes_asyncio import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # never called
    mode = {"idle": "loop", "relist": "thread", "relist-loop": "loop"}.get(planning, planning)
    # The defaults: preemption on, a budget per released gang, releases carried out.
    controller = Controller(api, ControllerConfig(leader_election=False, planning=mode))
    assert controller.preemptor is not None and controller.lifecycle.protection is not None
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    to_bind: list[tuple[str, str]] = []  # (pod, node) released, their watch events still to come
    real_start_release = controller._start_release

    def start_release(decision: Any, now: float) -> None:
        """The release as the controller makes it (its promise), the API's part answered at once:
        its pods come back over the watch bound and running (the binder task)."""
        controller.state.promise(decision.gang_key, dict(decision.placement),
                                 now + controller.config.bind_timeout_seconds)
        to_bind.extend(decision.placement.items())

    assert real_start_release is not None
    controller._start_release = start_release
    protection = controller.lifecycle.protection
    protection.informer.synced = True  # no budget listed yet; created ones come back over the watch

    async def create_budget(body: dict) -> None:  # the API's answer, then the watch event
        await asyncio.sleep(0)
        protection.informer.store[f"{body['metadata']['namespace']}/{body['metadata']['name']}"] = body
        protection._on_event("ADDED", body)

    async def delete_budget(namespace: str, name: str) -> None:
        await asyncio.sleep(0)
        protection.informer.store.pop(f"{namespace}/{name}", None)

    protection._create, protection._delete = create_budget, delete_budget
    controller.preemptor._run = carry_out_nothing(controller)  # a plan is made, its evictions not sent
    if settle:
        controller.collector.start()  # as Controller.run does: no full collection of the collector's own accord
    else:
        controller.collector.settle = lambda: None  # type: ignore[method-assign]  # the baseline run: no settles (CPython's own collections)
        controller.collector.churned = lambda: None  # type: ignore[method-assign]  # nor freezes after events
    gc.unfreeze()  # (each run from the same start: the last run's objects may be collected)
    gc.collect()
    if mode == "thread":
        share_the_gil()  # as Controller.run does when it plans off the loop
    controller._replace([NodeInfo.from_node(n) for n in nodes], [PodInfo.from_pod(p) for p in pods])  # as relists do
    stalls: list[float] = []
    held: list[float] = []  # the loop thread's own CPU time in each tick's wait: work on the loop
    rounds: list[float] = []
    running = True

    async def ticker() -> None:
        while running:
            before, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(TICK)
            stalls.append(time.perf_counter() - before - TICK)
            held.append(time.thread_time() - cpu)

    async def feeder() -> None:
        i = 0
        while running:
            # A pod of a running gang changes (a status update): what an informer delivers.
            controller._on_pod_event("MODIFIED", make_pod(f"run-{i % 1000}", namespace="busy", gpus=1, cpu="8",
                                                          node_name=f"node-{i % len(nodes):05d}", phase="Running"))
            i += 1
            await asyncio.sleep(1 / FEED_PER_SECOND)

    async def binder() -> None:
        """The watch events of released pods, bound and running, one per loop step as an
        informer reads them off its stream."""
        while running:
            if not to_bind:
                await asyncio.sleep(0.01)
                continue
            key, node = to_bind.pop(0)
            if key in by_key:
                controller._on_pod_event("MODIFIED", bound_pod(by_key[key], node))
            await asyncio.sleep(0)

    full_collections: list[float] = []  # how long each generation-2 collection held the GIL
    collecting: list[float] = []

    def timed_gc(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            collecting[:] = [time.perf_counter()]
        elif collecting:
            full_collections.append(time.perf_counter() - collecting.pop())

    gc.callbacks.append(timed_gc)
    tasks = [asyncio.create_task(ticker()), asyncio.create_task(feeder()), asyncio.create_task(binder())]
    await asyncio.sleep(0.2)
    stalls.clear()
    held.clear()
    deadline = time.perf_counter() + seconds
    now = time.time()
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        if planning.startswith("relist"):  # a 410: the pods listed again, page by page, while rounds go on
            assert pages is not None
            await relist(controller, pages)
            rounds.append(time.perf_counter() - started)
            if planning == "relist":
                await controller.round_off_loop(now)
            else:
                controller.round(now)
            continue
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
    gc.callbacks.remove(timed_gc)
    controller.collector.stop()
    await asyncio.gather(*tasks)
    await api.close()
    # The collector's hourly full collection (everything unfrozen, collected, frozen again), timed
    # here once, the ticker stopped: how long it holds the GIL, and the garbage cycles it frees.
    hourly = time.perf_counter()
    gc.unfreeze()
    cycles = gc.collect()
    gc.freeze()
    hourly = time.perf_counter() - hourly
    ordered, on_loop = sorted(stalls), sorted(held)
    weighted_p99, over = time_weighted(stalls)
    return {"max": ordered[-1], "p99": ordered[int(0.99 * (len(ordered) - 1))], "rounds": len(rounds),
            "weighted p99": weighted_p99, "over 20 ms": over,
            "loop max": on_loop[-1], "loop p99": on_loop[int(0.99 * (len(on_loop) - 1))],
            "round": statistics.median(rounds) if rounds else float("nan"), "held": controller._changes.held_total,
            "gc": max(full_collections, default=0.0), "gcs": len(full_collections), "hourly": hourly,
            "cycles": cycles}


def time_weighted(stalls: list[float], limit: float = 0.020) -> tuple[float, float]:
    """The stall as a watch event arriving at a random instant meets it: each tick weighted by
    the wall time it lasted (TICK + its stall), the 99th percentile of those stalls; and the
    share of wall time spent in ticks that stalled more than `limit`."""
    spans = sorted((s, TICK + s) for s in stalls)
    total = sum(span for _, span in spans)
    seen, p99 = 0.0, spans[-1][0]
    for stall, span in spans:
        seen += span
        if seen >= 0.99 * total:
            p99 = stall
            break
    return p99, sum(span for s, span in spans if s > limit) / total


def bound_pod(pod: dict, node: str) -> dict:
    """A released pod as its watch event brings it back: no gate, bound, running, with the
    decision annotation a release writes, owned by a Job (a gang preemption may evict it)."""
    out = copy.deepcopy(pod)
    out["spec"]["schedulingGates"] = []
    out["spec"]["nodeName"] = node
    out["status"]["phase"] = "Running"
    annotations = out["metadata"]["annotations"]
    annotations[DECISION_ANNOTATION] = json.dumps({"id": "bench", "time": "2024-01-01T00:05:00Z", "node": node,
                                                   "pods": 1})
    job = annotations[GROUP_NAME]
    out["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                           "uid": f"uid-{job}", "controller": True}]
    return out


def carry_out_nothing(controller: Controller) -> Any:
    async def carry_out(plan: Any, now: float) -> None:  # not carried out: searched again next round
        controller.preemptor.in_flight = None
    return carry_out


async def main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    nodes, pods = build(node_count=args.nodes, waiting_pods=args.waiting_pods)
    print(f"{args.nodes} nodes, {len(pods)} pods ({args.waiting_pods} waiting, gated), built in "
          f"{time.perf_counter() - started:.1f} s; load average {load()}", flush=True)
    print("defaults: preemption on (its plans not carried out), a budget per released gang (the API's answers at "
          "once), releases promised and their pods back over the watch bound and running")
    print(f"{'planning':>16} {'rounds':>7} {'round (median)':>15} {'stall: longest':>15} {'p99/tick':>9} "
          f"{'p99/time':>9} {'time >20ms':>10} {'loop CPU: longest':>18} {'p99':>8} {'held changes':>13}")
    pages = pages_of(pods) if any(p.startswith("relist") for p in args.planning) else None
    for planning, settle in [(p, c == "on") for p in args.planning for c in args.collector]:
        result = await measure(nodes, pods, planning, args.seconds, pages, settle)
        label = planning if args.collector == ["on"] else f"{planning}{'' if settle else ' nosettle'}"
        print(f"{label:>16} {result['rounds']:>7} {result['round'] * 1000:>12.0f} ms {result['max'] * 1000:>12.1f} ms "
              f"{result['p99'] * 1000:>6.1f} ms {result['weighted p99'] * 1000:>6.1f} ms {result['over 20 ms']:>10.2%} "
              f"{result['loop max'] * 1000:>15.1f} ms {result['loop p99'] * 1000:>5.1f} ms "
              f"{result['held']:>13} {result['gc'] * 1000:>12.1f} ms ({result['gcs']}) "
              f"{result['hourly'] * 1000:>17.0f} ms ({result['cycles']})", flush=True)
    print(f"load average {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=50, waiting_pods=100, seconds=0.3, planning=["loop", "thread"]))
    parser.add_argument("--nodes", type=int, default=20000, help="nodes of 8 GPUs (default 20000)")
    parser.add_argument("--waiting-pods", type=int, default=100000, help="waiting gated pods (default 100000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each mode runs (default 10)")
    parser.add_argument("--planning", nargs="+", default=["idle", "loop", "thread", "relist-loop", "relist"],
                        choices=["idle", "loop", "thread", "relist-loop", "relist"],
                        help="idle: no rounds (the machine's own noise); loop: decide() on the event loop (the "
                        "old path); thread: in a worker thread; relist: rounds in a worker thread, each after a "
                        "relist of every pod (a 410), the relist's time in the 'round' column, its picture rebuilt in a worker "
                        "thread; relist-loop: the same on the event loop, rounds too (the old path) (default: all five)")
    parser.add_argument("--collector", nargs="+", default=["on"], choices=["on", "off"],
                        help="on: the controller's Collector settles after rounds (the default); off: as before it, "
                        "the picture frozen after lists alone ('nosettle'); both: each planning run twice, a baseline "
                        "in the same run (default: on)")
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(parser.parse_args()))
