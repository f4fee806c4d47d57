"""Time to running: N pods of 1 GPU, from the first create to all Running, plain against one gang.

`ganggate sim up` is started as a user starts it (its own process: kubesim with its scheduler and
kubelet; the webhook over TLS and the controller with leader election each in a process of its
own, as their pods are on a cluster), once with the webhook gating
gang pods (`--gate-by webhook`, the default) and once with the gate by policy (`--gate-by policy`).
On each server, in the same run, the bench alternates: N plain pods (no gang annotations), then the
same N pods as one gang (`scheduling.k8s.io/group-name` / `group-pod-num`), each batch created with
K creates in flight in a fresh namespace and timed from the first create sent to the watch showing
the last pod Running; then the batch is deleted (gracePeriodSeconds=0) and the next waits until
its GPUs are free and the Events the controller writes about the deleted gang have stopped. Printed: each time,
the gang's ratio to the plain batch just before it, and
where the gang's time went, from the watch:

- `created`: first create sent -> last create answered;
- `noticed`: last create answered -> first member nominated (the round that sees the complete
  gang, its plan, the release's dry run);
- `nominated`: first nomination -> first gate removed (nominations, the confirm wait);
- `ungated`: first gate removed -> last gate removed;
- `running`: last gate removed -> last pod Running (the scheduler's bindings, the kubelet's status).

And the API writes per second of each batch, counted as a create, a binding and a status per pod
(plain), plus a nomination and a gate removal per pod (gang), plus the Events the namespace holds
once all run (the controller's GangReleased, on the gang's first pod): on kubesim, whose one event
loop serves every write, a gang at the plain batch's rate of writes is as fast as it can be.
And the CPU time `sim up`'s process (kubesim) spent on each batch (from the first create to all
Running), the gang's against the plain batch's: on a shared machine the CPU a batch costs moves
less with the other work than its wall time does; beside it, the webhook's and the controller's
CPU in the same spans (their own processes: on a cluster their own pods' CPU).

The load average is printed beside each figure: the machine is shared, so compare within a run.

    .venv/bin/python bench/bench_time_to_running.py [--sizes 100 1000] [--repeat 2] [--in-flight 16] [--gate-by webhook policy] [--small]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ganggate.contract import GATE_NAME, GROUP_NAME, GROUP_POD_NUM


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) the process has used so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parts_cpu(pid: int) -> dict[str, float]:
    """CPU time so far of sim up's own parts in processes of their own (the webhook, the gate
    controller), by the `ganggate` command each runs (Linux /proc; empty elsewhere)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return {}
    out = {}
    for child in children:
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for part in (b"webhook", b"controller"):
            if part in argv:
                out[part.decode()] = cpu_seconds(int(child))
    return out


def pod_body(i: int, gang: int | None) -> dict:
    """One 1-GPU pod; gang (the gang's size) adds the gang annotations."""
    annotations = {GROUP_NAME: "train", GROUP_POD_NUM: str(gang)} if gang else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i}", "annotations": annotations, "labels": {"app": "train"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "trainer:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


@dataclass
class Batch:
    """What the watch showed of one batch, as perf_counter times."""

    start: float = 0.0
    created: float = 0.0
    nominated: dict[str, float] = field(default_factory=dict)
    ungated: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    events: int = 0  # Events in the namespace once all ran (the controller's GangReleased, ...)
    cpu_seconds: float = 0.0  # sim up's CPU time used so far, read once all ran (before the deletion)
    parts_cpu: dict[str, float] = field(default_factory=dict)  # the webhook's and controller's, likewise

    def see(self, pod: dict, now: float) -> None:
        name = pod["metadata"]["name"]
        if (pod.get("status") or {}).get("nominatedNodeName"):
            self.nominated.setdefault(name, now)
        if not any(g.get("name") == GATE_NAME for g in (pod.get("spec") or {}).get("schedulingGates") or []):
            self.ungated.setdefault(name, now)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(name, now)

    def phases(self) -> dict[str, float]:
        """The gang's time in the phases of the module docstring (seconds)."""
        first_nomination = min(self.nominated.values(), default=self.created)
        first_gate = min(self.ungated.values())
        last_gate = max(self.ungated.values())
        return {"created": self.created - self.start, "noticed": max(0.0, first_nomination - self.created),
                "nominated": max(0.0, first_gate - first_nomination), "ungated": last_gate - first_gate,
                "running": max(self.running.values()) - last_gate}


