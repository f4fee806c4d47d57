"""Benchmark kubesim's mutating admission chain calling the real ganggate webhook over HTTPS.

Starts `ganggate webhook` in a subprocess (its own core), registers deploy/base's
MutatingWebhookConfiguration (URL form, caBundle of a fresh CA) with an AdmissionChain in this
process, and runs `admit()` as kubesim's API server does on pod CREATE, closed loop, for:
gang pods (CEL matchConditions true, an AdmissionReview over TLS, a JSONPatch applied) and
ordinary pods (matchConditions false: no call, the cost kubesim adds to every pod create).

    .venv/bin/python bench/bench_admission.py [--seconds 5] [--concurrency 1,16]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import os
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.webhook_process import percentile, webhook_process
from ganggate.sim.apiserver.admission.chain import AdmissionChain
from tests.webhook_support import gang_pod

POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}
NAMESPACES = {"ml": {"metadata": {"name": "ml", "labels": {"kubernetes.io/metadata.name": "ml"}}}}


def pods(gang: bool, count: int = 64) -> list[dict]:
    out = []
    for i in range(count):
        pod = gang_pod(name=f"p-{i}", group=f"ddp-{i % 7}" if gang else None, pod_num="64" if gang else None)
        pod["metadata"]["labels"] = {"app": "train", "batch.kubernetes.io/job-completion-index": str(i)}
        pod["spec"]["containers"][0]["env"] = [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(20)]
        pod["spec"]["schedulerName"] = "default-scheduler"
        out.append(pod)
    return out


async def closed_loop(chain: AdmissionChain, label: str, payloads: list[dict], workers: int, seconds: float,
                      expect_gate: bool, quiet: bool = False) -> None:
    latencies: list[float] = []
    wrong = 0
    deadline = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        nonlocal wrong
        i = offset
        while time.perf_counter() < deadline:
            pod = payloads[i % len(payloads)]
            sent = time.perf_counter()
            admitted = await chain.admit(
                operation="CREATE", kind=POD_KIND, resource=POD_RESOURCE, sub_resource=None, namespace="ml",
                name=pod["metadata"]["name"], obj=pod, old_obj=None, dry_run=False,
                user_info={"username": "bench", "groups": ["system:authenticated"]},
            )
            latencies.append(time.perf_counter() - sent)
            if bool(admitted["spec"].get("schedulingGates")) != expect_gate:
                wrong += 1
            i += workers

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    elapsed = time.perf_counter() - start
    if quiet:
        return
    latencies.sort()
    ms = [1000 * percentile(latencies, q) for q in (0.5, 0.95, 0.99)]
    print(f"{label:>22} x{workers:<3} {len(latencies) / elapsed:7.0f} admits/s  p50 {ms[0]:6.2f} ms  "
          f"p95 {ms[1]:6.2f} ms  p99 {ms[2]:6.2f} ms  wrong {wrong}  ({len(latencies)} in {elapsed:.1f} s)", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(seconds=0.2, concurrency="1"))
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each step")
    parser.add_argument("--concurrency", default="1,16", help="comma-separated admits in flight")
    args = parser.parse_args()

    async with webhook_process() as webhook:
        base = webhook.base
        configuration = yaml.safe_load((REPO / "deploy/base/mutatingwebhookconfiguration.yaml").read_text())
        configuration["webhooks"][0]["clientConfig"] = {
            "url": f"{base}/mutate",
            "caBundle": base64.b64encode(Path(webhook.ca_file).read_bytes()).decode(),
        }
        chain = AdmissionChain(lambda: [copy.deepcopy(configuration)], NAMESPACES.get)
        gang, ordinary = pods(gang=True), pods(gang=False)
        print(f"ganggate webhook on {base} (subprocess), chain in this process; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f} (other work on the machine skews the figures)", flush=True)
        await closed_loop(chain, "warm-up", gang, 4, 1.0, True, quiet=True)
        for workers in (int(w) for w in args.concurrency.split(",")):
            await closed_loop(chain, "gang pod (webhook)", gang, workers, args.seconds, True)
            await closed_loop(chain, "ordinary pod (CEL only)", ordinary, workers, args.seconds, False)
        await chain.close()

if __name__ == "__main__":
    asyncio.run(main())
