"""What bench_gpushare and gpushare_e2e share: the Alibaba trace's rows as pods and
nodes, the arrivals of one seed, one run through ganggate's planner, and the full-sharing list
the FGD artifact's gpushare100 is (`share_everything`). Both benchmarks import this module and
neither imports the other at load time (bench_gpushare calls gpushare_e2e's main for --e2e).
"""

from __future__ import annotations

import csv
import dataclasses
import random
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ganggate.controller.config import card_policy_named, whole_gpu_policy_named
from ganggate.core.fit.gpushare import node_cards, random_fit
from ganggate.core.fit.resources import node_allocatable
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.gpushare_fgd import FGD, target_workload
from ganggate.core.placement.packing import plan_gang
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo

TRACE = ROOT.parent / "shared/traces/alibaba-gpu-v2023"
MILLI = 1000  # aliyun.com/gpu-mem per card in this benchmark: thousandths of a card
# FGD's target workload: the commonest pod shapes (pods asking no GPU included) covering 95% of
# the list's pods, as the FGD artifact's runs set it (hkust-adsl/kubernetes-scheduler-simulator
# scripts/generate_config_and_run.py: typicalPodsConfig isInvolvedCpuPods true,
# podPopularityThreshold 95) and the controller's observed_workload does; fgd-full weighs every shape.
POPULARITY = 0.95


@dataclasses.dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int

    @property
    def gpu_demand(self) -> int:
        """GPU asked, in thousandths of a GPU."""
        return self.num_gpu * self.gpu_milli if self.num_gpu else 0