@contextlib.asynccontextmanager
async def sim_up(nodes: int, gate_by: str, profile: str | None = None):
    """`ganggate sim up` in its own process (under cProfile, written to `profile` when it stops, if
    given); yields its API server's URL once it says it is ready."""
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        profiler = ["-m", "cProfile", "-o", profile] if profile else []
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *profiler, "-m", "ganggate", "--log-level", "ERROR", "sim", "up", "--port", "0", "--webhook-port", "0",
            "--nodes", str(nodes), "--gate-by", gate_by, "--kubeconfig-out", str(kubeconfig),
            "--certs-dir", f"{tmp}/certs", stdout=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            while b"ganggate sim up: ready" not in (line := await asyncio.wait_for(proc.stdout.readline(), 180)):
                if not line:
                    raise SystemExit("ganggate sim up stopped before it was ready")
            drain = asyncio.create_task(proc.stdout.read())
            yield yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"], proc.pid
            drain.cancel()
        finally:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def watch(session: aiohttp.ClientSession, url: str, namespace: str, batch: Batch, ready: asyncio.Event) -> None:
    """Feed every event of the namespace's pods to `batch` (from an empty namespace)."""
    async with session.get(f"{url}/api/v1/namespaces/{namespace}/pods") as response:
        version = (await response.json())["metadata"]["resourceVersion"]
    async with session.get(f"{url}/api/v1/namespaces/{namespace}/pods",
                           params={"watch": "1", "resourceVersion": version},
                           timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as response:
        ready.set()
        async for line in response.content:
            if line.strip():
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    batch.see(event["object"], time.perf_counter())


async def one_batch(session: aiohttp.ClientSession, url: str, namespace: str, size: int, in_flight: int,
                    gang: bool, limit: float, pid: int = 0, creates_only: bool = False) -> Batch:
    """Create the batch in a fresh namespace, wait until all Running, delete it; what the watch saw.

    creates_only: pods that never run (plain: a schedulerName nothing serves; gang: a
    group-pod-num twice the batch, so it never completes); the batch ends 1 s after its last create."""
    async with session.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": namespace}}) as response:
        if response.status != 201:
            raise SystemExit(f"namespace {namespace}: {response.status} {await response.text()}")
    batch, ready = Batch(), asyncio.Event()
    watcher = asyncio.create_task(watch(session, url, namespace, batch, ready))
    await asyncio.wait_for(ready.wait(), 30)
    names = iter(range(size))

    async def creator() -> None:
        for i in names:
            body = pod_body(i, (2 * size if creates_only else size) if gang else None)
            if creates_only and not gang:
                body["spec"]["schedulerName"] = "no-scheduler"
            async with session.post(f"{url}/api/v1/namespaces/{namespace}/pods", json=body) as response:
                if response.status != 201:
                    raise SystemExit(f"create failed: {response.status} {await response.text()}")

    batch.start = time.perf_counter()
    await asyncio.gather(*(creator() for _ in range(in_flight)))
    batch.created = time.perf_counter()
    deadline = time.monotonic() + limit
    if creates_only:
        await asyncio.sleep(1.0)  # (the watch and the controller's round catch up)
        batch.running = {"": batch.created}
    while len(batch.running) < size and not creates_only:
        if time.monotonic() > deadline:
            raise SystemExit(f"{namespace}: only {len(batch.running)} of {size} Running after {limit:.0f} s")
        await asyncio.sleep(0.01)
    batch.cpu_seconds = cpu_seconds(pid) if pid else float("nan")
    batch.parts_cpu = parts_cpu(pid) if pid else {}
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    async with session.get(f"{url}/api/v1/namespaces/{namespace}/events") as response:
        batch.events = len((await response.json())["items"])
    async with session.delete(f"{url}/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": "0"}):
        pass
    while True:  # the next batch starts on an idle cluster with every GPU free
        async with session.get(f"{url}/api/v1/namespaces/{namespace}/pods", params={"limit": "1"}) as response:
            if not (await response.json())["items"]:
                break
        await asyncio.sleep(0.2)
    # The controller tells each deleted gang member's Event (rate-limited, so for seconds after):
    # the next batch starts once the namespace's Events stop growing, not while they still write.
    seen, still = -1, 0
    while still < 2:
        await asyncio.sleep(1.0)
        async with session.get(f"{url}/api/v1/namespaces/{namespace}/events") as response:
            count = len((await response.json())["items"])
        seen, still = count, (still + 1 if count == seen else 0)
    return batch


def parts_line(others: dict[bool, dict[str, float]]) -> str:
    """The webhook's and the controller's CPU in the plain batch and the gang's (their own processes)."""
    return "".join(f"{part} CPU: plain {others.get(False, {}).get(part, float('nan')):4.2f} s gang "
                   f"{others[True].get(part, float('nan')):4.2f} s  " for part in ("webhook", "controller")
                   if part in others.get(True, {}))


