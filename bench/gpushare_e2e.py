"""The small end-to-end variant of bench_gpushare: the same placements, for real, through kubesim.

    .venv/bin/python bench/bench_gpushare.py --e2e                # 40 nodes, default list, fgd
    .venv/bin/python bench/gpushare_e2e.py --nodes 40 --fill 0.9 --policy best-fit --seed 2

40 nodes spread evenly over the Alibaba node list (kubesim's --alibaba-nodes sampling, cards of
1000 thousandths as in the planner benchmark) and pods of a pod list in a random order until
their GPU demand reaches `fill` of the GPUs, all created at once through kubesim's API. The
shipped webhook configuration gates them (sharing pods as gangs of one; the others carry gang
annotations for a gang of one), the controller (--card-policy) picks nodes and cards, kubesim's
default-scheduler stand-in binds them and its kubelet's gpushare device-plugin stand-in admits
each sharing pod on its card or fails it (UnexpectedAdmissionError). Once nothing changes we
check that no pod failed and no card is oversubscribed, and print the GPUs allocated beside what
ganggate's planner allocates for the same arrivals in bench_gpushare's direct run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpushare_trace import MILLI, TRACE, TracePod, node_object, pod_info, pod_object, read_pods, run, workload_of
from ganggate.contract import GPUSHARE_CARD_INDEX, GROUP_NAME, GROUP_POD_NUM
from ganggate.sim.alibaba_nodes import read_node_list, sample_evenly


def pod_manifest(pod: TracePod, index: int) -> dict:
    """The trace pod as a Pod: whole GPUs or a share of one card; a gang of one unless it shares."""
    name = f"{pod.name}-{index}"
    info = pod_info(pod)
    container = pod_object(pod)["spec"]["containers"][0]
    annotations = {} if info.shared_gpu > 0 else {GROUP_NAME: name, GROUP_POD_NUM: "1"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"containers": [container], "restartPolicy": "Never"}}


def arrivals_until(pods: Sequence[TracePod], capacity_milli: int, seed: int) -> list[TracePod]:
    """Pods in a random order until their GPU demand reaches `capacity_milli` without passing it."""
    import random

    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    out, demand = [], 0
    for pod in order:
        if demand + pod.gpu_demand > capacity_milli:
            break
        out.append(pod)
        demand += pod.gpu_demand
    return out


async def run_e2e(nodes: int, fill: float, policy: str, seed: int, pod_list: str) -> int:
    import aiohttp

    from ganggate.controller.config import ControllerConfig
    from ganggate.local.parts import (
        make_certificates,
        register_webhook,
        start_controller,
        start_tls_webhook,
        stop_task,
        webhook_configuration,
    )
    from ganggate.sim import Simulator

    specs = sample_evenly(read_node_list(TRACE / "openb_node_list_gpu_node.csv"), nodes)
    for spec in specs:
        spec["gpu_mem_per_card"] = MILLI
    capacity_milli = sum(spec["gpus"] for spec in specs) * MILLI
    trace = read_pods(TRACE / f"openb_pod_list_{pod_list}.csv")
    arrivals = arrivals_until(trace, int(capacity_milli * fill), seed)
    print(f"gpushare e2e: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {len(specs)} nodes, "
          f"{capacity_milli // MILLI} GPUs; {len(arrivals)} pods of {pod_list} (seed {seed}) asking "
          f"{sum(p.gpu_demand for p in arrivals) / capacity_milli:.0%} of the GPUs; --card-policy {policy}", flush=True)
    started = time.perf_counter()
    async with Simulator(node_specs=specs) as sim, aiohttp.ClientSession() as session:
        api = sim.api_client()
        workdir = tempfile.TemporaryDirectory(prefix="ganggate-gpushare-")
        certs = make_certificates(Path(workdir.name))
        webhook = await start_tls_webhook(certs)
        task = None
        try:
            await register_webhook(api, webhook_configuration(webhook.url, certs.ca_file.read_bytes()))
            config = ControllerConfig(leader_election=False, metrics_port=None, card_policy=policy)
            _, task = start_controller(api, config, name="ganggate-controller-gpushare")
            for index, pod in enumerate(arrivals):
                async with session.post(f"{sim.url}/api/v1/namespaces/default/pods",
                                        json=pod_manifest(pod, index)) as response:
                    if response.status != 201:
                        print(f"  create {pod.name}: HTTP {response.status}: {(await response.text())[:200]}")
            listed = await _settled(session, sim.url)
        finally:
            await stop_task(task)
            await webhook.close()
            await api.close()
            workdir.cleanup()
    return _report(listed, arrivals, specs, capacity_milli, policy, seed, time.perf_counter() - started)


async def _settled(session, url: str, quiet_polls: int = 6) -> list[dict]:
    """The pods once their phases and gates stopped changing for `quiet_polls` polls in a row."""
    last, quiet = None, 0
    while quiet < quiet_polls:
        await asyncio.sleep(1.0)
        async with session.get(f"{url}/api/v1/namespaces/default/pods") as response:
            items = (await response.json())["items"]
        signature = sorted((p["metadata"]["name"], (p.get("status") or {}).get("phase"),
                            bool(p["spec"].get("schedulingGates"))) for p in items)
        quiet = quiet + 1 if signature == last else 0
        last = signature
    return items


def _report(listed: list[dict], arrivals: list[TracePod], specs: list[dict], capacity_milli: int, policy: str,
            seed: int, seconds: float) -> int:
    by_name = {p["metadata"]["name"]: p for p in listed}
    phases: dict[str, int] = {}
    allocated = 0
    per_card: dict[tuple[str, str], int] = {}
    failures = []
    for index, pod in enumerate(arrivals):
        obj = by_name.get(f"{pod.name}-{index}")
        phase = (obj.get("status") or {}).get("phase", "Pending") if obj else "missing"
        gated = bool(obj and obj["spec"].get("schedulingGates"))
        phases["Gated" if gated else phase] = phases.get("Gated" if gated else phase, 0) + 1
        if phase == "Failed":
            failures.append(f"{obj['metadata']['name']}: {obj['status'].get('reason')}: {obj['status'].get('message')}")
        if phase == "Running":
            allocated += pod.gpu_demand
            card = (obj["metadata"].get("annotations") or {}).get(GPUSHARE_CARD_INDEX)
            if card is not None:
                key = (obj["spec"]["nodeName"], card)
                per_card[key] = per_card.get(key, 0) + pod.gpu_milli
    over = {key: used for key, used in per_card.items() if used > MILLI}
    nodes = [node_object(s["name"], int(s["cpu"].rstrip("m")), int(s["memory"].rstrip("Mi")), s["gpus"]) for s in specs]
    infos = {pod.name: pod_info(pod) for pod in arrivals}
    planned = run(nodes, arrivals, policy, seed, workload_of(arrivals), infos, order=arrivals)
    print(f"  pods: {', '.join(f'{k} {v}' for k, v in sorted(phases.items()))}; {seconds:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  GPUs allocated for real: {allocated / capacity_milli:.1%} of the cluster; ganggate's planner run "
          f"directly on the same arrivals (bench_gpushare): "
          f"{planned.points[-1][1] / 100:.1%}")
    print(f"  sharing pods on {len(per_card)} cards, none over 1000 thousandths: {not over}"
          + (f" (over: {over})" if over else ""))
    print(f"  pods the device plugin stand-in failed: {len(failures)}" + "".join(f"\n    {f}" for f in failures[:5]))
    return 1 if failures or over else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--fill", type=float, default=1.0, help="GPU demand as a share of the GPUs (default 1)")
    parser.add_argument("--policy", default="fgd", help="the controller's --card-policy (default fgd)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--list", default="default", help="pod list (default: default)")
    args = parser.parse_args(argv)
    for name in ("gate", "webhook", "kubesim", "certs", "aiohttp", "ganggate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return asyncio.run(run_e2e(args.nodes, args.fill, args.policy, args.seed, args.list))


if __name__ == "__main__":
    sys.exit(main())

