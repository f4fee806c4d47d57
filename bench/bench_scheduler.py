"""Benchmark kubesim's default scheduler: pure decision rate and pods bound per second over HTTP.

    .venv/bin/python bench/bench_scheduler.py [--nodes 1000] [--pods 5000]

1. In-process: the scheduling cycle alone (filter + score + select + assume) on `--nodes`
   nodes of 8 GPUs, for `--pods` one-GPU pods, with and without computing each pod's request.
2. End to end: a Simulator (API server on loopback, kubelet off) with the same nodes and pods
   created pending beforehand; a Scheduler is then started and timed from its start until it
   has bound every pod through the binding subresource (list, watch, cycles, binds; the API
   server shares the process and the event loop, as in the tests and the demo).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiohttp

from ganggate.sim.helpers.podrequests import scheduling_requests
from ganggate.sim.scheduler.cache import ClusterCache
from ganggate.sim.scheduler.schedule_one import Algorithm

GPU = "nvidia.com/gpu"


def make_node(name: str, gpus: int) -> dict:
    """A ready node with allocatable == capacity (64 cpu, 512Gi, 110 pods, `gpus` GPUs)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources),
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def make_pod(name: str, gpus: int, cpu: str, memory: str, node_selector: dict | None = None) -> dict:
    """A pending pod of one container; the GPU given as a limit only, as users write it."""
    spec: dict = {"containers": [{"name": "main", "image": "busybox", "resources": {
        "requests": {"cpu": cpu, "memory": memory}, "limits": {GPU: str(gpus)}}}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def pure(nodes: int, pods: int, pinned: bool = False) -> tuple[float, float, int]:
    """(decisions/s without request parsing, with it, pods placed).

    `pinned`: each pod carries a kubernetes.io/hostname nodeSelector, as ganggate's pinned
    placement releases them (one distinct node-level filter signature per node).
    """
    cache = ClusterCache()
    for i in range(nodes):
        cache.set_node(make_node(f"node-{i}", gpus=8))
    algorithm = Algorithm(cache, seed=0)
    manifests = [
        make_pod(f"p{i}", gpus=1, cpu="1", memory="4Gi",
                 node_selector={"kubernetes.io/hostname": f"node-{i % nodes}"} if pinned else None)
        for i in range(pods)
    ]
    start = time.perf_counter()
    requests = [scheduling_requests(p) for p in manifests]
    parsed = time.perf_counter() - start
    placed = 0
    start = time.perf_counter()
    for i, pod in enumerate(manifests):
        request, nonzero = requests[i]
        decision = algorithm.schedule(pod, request, nonzero)
        if decision.node is not None:
            algorithm.assume(f"default/p{i}", decision.node, request, nonzero)
            placed += 1
    decided = time.perf_counter() - start
    return pods / decided, pods / (decided + parsed), placed


async def end_to_end(nodes: int, pods: int) -> tuple[float, float, int]:
    """(pods bound/s, seconds, pods seen bound in a final list)."""
    from ganggate.sim import Simulator
    from ganggate.sim.scheduler.scheduler import Scheduler

    async with Simulator(nodes=nodes, gpus_per_node=8, scheduler=False, kubelet=False) as sim:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
            url = f"{sim.url}/api/v1/namespaces/default/pods"
            semaphore = asyncio.Semaphore(32)

            async def create(i: int) -> None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{i}", "namespace": "default"},
                    "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]},
                }
                async with semaphore:
                    async with session.post(url, json=body) as response:
                        assert response.status == 201, await response.text()

            await asyncio.gather(*(create(i) for i in range(pods)))
            scheduler = Scheduler(sim.url)
            start = time.perf_counter()
            task = asyncio.create_task(scheduler.run())
            deadline = start + 600
            while scheduler.scheduled < pods and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - start
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            async with session.get(url) as response:
                items = (await response.json())["items"]
            bound = sum(1 for item in items if item["spec"].get("nodeName"))
    return scheduler.scheduled / elapsed, elapsed, bound


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=5, pods=20))
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    args = parser.parse_args()
    print(f"kubesim scheduler: {args.nodes} nodes x 8 GPUs, {args.pods} pending pods of 1 GPU / 1 CPU / 4Gi")
    rate, rate_parsed, placed = pure(args.nodes, args.pods)
    print(f"in-process decisions: {rate:,.0f} pods/s (cycle only), {rate_parsed:,.0f} pods/s "
          f"(including each pod's request computation); {placed} placed")
    pinned_rate, _, pinned_placed = pure(args.nodes, args.pods, pinned=True)
    print(f"in-process decisions, pods pinned by hostname nodeSelector: {pinned_rate:,.0f} pods/s; "
          f"{pinned_placed} placed")
    placed = min(placed, pinned_placed)
    bound_rate, elapsed, bound = asyncio.run(end_to_end(args.nodes, args.pods))
    print(f"end to end over HTTP: {bound_rate:,.0f} pods bound/s ({bound} of {args.pods} bound in {elapsed:.2f} s)")
    return 0 if bound == args.pods and placed == args.pods else 1


if __name__ == "__main__":
    sys.exit(main())
