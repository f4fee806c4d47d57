"""Benchmark the admission webhook over real HTTPS, against a bare aiohttp handler.

Starts `ganggate webhook` in a subprocess and, beside it, bench/bare_webhook.py (a bare aiohttp
handler, same TLS, answering each body with the bytes the webhook answered it with: no parsing,
no decision, no metrics), then sends both the same AdmissionReviews, step by step and alternately
(webhook, then bare handler, `--repeat` times), so each ratio is of two runs under the same load
on the machine. The mix is 80% valid gang pods (patched), 10% invalid (denied), 10% ordinary pods.

Fixed rates are open loop (a request's latency counts from its scheduled send time, so a server
that falls behind shows it) and sent by `--generators` processes of their own, each with its
share of the rate over its own keep-alive TLS connections; the last step has no rate limit
(closed loop, `--max-workers` in flight, from this process). Each line says, beside the
latencies, what the CPU went to in the step: the server's CPU per review, the load generators'
per review and how busy the busiest was (100%: it had a whole core, it is the limit), and how
busy the whole machine was (all cores, all processes; `others`: what is neither the server nor
the generators). A step whose generator or machine was saturated measured the load generator or
the machine, not the server.

    .venv/bin/python bench/bench_webhook.py [--rates 200,500,1000] [--seconds 10] [--connections 16] \\
        [--generators 2] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import ssl
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.webhook_process import percentile, webhook_process
from tests.webhook_support import gang_pod, review


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


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of every core since boot (Linux /proc/stat), (0, 0) elsewhere."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    except (OSError, ValueError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / tick, sum(values) / tick


@dataclass
class Step:
    """One step's figures."""

    label: str
    requests: int
    errors: int
    elapsed: float
    latencies: list[float]  # sorted
    server_cpu: float  # seconds, the whole step
    client_cpu: float  # seconds, all generators
    busiest_generator: float  # its CPU / the step's wall time (1.0: a whole core)
    machine_busy: float  # busy CPU seconds of all cores / (wall time x cores)
    machine_cpu: float  # busy CPU seconds of all cores

    def per_review_us(self, seconds: float) -> float:
        return 1e6 * seconds / max(1, self.requests + self.errors)

    @property
    def p99_ms(self) -> float:
        return 1000 * percentile(self.latencies, 0.99)

    def line(self) -> str:
        ms = [1000 * percentile(self.latencies, q) for q in (0.5, 0.95, 0.99)]
        others = max(0.0, self.machine_cpu - self.server_cpu - self.client_cpu) / self.elapsed
        return (f"{self.label:>14}  {self.requests / self.elapsed:6.0f} req/s  p50 {ms[0]:7.2f} ms  p95 {ms[1]:7.2f} ms  "
                f"p99 {ms[2]:7.2f} ms  server CPU {self.per_review_us(self.server_cpu):4.0f} us/req  "
                f"generators {self.per_review_us(self.client_cpu):4.0f} us/req (busiest {100 * self.busiest_generator:3.0f}%)  "
                f"machine busy {100 * self.machine_busy:3.0f}% (others {others:.2f} cores)  errors {self.errors}")


async def send(session: aiohttp.ClientSession, url: str, body: bytes) -> bool:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        answer = await resp.read()
        return resp.status == 200 and b'"uid"' in answer


async def _open_loop(base: str, ca_file: str, payloads: list[bytes], rate: float, seconds: float, start: float,
                     index: int, count: int, connections: int) -> tuple[list[float], int, float]:
    """This generator's share of the open loop: requests index, index + count, ... of a schedule at
    `rate` from `start` (time.perf_counter: CLOCK_MONOTONIC, one clock for every process)."""
    url = f"{base}/mutate"
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=ca_file), limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(send(session, url, payloads[i]) for i in range(connections)))  # TLS handshakes

        async def one(i: int, scheduled: float) -> None:
            nonlocal errors
            if await send(session, url, payloads[i % len(payloads)]):
                latencies.append(time.perf_counter() - scheduled)
            else:
                errors += 1

        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        cpu = time.process_time()
        tasks = []
        for i in range(index, int(rate * seconds), count):
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, scheduled)))
        await asyncio.gather(*tasks)
        return latencies, errors, time.process_time() - cpu


def generator(base: str, ca_file: str, payloads: list[bytes], rate: float, seconds: float, start: float, index: int,
              count: int, connections: int) -> tuple[list[float], int, float]:
    """A load generator process's work (run in a ProcessPoolExecutor); `payloads` are this
    process's bodies (each review has a uid of its own: the bare handler knows these bytes)."""
    return asyncio.run(_open_loop(base, ca_file, payloads, rate, seconds, start, index, count, connections))


