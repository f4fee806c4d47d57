"""A controller round at 20,000 nodes and 100,000 pods with GPUs as DRA devices, against the same
round with device-plugin GPUs, in the same run.

The device-plugin cluster is bench_decide's: 20,000 nodes of 8 GPUs (40% partly used by a running
pod), 100,000 gated pods in gangs of 1-64 asking 1-8 GPUs each. The DRA cluster is the same one
with every GPU a device: no nvidia.com/gpu in the nodes' allocatable, one ResourceSlice per node
(driver gpu.nvidia.com, 8 devices with NVIDIA's attributes), the DeviceClass gpu.nvidia.com, one
ResourceClaimTemplate per namespace and GPU count that the gang pods name, and for each running pod
an allocated ResourceClaim holding its devices. For each cluster it times, in CPU ms (median of
--repeat): reading the picture (the DRA objects, then a relist of nodes and pods, as the controller
applies them), the first round (which releases every gang that fits; releases are promised, not
sent), an idle round, and a round after one gang of 4 x 1 GPU arrives. The DRA figures should stay
within 1.5x of the device-plugin ones.

    .venv/bin/python bench/bench_dra_round.py [--nodes 20000] [--waiting-pods 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_decide import build
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.core.fit.gpushare import cards_of
from ganggate.core.state.cluster import NodeInfo, PodInfo
from ganggate.core.state.snapshot import make_pod

NOW = 1704067200.0 + 300
GPU = "nvidia.com/gpu"
CLASS = {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {
    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}


def node_slice(node: str, gpus: int = 8) -> dict:
    devices = [{"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{i}"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"}, "index": {"int": i}},
        "capacity": {"memory": {"value": "81559Mi"}}} for i in range(gpus)]
    return {"metadata": {"name": f"{node}-gpu.nvidia.com"}, "spec": {
        "driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": devices}}


def to_dra(nodes: list[dict], pods: list[dict]) -> tuple[list[dict], list[dict], list[tuple[str, dict]]]:
    """The same cluster with its GPUs as DRA devices, and the DRA objects in the order a relist applies them."""
    objects: list[tuple[str, dict]] = [("deviceclasses", CLASS)]
    out_nodes = copy.deepcopy(nodes)
    for node in out_nodes:
        gpus = int(node["status"]["allocatable"].pop(GPU, 0))
        node["status"].get("capacity", {}).pop(GPU, None)
        objects.append(("resourceslices", node_slice(node["metadata"]["name"], gpus)))
    templates: set[tuple[str, int]] = set()
    out_pods = copy.deepcopy(pods)
    for pod in out_pods:
        container = pod["spec"]["containers"][0]
        limits = container.get("resources", {}).get("limits") or {}
        count = int(limits.pop(GPU, 0))
        (container.get("resources", {}).get("requests") or {}).pop(GPU, None)
        if not count:
            continue
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if pod["spec"].get("nodeName"):  # running: its claim is allocated on its node
            node = pod["spec"]["nodeName"]
            pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
            objects.append(("resourceclaims", {
                "metadata": {"name": f"{name}-gpus", "namespace": namespace},
                "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}"} for i in range(count)]},
                    "nodeSelector": {"nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}]}}))
        else:
            pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{count}"}]
            templates.add((namespace, count))
        container["resources"]["claims"] = [{"name": "gpus"}]
    for namespace, count in sorted(templates):
        objects.append(("resourceclaimtemplates", {"metadata": {"name": f"gpus-{count}", "namespace": namespace}, "spec": {
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}}))
    return out_nodes, out_pods, objects


def cpu_ms(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def controller() -> Controller:
    from kubernetes_asyncio import client

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # never called
    made = Controller(api, ControllerConfig(leader_election=False, planning="loop"))

    def start_release(decision: Any, now: float) -> None:  # promised, not sent
        made.state.promise(decision.gang_key, dict(decision.placement), now + 120, cards=cards_of(decision.annotations))

    made._start_release = start_release
    made._report_waiting = lambda *a, **k: None  # Events are not sent either
    return made


def run(nodes: list[dict], pods: list[dict], objects: list[tuple[str, dict]], dra: bool, index: int) -> dict[str, float]:
    made = controller()
    gc.collect()

    def read() -> None:
        for kind, obj in objects:
            made.state.apply_dra(kind, "ADDED", obj)
        made._replace([NodeInfo.from_node(n) for n in nodes], [PodInfo.from_pod(p) for p in pods])

    out = {"read the picture": cpu_ms(read), "first round": cpu_ms(lambda: made.round(NOW)),
           "idle round": cpu_ms(lambda: made.round(NOW))}
    arrival = make_pod(f"new-{index}-0", namespace="arrivals", gang=f"new-{index}", pod_num=1, gpus=0 if dra else 1,
                       cpu="4", memory="32Gi", created="2024-01-01T01:00:00Z")
    if dra:
        arrival["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus-1"}]
        made.state.apply_dra("resourceclaimtemplates", "ADDED", {"metadata": {"name": "gpus-1", "namespace": "arrivals"},
                             "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                                 "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}})
    made._on_pod_event("ADDED", arrival)
    out["one gang arrives"] = cpu_ms(lambda: made.round(NOW))
    out["released by the first round"] = len(made.state.promises)
    return out


def main(argv: list[str] | None = None) -> None:
    asyncio.run(_main(argv))


async def _main(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--waiting-pods", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    from bench.small import small  # tests/test_benches.py runs --small

    parser.add_argument("--small", action=small(nodes=100, waiting_pods=300, repeat=1))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    nodes, pods = build(args.seed, args.nodes, args.waiting_pods)
    dra_nodes, dra_pods, objects = to_dra(nodes, pods)
    results: dict[str, list[dict[str, float]]] = {"device plugin": [], "DRA": []}
    for i in range(args.repeat):  # interleaved: load on the machine falls on both alike
        results["device plugin"].append(run(nodes, pods, [], False, i))
        results["DRA"].append(run(dra_nodes, dra_pods, objects, True, i))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          "(a shared machine: CPU time, medians of interleaved runs)")
    print(f"cluster: {args.nodes} nodes x 8 GPUs, {len(pods)} pods; DRA: {len(objects)} objects "
          f"({sum(1 for k, _ in objects if k == 'resourceclaims')} allocated claims)")
    print(f"{'median ms CPU':30s}{'device plugin':>16s}{'DRA':>12s}{'DRA / plugin':>14s}")
    worst = 0.0
    for part in results["DRA"][0]:
        plugin = statistics.median(r[part] for r in results["device plugin"])
        dra = statistics.median(r[part] for r in results["DRA"])
        ratio = dra / plugin if plugin else float("nan")
        if part != "released by the first round" and part != "read the picture":
            worst = max(worst, ratio)
        print(f"{part:30s}{plugin:16.0f}{dra:12.0f}{ratio:13.2f}x")
    print(f"worst round ratio: {worst:.2f}x (target: within 1.5x)")


if __name__ == "__main__":
    main()