def node_object(name: str, cpu_milli: int, memory_mib: int, cards: int) -> dict:
    """A ready Node advertising its cards whole and shared (1000 thousandths per card)."""
    capacity = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": "100000",
                "nvidia.com/gpu": str(cards), "aliyun.com/gpu-mem": str(cards * MILLI),
                "aliyun.com/gpu-count": str(cards)}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {},
            "status": {"capacity": capacity, "allocatable": dict(capacity),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def read_nodes(path: Path) -> list[dict]:
    """The GPU nodes of the node list as Node objects."""
    with open(path, newline="") as handle:
        return [node_object(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"] or 0))
                for row in csv.DictReader(handle) if int(row["gpu"] or 0) > 0]


def read_pods(path: Path) -> list[TracePod]:
    with open(path, newline="") as handle:
        return [TracePod(r["name"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["num_gpu"]), int(r["gpu_milli"]))
                for r in csv.DictReader(handle)]


def pod_info(pod: TracePod) -> PodInfo:
    """The PodInfo of a pod asking what the trace row asks (whole GPUs, or a share of one card)."""
    return PodInfo.from_pod(pod_object(pod))


def pod_object(pod: TracePod) -> dict:
    """The Pod object of a trace row (whole GPUs, or a share of one card)."""
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    limits: dict[str, str] = {}
    if pod.num_gpu >= 1 and pod.gpu_milli >= MILLI:
        limits["nvidia.com/gpu"] = str(pod.num_gpu)
    elif pod.num_gpu == 1 and pod.gpu_milli > 0:
        limits["aliyun.com/gpu-mem"] = str(pod.gpu_milli)
    resources = {"requests": dict(requests, **limits), "limits": limits}
    manifest = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod.name, "namespace": "bench", "uid": pod.name},
                "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]}}
    return manifest


def workload_of(pods: Iterable[TracePod], coverage: float = POPULARITY) -> list:
    shapes = []
    for pod in pods:
        if pod.num_gpu >= 1 and pod.gpu_milli >= MILLI:
            shapes.append((0, pod.num_gpu, pod.cpu_milli, 0))
        elif pod.num_gpu == 1 and pod.gpu_milli > 0:
            shapes.append((pod.gpu_milli, 0, pod.cpu_milli, 0))
        else:
            shapes.append((0, 0, pod.cpu_milli, 0))
    return target_workload(shapes, coverage=coverage)


@dataclasses.dataclass
class Run:
    """One (list, policy, seed): the allocation curve and where the first pod failed."""

    points: list[tuple[float, float]]  # (arrived %, allocated %) after each arrival
    first_failure: float | None  # arrived % when the first pod could not be placed
    failed: int
    seconds: float

    def allocated_at(self, arrived: float) -> float:
        """Allocated % once arrivals first reach `arrived` %."""
        for point_arrived, allocated in self.points:
            if point_arrived >= arrived:
                return allocated
        return self.points[-1][1] if self.points else 0.0


def arrivals(pods: Sequence[TracePod], capacity_milli: int, seed: int) -> list[TracePod]:
    """Pods in a random order until their GPU demand reaches the capacity (reshuffled copies if needed)."""
    rng = random.Random(seed)
    out: list[TracePod] = []
    demand = 0
    while demand < capacity_milli:
        order = list(pods)
        rng.shuffle(order)
        for pod in order:
            out.append(pod)
            demand += pod.gpu_demand
            if demand >= capacity_milli:
                break
    return out


def run(nodes: list[dict], pods: Sequence[TracePod], policy: str, seed: int, workload: Sequence,
        infos: dict[str, PodInfo], order: Sequence[TracePod] | None = None) -> Run:
    """Place the arrivals of one seed (or `order`) one by one with ganggate's planner under one policy."""
    started = time.perf_counter()
    raw = {node["metadata"]["name"]: node for node in nodes}
    cards = {}
    total_milli = 0
    for name, node in raw.items():
        count = int(node["status"]["capacity"]["aliyun.com/gpu-count"])
        cards[name] = node_cards(name, count * MILLI, count)
        total_milli += count * MILLI
    if policy.startswith("fgd-exact"):
        exact = FGD(scored=False)
        card_policy, whole_gpu_policy = exact, exact.whole_node
    else:
        named = "fgd" if policy == "fgd-full" else policy
        card_policy = random_fit(seed) if policy == "random" else card_policy_named(named)
        whole_gpu_policy = whole_gpu_policy_named(named)
    capacity = Capacity(raw, {name: node_allocatable(node) for name, node in raw.items()}, cards=cards,
                        card_policy=card_policy, whole_gpu_policy=whole_gpu_policy, workload=workload)
    arrived = allocated = failed = 0
    first_failure: float | None = None
    points: list[tuple[float, float]] = []
    for index, pod in enumerate(arrivals(pods, total_milli, seed) if order is None else order):
        info = dataclasses.replace(infos[pod.name], key=f"bench/{pod.name}#{index}")  # its name: "<name>#<index>"
        arrived += pod.gpu_demand
        placement = plan_gang([info], capacity)
        if isinstance(placement, Unfit):
            failed += 1
            if first_failure is None:
                first_failure = 100.0 * arrived / total_milli
        else:
            allocated += pod.gpu_demand
        points.append((100.0 * arrived / total_milli, 100.0 * allocated / total_milli))
    return Run(points, first_failure, failed, time.perf_counter() - started)


def share_everything(pods: Sequence[TracePod], seed: int = 0) -> list[TracePod]:
    """A list where every GPU pod asks a share of one card, as the FGD artifact's gpushare100
    (hkust-adsl/kubernetes-scheduler-simulator data/csv/openb_pod_list_gpushare100.csv) is
    made: the pods asking no GPU as they are, and each pod asking whole GPUs replaced by a copy
    of one of the list's sharing pods drawn at random (its CPU, memory and share of a card
    together). The artifact's list has the default list's 1,088 CPU pods and 7,064 sharing
    pods (3,078 + 3,986), their shares, CPU per pod (6.03 cores) and memory distributed as the
    default list's sharing pods; a list that kept the whole-GPU pods' CPU (12 cores typical)
    with a share of a card runs out of CPU before GPU."""
    rng = random.Random(seed)
    sharing = [p for p in pods if p.num_gpu == 1 and 0 < p.gpu_milli < MILLI]
    out = []
    for pod in pods:
        if pod.num_gpu >= 1 and pod.gpu_milli >= MILLI:
            drawn = rng.choice(sharing)
            pod = dataclasses.replace(drawn, name=pod.name)
        out.append(pod)
    return out
