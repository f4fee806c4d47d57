"""Benchmark the cost of gating at pod creation: the webhook against the gate by policy.

For each way, a fresh kubesim API server (this process; no scheduler or kubelet) is given what
`ganggate sim up` registers (the webhook: deploy/kubesim's MutatingWebhookConfiguration pointing at
`ganggate webhook` in a subprocess; the policy: deploy/components/gate-by-policy, with that webhook
narrowed to shared-GPU pods), then N pods are created over HTTP with K creates in flight, timed from
the first request to the last answer: plain pods (no gang annotations, the baseline of the same run),
gang pods gated by the webhook, gang pods gated by the policy. Every gang pod is checked to carry the
gate.

    .venv/bin/python bench/bench_gate_by_policy.py [--pods 1000] [--in-flight 16] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time
from pathlib import Path

import aiohttp
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.webhook_process import percentile, webhook_process
from ganggate.contract import GATE_NAME
from ganggate.local.parts import gate_by_policy_webhook, register_gate_policies, register_policies
from ganggate.sim import Simulator


def body(i: int, gang: bool) -> dict:
    annotations = {"scheduling.k8s.io/group-name": "ddp", "scheduling.k8s.io/group-pod-num": "1000"} if gang else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i}", "annotations": annotations, "labels": {"app": "train"}},
            "spec": {"containers": [{"name": "main", "image": "pytorch",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def create_all(url: str, count: int, in_flight: int, gang: bool, namespace: str = "ml") -> tuple[float, list[float]]:
    latencies: list[float] = []
    queue = iter(range(count))

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in queue:
            sent = time.perf_counter()
            async with session.post(f"{url}/api/v1/namespaces/{namespace}/pods", json=body(i, gang)) as response:
                answer = await response.json()
            latencies.append(time.perf_counter() - sent)
            if response.status != 201:
                raise SystemExit(f"create failed: {response.status} {answer.get('message')}")
            gated = any(g["name"] == GATE_NAME for g in answer["spec"].get("schedulingGates") or [])
            if gated != gang:
                raise SystemExit(f"pod {i}: gated={gated}, expected {gang}")

    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(in_flight)))
        return time.perf_counter() - start, sorted(latencies)


async def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2)
    from bench.small import small  # tests/test_benches.py runs --small

    parser.add_argument("--small", action=small(pods=40, repeat=1))
    args = parser.parse_args()
    print(f"{args.pods} pod creates, {args.in_flight} in flight, kubesim API server in this process, the webhook in "
          f"a subprocess; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work on the machine "
          "skews the figures; compare within one run)", flush=True)
    async with webhook_process() as webhook:
        for attempt in range(1, args.repeat + 1):
            results = {}
            for way in ("plain", "webhook", "policy"):
                results[way] = await measure(way, webhook, args.pods, args.in_flight)
            plain = results["plain"][0]
            for way, (elapsed, latencies) in results.items():
                ms = [1000 * percentile(latencies, q) for q in (0.5, 0.95)]
                print(f"run {attempt} {way:>8}: {elapsed:6.2f} s  {args.pods / elapsed:6.0f} creates/s  "
                      f"{elapsed / plain:4.2f}x plain  p50 {ms[0]:6.1f} ms  p95 {ms[1]:6.1f} ms", flush=True)


async def measure(way: str, webhook, pods: int, in_flight: int) -> tuple[float, list[float]]:
    gates = "MutatingAdmissionPolicy=true" if way == "policy" else None
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False, feature_gates=gates) as sim:
        async with sim.api_client() as api:
            from kubernetes_asyncio import client

            mwc = yaml.safe_load((REPO / "deploy" / "kubesim" / "webhook-url.yaml").read_text())
            mwc["webhooks"][0]["clientConfig"] = {
                "url": f"{webhook.base}/mutate", "caBundle": base64.b64encode(Path(webhook.ca_file).read_bytes()).decode()}
            if way == "policy":
                await register_gate_policies(api)
                mwc = gate_by_policy_webhook(mwc)
            await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(mwc)
            await register_policies(api)
            await client.CoreV1Api(api).create_namespace({"metadata": {"name": "ml"}})
            await client.CoreV1Api(api).create_namespace({"metadata": {"name": "warm"}})
        await create_all(sim.url, 50, 4, way != "plain", namespace="warm")  # connections, compiled CEL
        return await create_all(sim.url, pods, in_flight, way != "plain")


if __name__ == "__main__":
    asyncio.run(main())
