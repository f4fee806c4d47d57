"""Benchmark the admission webhook over real HTTPS.

Starts `ganggate webhook` in a subprocess (its own core), then sends AdmissionReviews from this
process over a few keep-alive TLS connections: at fixed rates (open loop: a request's latency
counts from its scheduled send time, so a server that falls behind shows it) and with no rate
limit (closed loop, to find the maximum). The mix is 80% valid gang pods (patched), 10% invalid
(denied) and 10% ordinary pods.

    .venv/bin/python bench/bench_webhook.py [--rates 200,500,1000] [--seconds 10] [--connections 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.webhook_process import percentile, webhook_process  # noqa: E402
from tests.webhook_support import gang_pod, review  # noqa: E402


def bodies(count: int = 200) -> list[bytes]:
    """A shuffled mix of realistic AdmissionReview bodies."""
    rng = random.Random(7)
    out = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.8:
            pod = gang_pod(name=f"ddp-{i}", group=f"ddp-{i % 17}", pod_num="64")
        elif roll < 0.9:
            pod = gang_pod(name=f"bad-{i}", group="Bad_Name", pod_num="64")
        else:
            pod = gang_pod(name=f"web-{i}", group=None, pod_num=None)
        pod["metadata"]["labels"] = {"app": "train", "job-name": f"ddp-{i % 17}", "batch.kubernetes.io/job-completion-index": str(i)}
        pod["spec"]["containers"][0]["env"] = [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(20)]
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}}]
        out.append(json.dumps(review(pod)).encode())
    return out


SERVER_PID: int | None = None


def server_cpu_seconds() -> float:
    """User + system CPU time of the webhook process so far (Linux /proc), 0 elsewhere."""
    try:
        fields = Path(f"/proc/{SERVER_PID}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(label: str, latencies: list[float], errors: int, elapsed: float, cpu: float) -> None:
    latencies.sort()
    ms = [1000 * percentile(latencies, q) for q in (0.5, 0.95, 0.99)]
    per_request = 1e6 * cpu / max(1, len(latencies) + errors)
    print(f"{label:>14}  {len(latencies) / elapsed:8.0f} req/s  p50 {ms[0]:6.2f} ms  p95 {ms[1]:6.2f} ms  "
          f"p99 {ms[2]:6.2f} ms  server CPU {per_request:5.0f} us/req  errors {errors}  "
          f"({len(latencies)} requests in {elapsed:.1f} s)", flush=True)


async def send(session: aiohttp.ClientSession, url: str, body: bytes) -> bool:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        answer = await resp.read()
        return resp.status == 200 and b'"uid"' in answer


async def open_loop(session, url, payloads, rate: float, seconds: float) -> None:
    """Requests scheduled at a fixed rate; latency measured from the scheduled time."""
    latencies: list[float] = []
    errors = 0
    total = int(rate * seconds)
    cpu = server_cpu_seconds()
    start = time.perf_counter()

    async def one(i: int, scheduled: float) -> None:
        nonlocal errors
        ok = await send(session, url, payloads[i % len(payloads)])
        if ok:
            latencies.append(time.perf_counter() - scheduled)
        else:
            errors += 1

    tasks = []
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    report(f"{rate:.0f} req/s", latencies, errors, time.perf_counter() - start, server_cpu_seconds() - cpu)


async def closed_loop(session, url, payloads, workers: int, seconds: float, quiet: bool = False) -> None:
    """As fast as the server answers: `workers` requests in flight at all times."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        nonlocal errors
        i = offset
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            if await send(session, url, payloads[i % len(payloads)]):
                latencies.append(time.perf_counter() - sent)
            else:
                errors += 1
            i += workers

    cpu = server_cpu_seconds()
    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    if not quiet:
        report(f"max ({workers} busy)", latencies, errors, time.perf_counter() - start, server_cpu_seconds() - cpu)


async def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,500,1000", help="comma-separated request rates")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each step")
    parser.add_argument("--connections", type=int, default=4, help="keep-alive TLS connections")
    parser.add_argument("--max-workers", type=int, default=16, help="requests in flight for the max step")
    args = parser.parse_args()

    async with webhook_process() as webhook:
        global SERVER_PID
        SERVER_PID = webhook.proc.pid
        context = webhook.ssl_context()
        connector = aiohttp.TCPConnector(ssl=context, limit=args.connections, force_close=False)
        async with aiohttp.ClientSession(connector=connector) as session:
            base = webhook.base
            payloads = bodies()
            url = f"{base}/mutate"
            print(f"webhook on {base}: {len(payloads[0])}-byte AdmissionReviews, "
                  f"{args.connections} keep-alive TLS connections, {os.cpu_count()} CPUs, "
                  f"load average {os.getloadavg()[0]:.1f} (other work on the machine skews the figures)",
                  flush=True)
            await closed_loop(session, url, payloads, args.connections, 1.0, quiet=True)  # warm-up, TLS handshakes
            for rate in (float(r) for r in args.rates.split(",")):
                await open_loop(session, url, payloads, rate, args.seconds)
        connector = aiohttp.TCPConnector(ssl=context, limit=args.max_workers)
        async with aiohttp.ClientSession(connector=connector) as session:
            await closed_loop(session, url, payloads, args.max_workers, args.seconds)

if __name__ == "__main__":
    asyncio.run(main())