async def open_loop(pool: ProcessPoolExecutor, webhook, payloads: list[bytes], rate: float,
                    args: argparse.Namespace) -> Step:
    """Requests scheduled at a fixed rate, shared by the generator processes."""
    loop = asyncio.get_running_loop()
    start = time.perf_counter() + 3.0  # time for every generator to connect first
    count = args.generators
    per = max(1, args.connections // count)
    futures = [loop.run_in_executor(pool, generator, webhook.base, webhook.ca_file, payloads, rate, args.seconds, start, i,
                                    count, per) for i in range(count)]
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    server, machine = process_cpu_seconds(webhook.proc.pid), machine_cpu_seconds()
    results = await asyncio.gather(*futures)
    elapsed = time.perf_counter() - start
    busy, total = (now - then for now, then in zip(machine_cpu_seconds(), machine, strict=True))
    latencies = sorted(x for lat, _, _ in results for x in lat)
    return Step(f"{rate:.0f} req/s", len(latencies), sum(e for _, e, _ in results), elapsed, latencies,
                process_cpu_seconds(webhook.proc.pid) - server, sum(c for _, _, c in results),
                max(c for _, _, c in results) / elapsed, busy / max(total, 1e-9), busy)


async def closed_loop(webhook, payloads: list[bytes], workers: int, seconds: float) -> Step:
    """As fast as the server answers: `workers` requests in flight at all times, from this process."""
    latencies: list[float] = []
    errors = 0
    url = f"{webhook.base}/mutate"
    connector = aiohttp.TCPConnector(ssl=webhook.ssl_context(), limit=workers)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(send(session, url, payloads[i]) for i in range(workers)))  # TLS handshakes
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

        server, machine, client = process_cpu_seconds(webhook.proc.pid), machine_cpu_seconds(), time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(workers)))
    elapsed = time.perf_counter() - start
    busy, total = (now - then for now, then in zip(machine_cpu_seconds(), machine, strict=True))
    client = time.process_time() - client
    return Step(f"max ({workers} busy)", len(latencies), errors, elapsed, sorted(latencies),
                process_cpu_seconds(webhook.proc.pid) - server, client, client / elapsed, busy / max(total, 1e-9), busy)


async def answers_of(webhook, payloads: list[bytes]) -> list[tuple[str, str]]:
    """The webhook's answer to each body, for the bare server to give back byte for byte."""
    connector = aiohttp.TCPConnector(ssl=webhook.ssl_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        out = []
        for body in payloads:
            async with session.post(f"{webhook.base}/mutate", data=body,
                                    headers={"Content-Type": "application/json"}) as resp:
                out.append((body.decode(), (await resp.read()).decode()))
        return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(rates="100", seconds=0.2, repeat=1, generators=1, connections=2, max_workers=2))
    parser.add_argument("--rates", default="200,500,1000", help="comma-separated request rates")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each step")
    parser.add_argument("--connections", type=int, default=16,
                        help="keep-alive TLS connections in all (default 16; with 4, under load, requests waited "
                        "for a free connection and the rate was the connections', not the servers')")
    parser.add_argument("--generators", type=int, default=2,
                        help="load generator processes sharing each fixed rate (default 2)")
    parser.add_argument("--max-workers", type=int, default=16, help="requests in flight for the max step")
    parser.add_argument("--repeat", type=int, default=1, help="times each step runs on each server, alternately")
    args = parser.parse_args(argv)
    try:
        args.rate_list = [float(r) for r in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates: not a comma-separated list of numbers: {args.rates!r}")
    if any(r <= 0 for r in args.rate_list) or args.seconds <= 0:
        parser.error("--rates and --seconds must be positive")
    if min(args.connections, args.generators, args.max_workers, args.repeat) < 1:
        parser.error("--connections, --generators, --max-workers and --repeat must be at least 1")
    return args


async def main() -> None:
    args = parse_args()
    payloads = bodies()
    print(f"{len(payloads[0])}-byte AdmissionReviews, {args.connections} keep-alive TLS connections from "
          f"{args.generators} generator process(es), {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} (other work on the machine skews the figures)", flush=True)
    ratios: dict[str, list[float]] = {}
    p99s: dict[str, list[float]] = {}
    with ProcessPoolExecutor(args.generators, mp_context=get_context("spawn")) as pool:
        async with webhook_process() as webhook:
            answers = await answers_of(webhook, payloads)
            async with webhook_process(answers) as bare:
                for _ in range(args.repeat):
                    for rate in [*args.rate_list, None]:
                        steps = []
                        for name, server in (("webhook", webhook), ("bare", bare)):
                            step = (await open_loop(pool, server, payloads, rate, args) if rate is not None
                                    else await closed_loop(server, payloads, args.max_workers, args.seconds))
                            print(f"{name:>7} {step.line()}", flush=True)
                            steps.append(step)
                        ours, floor = steps
                        ratios.setdefault(ours.label, []).append(ours.server_cpu / max(ours.requests + ours.errors, 1)
                                                                 / max(floor.server_cpu / max(floor.requests + floor.errors, 1), 1e-9))
                        p99s.setdefault(ours.label, []).append(ours.p99_ms)
    print(f"server CPU per review, webhook / bare handler (median of {args.repeat}), and the webhook's p99: " + ", ".join(
        f"{label} {statistics.median(values):.2f}x ({', '.join(f'{v:.2f}' for v in values)}), p99 "
        f"{statistics.median(p99s[label]):.1f} ms" for label, values in ratios.items()), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
