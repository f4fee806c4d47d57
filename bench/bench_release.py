"""How long the controller takes to release a gang: from the last pod created to all gates removed.

On kubesim over HTTP (by default in its own process, `ganggate sim serve`, so that the API
server and the controller use separate cores as they would in a cluster; `--in-process` runs
everything on one event loop) with the default scheduler stand-in running (kubelet off), the
controller in this process with its defaults (plan policy, pinned placement, 32 patches in flight,
one dry run per pod shape, then the patches). The webhook is not in the loop: pods are created already carrying the gate, as the
webhook would leave them. For gangs of 8, 100 and 1,000 one-GPU pods on 8-GPU nodes with twice
the room they need; each size in a fresh cluster, a few repetitions, median and worst printed.

In the same run, on the same cluster and through the controller's own API client, the bare-PATCH
floor: as many no-op JSON patches (a lone `test` of the pod's uid) as the gang has pods, at the
controller's concurrency (`max_in_flight`), from the first sent to the last answered. The
release time's ratio to it (gates/PATCH) says what the release costs beyond the API's price of
a patch that writes nothing. A release's patches do write: each is a watch event to every
watcher and a scheduling and binding by the scheduler. So the run also measures the ungate
floor: the same client releasing as many gated pods of no gang (the controller leaves them
alone) with the same release patch, at the same concurrency, no dry run, until all are bound,
on the other half of the cluster (twice the nodes the gang needs); bound/ungate is the release
(last pod created -> all bound) over it: what the controller adds to the API's own price of
the release's writes. The load average is printed beside the figures (the machine is shared);
and, as the wall times move with whatever else the machine runs, the CPU time all the processes
used (this one with the controller and the bench's watch, kubesim's, its components') in each
of the three windows, summed from /proc: the release's CPU over the floors' says what it costs
in work, whatever the load.

With `--sim-up` the whole stack a user starts is measured instead: `ganggate sim up` in its own
process (kubesim with its scheduler and kubelet, the webhook over TLS registered with the
MutatingWebhookConfiguration it ships, the controller with leader election, all in that
process), the pods created without the gate (the webhook adds it), and both floors sent to the
same API server, through the same admission chain (whatever the registered configuration
matches, a no-op PATCH pays too).

    .venv/bin/python bench/bench_release.py [--sizes 8 100 1000] [--repeat 3] [--in-process | --components-process | --sim-up]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ganggate.contract import GATE_NAME, GROUP_NAME, GROUP_POD_NUM
from ganggate.controller.release.patches import build_patch, decision_annotation
from ganggate.controller.round.informer import Informer
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.kube.calls import call_json
from ganggate.kube.client import make_api_client


def gated_pod(name: str, group: str, num: int) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {GROUP_NAME: group, GROUP_POD_NUM: str(num)}},
        "spec": {"schedulingGates": [{"name": GATE_NAME}], "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "trainer:1",
                                 "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
    }


@contextlib.asynccontextmanager
async def simulator(nodes: int, in_process: bool, components_process: bool = False):
    """kubesim with `nodes` 8-GPU nodes, scheduler on, kubelet off; yields an async factory of ApiClients.
    components_process: its scheduler and controllers in a third process (`--components-process`)."""
    if in_process:
        from ganggate.sim import Simulator

        async with Simulator(nodes=nodes, gpus_per_node=8, scheduler=True, kubelet=False) as sim:
            async def in_process_client() -> object:
                return sim.api_client()

            yield in_process_client
        return

    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ganggate", "--log-level", "ERROR", "sim", "serve", "--port", "0",
            "--nodes", str(nodes), "--no-kubelet", "--kubeconfig-out", str(kubeconfig),
            *(["--components-process"] if components_process else []),
            stdout=asyncio.subprocess.DEVNULL)
        try:
            for _ in range(600):
                if kubeconfig.exists() and kubeconfig.stat().st_size:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)

            # As `ganggate controller` builds its client (controller/cli.py): a connection per
            # request in flight, the proxy looked up once.
            yield lambda: make_api_client(str(kubeconfig), concurrency=2 * ControllerConfig().max_in_flight)
        finally:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@contextlib.asynccontextmanager
async def sim_up(nodes: int):
    """`ganggate sim up` in its own process: kubesim (scheduler and kubelet on), the webhook over
    TLS registered with its MutatingWebhookConfiguration, the controller with leader election;
    yields an async factory of ApiClients once it says it is ready."""
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ganggate", "--log-level", "ERROR", "sim", "up", "--port", "0", "--webhook-port", "0",
            "--nodes", str(nodes), "--kubeconfig-out", str(kubeconfig), "--certs-dir", f"{tmp}/certs",
            stdout=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            while b"ganggate sim up: ready" not in (line := await asyncio.wait_for(proc.stdout.readline(), 120)):
                if not line:
                    raise SystemExit("ganggate sim up stopped before it was ready")
            drain = asyncio.create_task(proc.stdout.read())  # (nothing more is printed; never block it)
            yield lambda: make_api_client(str(kubeconfig), concurrency=2 * ControllerConfig().max_in_flight)
            drain.cancel()
        finally:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _process_tree(pid: int) -> list[int]:
    """pid and its descendants (the `sim serve` child, its components process), from /proc."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += _process_tree(int(child))
    return found