async def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeat", type=int, default=2, help="plain/gang pairs per size and way (default 2)")
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--gate-by", nargs="+", choices=("webhook", "policy"), default=["webhook", "policy"])
    parser.add_argument("--small", action="store_true", help="a seconds-long run: 16 pods, one pair, the webhook")
    parser.add_argument("--profile", metavar="FILE", help="run sim up under cProfile (FILE.<gate-by>), gangs only")
    parser.add_argument("--parts", action="store_true",
                        help="also the CPU of the creates alone, plain and gang, per size and way: what each kind "
                             "of write costs a pod (create; binding + status; the gate on create; nomination + "
                             "gate removal)")
    args = parser.parse_args()
    if args.small:
        args.sizes, args.repeat, args.gate_by = [16], 1, ["webhook"]
    nodes = (max(args.sizes) + 7) // 8
    print(f"time to running on `ganggate sim up` ({nodes} nodes of 8 GPUs), pods of 1 GPU, {args.in_flight} creates "
          f"in flight, first create -> all Running; {os.cpu_count()} CPUs shared with other work: compare within a run",
          flush=True)
    summary: dict[tuple[str, int], list[float]] = {}
    cpu_ratios: dict[tuple[str, int], list[float]] = {}
    for gate_by in args.gate_by:
        async with sim_up(nodes, gate_by, args.profile and f"{args.profile}.{gate_by}") as (url, pid), aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=args.in_flight + 4)) as session:
            await one_batch(session, url, "warm", 16, 4, True, 120)  # connections, caches, compiled CEL
            count = 0
            for size in args.sizes:
                limit = 120 + size * 0.3
                for run in range(1, args.repeat + 1):
                    times, writes, cpu, others = {}, {}, {}, {}
                    for gang in ((True,) if args.profile else (False, True)):
                        count += 1
                        before, parts_before = cpu_seconds(pid), parts_cpu(pid)
                        batch = await one_batch(session, url, f"b{count}", size, args.in_flight, gang, limit, pid)
                        cpu[gang] = batch.cpu_seconds - before
                        others[gang] = {k: v - parts_before.get(k, 0.0) for k, v in batch.parts_cpu.items()}
                        times[gang] = max(batch.running.values()) - batch.start
                        # create, bind, status (+ nomination, gate removal) per pod, and the Events
                        writes[gang] = size * (5 if gang else 3) + batch.events
                    ratio = times[True] / times.get(False, float("nan"))
                    if args.parts and not args.profile:
                        alone = {}
                        for gang in (False, True):
                            count += 1
                            before = cpu_seconds(pid)
                            done = await one_batch(session, url, f"b{count}", size, args.in_flight, gang, limit, pid,
                                                   creates_only=True)
                            alone[gang] = done.cpu_seconds - before
                        ms = {k: 1000 * v / size for k, v in
                              (("P", cpu[False]), ("C", alone[False]), ("G", alone[True]), ("T", cpu[True]))}
                        print(f"{gate_by:>7} {size:5} pods run {run}: CPU ms a pod: plain {ms['P']:.2f} (create {ms['C']:.2f}, "
                              f"binding + status {ms['P'] - ms['C']:.2f}); gang {ms['T']:.2f} (create {ms['G']:.2f}, of which "
                              f"the gate {ms['G'] - ms['C']:.2f}; nomination + gate removal + the rest "
                              f"{ms['T'] - ms['G'] - (ms['P'] - ms['C']):.2f})", flush=True)
                    summary.setdefault((gate_by, size), []).append(ratio)
                    cpu_ratios.setdefault((gate_by, size), []).append(cpu[True] / cpu.get(False, float("nan")))
                    steps = "  ".join(f"{k} {v:5.2f}" for k, v in batch.phases().items())
                    plain = times.get(False, float('nan'))
                    plain_cpu = cpu.get(False, float('nan'))
                    print(f"{gate_by:>7} {size:5} pods run {run}: plain {plain:6.2f} s  gang {times[True]:6.2f} s  "
                          f"{ratio:4.2f}x plain  (gang: {steps})  writes/s: plain {writes.get(False, 0) / plain:4.0f} "
                          f"gang {writes[True] / times[True]:4.0f}  sim up CPU: plain {plain_cpu:5.2f} s gang {cpu[True]:5.2f} s "
                          f"({cpu[True] / plain_cpu:4.2f}x)  {parts_line(others)}load {os.getloadavg()[0]:.1f}", flush=True)
    for (gate_by, size), ratios in summary.items():
        cpus = cpu_ratios[(gate_by, size)]
        print(f"{gate_by:>7} {size:5} pods: gang/plain median {statistics.median(ratios):4.2f}x "
              f"(runs: {', '.join(f'{r:.2f}' for r in ratios)}); sim up CPU gang/plain median "
              f"{statistics.median(cpus):4.2f}x (runs: {', '.join(f'{r:.2f}' for r in cpus)})", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
