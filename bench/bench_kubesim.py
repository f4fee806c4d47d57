"""Benchmark kubesim's API server at scale: 5,000 nodes and 50,000 pods.

Loads the objects in-process through the API server's create pipeline (defaulting, validation,
store), then over real HTTP on loopback measures
  1. a list of all 50,000 pods, with raw aiohttp and with kubernetes-asyncio
     (`_preload_content=False`), body read and parsed as JSON;
  2. watch fan-out: 10 watchers on pods, N pod updates, time until every watcher has seen all N
     events (events/s delivered).
Prints the figures. Run: .venv/bin/python bench/bench_kubesim.py [--nodes 5000 --pods 50000 --writes 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from kubernetes_asyncio import client

from ganggate.sim import Simulator
from ganggate.sim.apiserver.discovery import by_key
from ganggate.sim.apiserver.requests import Target


def pod(index: int, namespace: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"pod-{index:05d}", "namespace": namespace,
                     "labels": {"app": "trainer", "gang": f"g{index // 8}"},
                     "annotations": {"scheduling.k8s.io/group-name": f"g{index // 8}",
                                     "scheduling.k8s.io/group-pod-num": "8"}},
        "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                 "resources": {"limits": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"}}}],
                 "schedulingGates": [{"name": "scheduling.k8s.io/group-gate"}]},
    }


async def load(sim: Simulator, nodes: int, pods: int) -> tuple[float, float]:
    started = time.perf_counter()
    for index in range(nodes):
        await sim.add_node(f"node-{index:04d}", gpus=8)
    node_seconds = time.perf_counter() - started
    target = Target(by_key("pods"), "default", None, None)
    started = time.perf_counter()
    for index in range(pods):
        await sim.server.create_object(target, pod(index, "default"))
    return node_seconds, time.perf_counter() - started


async def list_client(url: str, repeats: int, expected: int) -> dict[str, list[float]]:
    """Seconds to receive the whole body, and to receive and parse it, per client.

    Runs in its own process (see `time_lists`), as a controller would, so that the client's
    parsing does not share a heap and a garbage collector with the server's 50,000 pods.
    """
    results: dict[str, list[float]] = {}
    configuration = client.Configuration(host=url)
    async with aiohttp.ClientSession() as session:
        for _ in range(repeats):
            started = time.perf_counter()
            async with session.get(f"{url}/api/v1/pods") as response:
                raw = await response.read()
            received = time.perf_counter()
            body = json.loads(raw)
            results.setdefault("raw aiohttp: received", []).append(received - started)
            results.setdefault("raw aiohttp: received + json.loads", []).append(time.perf_counter() - started)
            assert len(body["items"]) == expected
            del body, raw
    async with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        for _ in range(repeats):
            started = time.perf_counter()
            response = await core.list_pod_for_all_namespaces(_preload_content=False)
            raw = await response.read()
            response.release()
            received = time.perf_counter()
            body = json.loads(raw)
            results.setdefault("kubernetes-asyncio (_preload_content=False): received", []).append(received - started)
            results.setdefault("kubernetes-asyncio (_preload_content=False): received + json.loads", []).append(
                time.perf_counter() - started)
            assert len(body["items"]) == expected
            del body, raw
    return results


async def time_lists(sim: Simulator, repeats: int) -> dict[str, list[float]]:
    """Run `list_client` in a separate Python process against the simulator."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--list-client", sim.url, "--repeats", str(repeats),
        "--pods", str(sim.store.count("pods")), stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError("the list client failed")
    return json.loads(out)


async def fan_out(sim: Simulator, watchers: int, writes: int, pipeline: bool) -> tuple[float, float]:
    """Seconds until every watcher saw all `writes` updates, and seconds the writes took.

    pipeline=True writes through the API server's update pipeline (defaulting, validation);
    pipeline=False straight into the store, so the figure is the fan-out alone.
    """
    start_rv = sim.store.resource_version
    seen = [0] * watchers
    done = asyncio.Event()
    ready = [asyncio.Event() for _ in range(watchers)]

    async def watch(index: int, session: aiohttp.ClientSession) -> None:
        url = f"{sim.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion={sim.store.resource_version}"
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
            ready[index].set()
            while seen[index] < writes:
                line = await response.content.readline()
                if not line:
                    raise RuntimeError("watch ended early")
                seen[index] += 1
        if all(count >= writes for count in seen):
            done.set()

    connector = aiohttp.TCPConnector(limit=watchers + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(watch(i, session)) for i in range(watchers)]
        await asyncio.gather(*(event.wait() for event in ready))
        await asyncio.sleep(0.2)  # every watcher is registered before the first write
        def target_of(name):
            return Target(by_key("pods"), "default", name, None)
        started = time.perf_counter()
        for index in range(writes):
            name = f"pod-{index % sim.store.count('pods'):05d}"
            current = json.loads(sim.store.lookup("pods", "default", name).raw)
            current["metadata"]["labels"]["round"] = f"{int(pipeline)}-{index}"
            if pipeline:
                await sim.server.update_object(target_of(name), current)
            else:
                sim.store.update("pods", current)
            if index % 500 == 0:
                await asyncio.sleep(0)  # let the watchers drain as a busy server would
        write_seconds = time.perf_counter() - started
        await asyncio.wait_for(done.wait(), 300)
        elapsed = time.perf_counter() - started
        await asyncio.gather(*tasks)
    assert sim.store.resource_version == start_rv + writes
    return elapsed, write_seconds


async def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(nodes=5, pods=40, writes=20, watchers=2, repeats=1))
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--writes", type=int, default=5000)
    parser.add_argument("--watchers", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--list-client", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list_client:
        print(json.dumps(await list_client(args.list_client, args.repeats, args.pods)))
        return
    async with Simulator(nodes=0, scheduler=False, kubelet=False, controllers=False,
                         watch_history=max(10000, args.writes)) as sim:
        node_seconds, pod_seconds = await load(sim, args.nodes, args.pods)
        print(f"load (in-process create pipeline): {args.nodes} nodes in {node_seconds:.1f} s, "
              f"{args.pods} pods in {pod_seconds:.1f} s ({args.pods / pod_seconds:,.0f} pods/s)")
        lists = await time_lists(sim, args.repeats)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{sim.url}/api/v1/pods") as response:
                size = len(await response.read())
        print(f"list of {args.pods} pods over HTTP ({size / 2**20:.1f} MiB), median of {args.repeats} "
              f"(first, cold serialization cache, in brackets):")
        for name, times in lists.items():
            print(f"  {name:70s} {statistics.median(times):6.3f} s  [{times[0]:.3f} s]")
        delivered = args.watchers * args.writes
        for pipeline, how in ((False, "written to the store"), (True, "through the API update pipeline")):
            elapsed, write_seconds = await fan_out(sim, args.watchers, args.writes, pipeline)
            print(f"watch fan-out, {args.writes} pod updates {how}, {args.watchers} watchers over HTTP: all seen "
                  f"{elapsed:.2f} s after the first write (writes took {write_seconds:.2f} s); "
                  f"{delivered / elapsed:,.0f} events/s delivered")


if __name__ == "__main__":
    asyncio.run(main())