def cpu_seconds() -> float:
    """CPU time, in seconds, of this process and its descendants so far (every thread's run time
    from /proc/<pid>/task/<tid>/schedstat): what the controller, the bench's watch and kubesim
    have used, whatever else the machine runs meanwhile."""
    total = 0
    for pid in _process_tree(os.getpid()):
        for task in Path(f"/proc/{pid}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def patch_floor(core: object, names: list[str], concurrency: int) -> tuple[float, float]:
    """Seconds to send one no-op JSON patch to each pod, `concurrency` in flight; and the CPU
    seconds used meanwhile (cpu_seconds)."""
    sem = asyncio.Semaphore(concurrency)
    pods = {p["metadata"]["name"]: p for p in (await call_json(core.list_namespaced_pod, "default"))["items"]}

    async def noop(name: str) -> None:
        async with sem:
            body = [{"op": "test", "path": "/metadata/uid", "value": pods[name]["metadata"]["uid"]}]
            await call_json(core.patch_namespaced_pod, name, "default", body)

    cpu = cpu_seconds()
    start = time.perf_counter()
    await asyncio.gather(*(noop(n) for n in names))
    return time.perf_counter() - start, cpu_seconds() - cpu


async def free_slots(core: object, nodes: int) -> list[str]:
    """One node name per free GPU (8-GPU nodes, one-GPU pods)."""
    used: dict[str, int] = {}
    for pod in (await call_json(core.list_namespaced_pod, "default"))["items"]:
        node = pod["spec"].get("nodeName")
        if node:
            used[node] = used.get(node, 0) + 1
    return [f"node-{n}" for n in range(nodes) for _ in range(8 - used.get(f"node-{n}", 0))]


async def ungate_floor(core: object, size: int, slots: list[str], concurrency: int, watched: set[str],
                       ungated: dict[str, float], bound: dict[str, float]) -> tuple[float, float]:
    """Seconds for this client alone to release `size` gated pods that belong to no gang (so the
    controller leaves them alone): the same release patch (build_patch: test uid and gate, remove
    the gate, pin to a node with room, record a decision), one per pod, no dry run, at the
    controller's concurrency, until the watch shows every gate removed and every pod bound. The
    API's own price of a release's writes, the scheduler's bindings included; and the CPU seconds
    used meanwhile."""
    sem = asyncio.Semaphore(concurrency)
    names = [f"direct-{i}" for i in range(size)]

    async def create(name: str) -> dict:
        pod = gated_pod(name, "unused", size)
        pod["metadata"]["annotations"] = {}
        async with sem:
            return await call_json(core.create_namespaced_pod, "default", pod)

    created = await asyncio.gather(*(create(n) for n in names))
    while not all(n in watched for n in names):
        await asyncio.sleep(0.005)

    async def release(i: int, pod: dict) -> None:
        body = build_patch(pod, decision_annotation("floor", "2027-01-01T00:00:00Z", None, "default/floor", size),
                           slots[i])
        async with sem:
            await call_json(core.patch_namespaced_pod, pod["metadata"]["name"], "default", body)

    cpu = cpu_seconds()
    start = time.perf_counter()
    await asyncio.gather(*(release(i, p) for i, p in enumerate(created)))
    while not all(n in ungated and n in bound for n in names):
        await asyncio.sleep(0.005)
    return max(max(ungated[n], bound[n]) for n in names) - start, cpu_seconds() - cpu


async def one_run(size: int, run: int, in_process: bool, components_process: bool = False, stack: bool = False
                  ) -> tuple[float, float, float, int, float, tuple[float, float, float]]:
    """Seconds from the last pod created to (all gates removed, all pods bound); the bare-PATCH
    floor for as many pods; the dry runs the release sent; the ungate floor (`ungate_floor`,
    on the cluster's other half); the CPU seconds of the release (until all bound), of the
    PATCH floor and of the ungate floor."""
    from kubernetes_asyncio import client

    nodes = 2 * ((size + 7) // 8)  # half for the gang, half for the ungate floor's pods
    async with (sim_up(nodes) if stack else simulator(nodes, in_process, components_process)) as api_client:
        api = await api_client()
        ctl_api = await api_client()
        core = client.CoreV1Api(api)
        watched: set[str] = set()  # pods this run's watch has shown (each run has a fresh cluster)
        ungated: dict[str, float] = {}
        bound: dict[str, float] = {}

        def see(pod: dict) -> None:
            name = pod["metadata"]["name"]
            watched.add(name)
            now = time.perf_counter()
            if not any(g.get("name") == GATE_NAME for g in pod["spec"].get("schedulingGates") or []):
                ungated.setdefault(name, now)
            if pod["spec"].get("nodeName"):
                bound.setdefault(name, now)

        watcher = Informer(core.list_pod_for_all_namespaces, "pods(bench)",
                           on_list=lambda items: [see(p) for p in items], on_event=lambda _k, p: see(p))
        watch_task = asyncio.create_task(watcher.run())
        controller = None if stack else Controller(ctl_api, ControllerConfig(leader_election=False))
        ctl_task = asyncio.create_task(controller.run() if controller is not None else asyncio.sleep(0))
        for _ in range(3000):
            if (controller is None or controller.synced) and watcher.synced:
                break
            await asyncio.sleep(0.02)
        else:
            raise SystemExit("the controller did not sync within a minute")
        group = f"g{run}"
        sem = asyncio.Semaphore(64)

        async def create(i: int) -> None:
            pod = gated_pod(f"{group}-{i}", group, size)
            if stack:
                del pod["spec"]["schedulingGates"]  # the webhook gates it
            async with sem:
                await call_json(core.create_namespaced_pod, "default", pod)

        await asyncio.gather(*(create(i) for i in range(size - 1)))
        await asyncio.sleep(0.3)  # the controller has seen the first size-1 pods and decided to wait
        assert not ungated, "released before the gang was complete (or, through sim up, not gated by the webhook)"
        cpu = cpu_seconds()
        start = time.perf_counter()
        await create(size - 1)
        deadline = time.monotonic() + 120
        while (len(ungated) < size or len(bound) < size) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        release_cpu = cpu_seconds() - cpu
        if len(ungated) < size and controller is not None:
            gang = controller.state.gangs.get(("default", group))
            print(f"gang of {size}, run {run}: only {len(ungated)} released after 120 s; controller sees "
                  f"state={gang.state if gang else None} pods={len(gang.pods) if gang else 0} "
                  f"releasing={sorted(controller.releases.in_flight)} rounds={controller.rounds} "
                  f"promises={len(controller.state.promises)} pod relists={controller.pods.relists} "
                  f"watch restarts={controller.pods.watch_restarts}; bench watch saw {len(watcher.store)} pods",
                  file=sys.stderr, flush=True)
        released = max(ungated.values(), default=start + float("nan")) - start
        all_bound = max(bound.values()) - start if len(bound) == size else float("nan")
        in_flight = ControllerConfig().max_in_flight
        floor, floor_cpu = await patch_floor(client.CoreV1Api(ctl_api), [f"{group}-{i}" for i in range(size)], in_flight)
        slots = await free_slots(core, nodes)
        direct, direct_cpu = await ungate_floor(client.CoreV1Api(ctl_api), size, slots, in_flight,
                                    watched, ungated, bound)
        for task in (ctl_task, watch_task):
            task.cancel()
        await asyncio.gather(ctl_task, watch_task, return_exceptions=True)
        await api.close()
        await ctl_api.close()
        dry_runs = controller.releaser.dry_runs if controller is not None else -1  # (sim up's: not seen from here)
        return released, all_bound, floor, dry_runs, direct, (release_cpu, floor_cpu, direct_cpu)


async def main(sizes: list[int], repeat: int, in_process: bool, components_process: bool = False,
               stack: bool = False) -> None:
    where = "in this process" if in_process else "in its own process (ganggate sim serve)"
    if components_process:
        where += ", its scheduler and controllers in a third (--components-process)"
    if stack:
        print("through `ganggate sim up` (its own process): kubesim with its scheduler and kubelet, the webhook "
              "registered with its MutatingWebhookConfiguration (every admission step in the path, the PATCH "
              "floor's too), the controller with leader election; pods created without the gate (the webhook "
              f"adds it); load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    else:
        print(f"kubesim {where}; controller in this process; webhook not in the loop (pods created gated); "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'gang':>6} {'runs':>4} {'gates removed: median':>22} {'worst':>8} {'all bound: median':>18} "
          f"{'worst':>8} {'PATCH floor':>12} {'gates/PATCH':>12} {'dry runs':>8} {'ungate floor':>13} {'bound/ungate':>13}")
    for size in sizes:
        # Every run ends by itself: a stuck run is reported, not waited for.
        results = [await asyncio.wait_for(one_run(size, r, in_process, components_process, stack), 400)
                   for r in range(repeat)]
        rel = [r[0] for r in results]
        bnd = [r[1] for r in results]
        floor = statistics.median(r[2] for r in results)
        ratio = statistics.median(r[0] / r[2] for r in results)
        direct = statistics.median(r[4] for r in results)
        direct_ratio = statistics.median(max(r[0], r[1]) / r[4] for r in results)
        print(f"{size:>6} {repeat:>4} {statistics.median(rel) * 1000:>19.0f} ms {max(rel) * 1000:>5.0f} ms "
              f"{statistics.median(bnd) * 1000:>15.0f} ms {max(bnd) * 1000:>5.0f} ms {floor * 1000:>9.0f} ms "
              f"{ratio:>11.2f}x {max(r[3] for r in results):>8} {direct * 1000:>10.0f} ms {direct_ratio:>12.2f}x",
              flush=True)
        cpu = [statistics.median(r[5][i] for r in results) for i in range(3)]
        print(f"{'':>11} CPU of all processes, median: release {cpu[0] * 1000:.0f} ms, PATCH floor {cpu[1] * 1000:.0f} ms "
              f"(release/floor {statistics.median(r[5][0] / r[5][1] for r in results):.2f}x), ungate floor "
              f"{cpu[2] * 1000:.0f} ms (release/ungate {statistics.median(r[5][0] / r[5][2] for r in results):.2f}x)",
              flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(sizes=[4], repeat=1))
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 100, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--in-process", action="store_true",
                        help="run kubesim in this process (one event loop for everything)")
    parser.add_argument("--components-process", action="store_true",
                        help="run kubesim's scheduler and controllers in a process of their own (sim serve --components-process)")
    parser.add_argument("--sim-up", action="store_true",
                        help="through `ganggate sim up`: the webhook and its registration in the path, the controller "
                        "in that process")
    args = parser.parse_args()
    if args.sim_up and (args.in_process or args.components_process):
        parser.error("--sim-up runs its own stack: no --in-process or --components-process")
    if args.in_process and args.components_process:
        parser.error("--components-process needs kubesim in its own process (no --in-process)")
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args.sizes, args.repeat, args.in_process, args.components_process, args.sim_up))
