"""How fast kubesim's scheduler gives room back, on 2 nodes x 8 GPUs: the three queue behaviours
of kube-scheduler 1.35 that decide a gang's race against ordinary pods, timed with the default
gates and with a 1.30 kube-scheduler's (--scheduler-emulated-version 1.30), in one run.

- cleared: a 4-GPU pod nominated to node-0 (2 GPUs free) is ungated and fails; an equal-priority
  2-GPU pod created right after it -> bound (its nomination cleared by the failure);
- backoff: a 4-GPU pod that failed 5 times (10 s of backoff) -> bound, after the pod in its way
  is deleted and nothing else is queued (SchedulerPopFromBackoffQ);
- unnominated: a 2-GPU pod kept out by a gated pod's nomination -> bound, after the nomination
  is removed and nothing else happens (the requeue on a nomination change, since 1.33).
A wait stops at --limit seconds ("> limit": the pod was not retried by then).

    .venv/bin/python bench/bench_queue.py            # 5 rounds of each, both gate sets
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from ganggate.sim import Simulator
from ganggate.sim.componentbase.featuregate import parse

MERGE, JSON_PATCH = "application/merge-patch+json", "application/json-patch+json"
PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, gpus: int, *, node: str | None = None, gated: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "scheduling.k8s.io/group-gate"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


class Client:
    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http

    async def create(self, manifest: dict) -> None:
        async with self.http.post(PODS, json=manifest) as response:
            assert response.status == 201, await response.text()

    async def delete(self, name: str) -> None:
        async with self.http.delete(f"{PODS}/{name}", json={"gracePeriodSeconds": 0}) as response:
            assert response.status in (200, 202), await response.text()

    async def patch(self, path: str, body: Any, kind: str) -> None:
        async with self.http.patch(path, json=body, headers={"Content-Type": kind}) as response:
            assert response.status == 200, await response.text()

    async def nominate(self, name: str, node: str | None) -> None:
        await self.patch(f"{PODS}/{name}/status", {"status": {"nominatedNodeName": node}}, MERGE)

    async def get(self, name: str) -> dict:
        async with self.http.get(f"{PODS}/{name}") as response:
            return await response.json()

    async def bound_after(self, name: str, start: float, limit: float) -> float | None:
        """Seconds from `start` until the pod is bound, or None past `limit`."""
        while time.monotonic() - start < limit:
            if (await self.get(name)).get("spec", {}).get("nodeName"):
                return time.monotonic() - start
            await asyncio.sleep(0.01)
        return None

    async def until(self, check, limit: float = 30.0) -> None:
        deadline = time.monotonic() + limit
        while not await check():
            if time.monotonic() > deadline:
                raise RuntimeError("the scenario did not reach its starting point")
            await asyncio.sleep(0.01)


async def cleared(api: Client, scheduler: Any, limit: float) -> float | None:
    await api.create(pod("used", 6, node="node-0"))
    await api.create(pod("full", 8, node="node-1"))
    await api.create(pod("nominated", 4, gated=True))
    await api.nominate("nominated", "node-0")
    await api.until(lambda: _true(scheduler.nominated.get("default/nominated") is not None))
    start = time.monotonic()
    await api.patch(f"{PODS}/nominated", [{"op": "remove", "path": "/spec/schedulingGates"}], JSON_PATCH)
    await api.create(pod("next", 2))
    return await api.bound_after("next", start, limit)


async def backoff(api: Client, scheduler: Any, limit: float) -> float | None:
    await api.create(pod("blocker", 8, node="node-0"))
    await api.create(pod("full", 8, node="node-1"))
    await api.create(pod("waiter", 4))
    key = "default/waiter"
    for attempt in range(1, 6):
        await api.until(lambda attempt=attempt: _true(key in scheduler.queue.unschedulable
                                                      and scheduler.queue.pods[key].attempts >= attempt),
                        limit=30.0)
        if attempt < 5:
            await api.create(pod(f"churn-{attempt}", 0, node="node-0"))
            await api.delete(f"churn-{attempt}")
    start = time.monotonic()
    await api.delete("blocker")
    return await api.bound_after("waiter", start, limit)


async def unnominated(api: Client, scheduler: Any, limit: float) -> float | None:
    await api.create(pod("used", 6, node="node-0"))
    await api.create(pod("full", 8, node="node-1"))
    await api.create(pod("holder", 2, gated=True))
    await api.nominate("holder", "node-0")
    await api.until(lambda: _true(scheduler.nominated.get("default/holder") is not None))
    await api.create(pod("small", 2))
    await api.until(lambda: _true("default/small" in scheduler.queue.unschedulable))
    start = time.monotonic()
    await api.nominate("holder", None)
    return await api.bound_after("small", start, limit)


async def _true(value: bool) -> bool:
    return value


SCENARIOS = {"cleared": cleared, "backoff": backoff, "unnominated": unnominated}


async def measure(name: str, version: str, rounds: int, limit: float) -> list[float | None]:
    out = []
    for _ in range(rounds):
        async with Simulator(nodes=2, gpus_per_node=8, kubelet=False,
                             scheduler_feature_gates=parse("", version)) as sim, aiohttp.ClientSession(sim.url) as http:
            out.append(await SCENARIOS[name](Client(http), sim.components["Scheduler"], limit))
    return out


def show(values: list[float | None], limit: float) -> str:
    done = sorted(v for v in values if v is not None)
    missed = len(values) - len(done)
    if not done:
        return f"> {limit:g} s in all {missed}"
    text = f"median {statistics.median(done):.2f} s, max {done[-1]:.2f} s"
    return text + (f"; > {limit:g} s in {missed}" if missed else "")


async def main(args: argparse.Namespace) -> None:
    print(f"2 nodes x 8 GPUs, {args.rounds} rounds each; load average {os.getloadavg()[0]:.1f}")
    print("| scenario | kube-scheduler 1.35 defaults | 1.30 gate set |")
    print("|---|---|---|")
    for name in SCENARIOS:
        now = await measure(name, "1.35", args.rounds, args.limit)
        old = await measure(name, "1.30", args.rounds, args.limit)
        print(f"| {name} | {show(now, args.limit)} | {show(old, args.limit)} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--limit", type=float, default=15.0, help="seconds to wait for a bind")
    from bench.small import small  # tests/test_benches.py runs --small

    parser.add_argument("--small", action=small(rounds=1, limit=12.0))
    asyncio.run(main(parser.parse_args()))
