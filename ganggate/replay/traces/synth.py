"""Synthetic job traces whose shape follows published studies of GPU clusters.

- Job sizes (GPUs per job): most jobs use one GPU, a tail uses 2-8, a few use 16-64. This is
  the qualitative finding of Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters
  for DNN Training Workloads", USENIX ATC 2019 (Microsoft Philly) and of Weng et al., "MLaaS
  in the Wild: Workload Analysis and Scheduling in Large-Scale Heterogeneous GPU Clusters",
  NSDI 2022 (Alibaba PAI). The weights in `SIZE_MIX` are ours, chosen to match that shape,
  not numbers copied from either paper.
- Run times: heavy-tailed, log-normal (both studies report run times spanning minutes to days
  with a long tail).
- Arrivals: a Poisson process whose rate gives the requested offered load.

Everything is drawn from one `random.Random(seed)`: the same arguments give the same trace.
With `require_share` / `prefer_share`, that share of the multi-pod jobs requires (or prefers)
one domain of `topology_level`, drawn from a second generator of the same seed, so the jobs
themselves are the same as without.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from ganggate.replay.traces.format import Job

#: GPUs per job -> relative weight.
SIZE_MIX: dict[int, float] = {
    1: 0.70,
    2: 0.07,
    4: 0.09,
    8: 0.09,
    16: 0.03,
    32: 0.015,
    64: 0.005,
}


@dataclass(frozen=True)
class SynthConfig:
    """How to draw a trace; the defaults give a busy but not hopeless cluster."""

    jobs: int = 500
    nodes: int = 64
    gpus_per_node: int = 8
    seed: int = 1
    load: float = 0.9  # offered GPU demand / GPU capacity
    median_run_time: float = 1800.0  # seconds
    run_time_sigma: float = 1.0  # of log(run time)
    min_run_time: float = 60.0
    max_run_time: float = 86400.0
    per_gpu_pods: float = 0.5  # chance a multi-GPU job runs one pod per GPU (else whole nodes)
    cpu_per_gpu: int = 4  # cores
    memory_per_gpu_gi: int = 16
    require_share: float = 0.0  # of the multi-pod jobs: require one domain of topology_level
    prefer_share: float = 0.0  # of the others: prefer one
    topology_level: str = "ganggate.io/rack"


def size_mix(capacity: int) -> dict[int, float]:
    """The job-size weights restricted to sizes that fit in the cluster at all."""
    mix = {size: w for size, w in SIZE_MIX.items() if size <= capacity}
    if not mix:
        raise ValueError(f"a cluster of {capacity} GPUs cannot run any job size")
    return mix


def pod_shape(gpus: int, gpus_per_node: int, per_gpu: bool) -> tuple[int, int]:
    """(pods, GPUs per pod) for a job of `gpus` GPUs: one pod per GPU, or pods as large as
    a node (when the job's GPUs divide evenly into them)."""
    if gpus <= 1:
        return 1, max(gpus, 0)
    per_pod = min(gpus, gpus_per_node)
    if per_gpu or gpus % per_pod:
        return gpus, 1
    return gpus // per_pod, per_pod


def generate(config: SynthConfig) -> list[Job]:
    """Draw a trace of `config.jobs` jobs, sorted by submit time."""
    if config.jobs < 1 or config.nodes < 1 or config.gpus_per_node < 1:
        raise ValueError("jobs, nodes and gpus_per_node must be at least 1")
    if config.load <= 0:
        raise ValueError("load must be positive")
    if not (0 <= config.require_share <= 1 and 0 <= config.prefer_share <= 1):
        raise ValueError("require_share and prefer_share must be from 0 to 1")
    rng = random.Random(config.seed)
    capacity = config.nodes * config.gpus_per_node
    mix = size_mix(capacity)
    sizes = rng.choices(list(mix), weights=list(mix.values()), k=config.jobs)
    mu = math.log(config.median_run_time)
    run_times = [
        float(
            round(
                min(
                    config.max_run_time,
                    max(config.min_run_time, rng.lognormvariate(mu, config.run_time_sigma)),
                )
            )
        )
        for _ in sizes
    ]
    shapes = [pod_shape(g, config.gpus_per_node, rng.random() < config.per_gpu_pods) for g in sizes]
    # Poisson arrivals at the rate that makes the mean offered load `load`.
    work = sum(g * t for g, t in zip(sizes, run_times, strict=True)) / config.jobs  # GPU-seconds per job
    rate = config.load * capacity / work  # jobs per second
    jobs: list[Job] = []
    now = 0.0
    for index, ((pods, per_pod), run_time) in enumerate(zip(shapes, run_times, strict=True)):
        jobs.append(
            Job(
                job_id=f"job-{index:05d}",
                submit_time=float(round(now)),
                pods=pods,
                gpus_per_pod=per_pod,
                cpu_per_pod=str(config.cpu_per_gpu * max(per_pod, 1)),
                memory_per_pod=f"{config.memory_per_gpu_gi * max(per_pod, 1)}Gi",
                run_time=run_time,
                priority=0,
            )
        )
        now += rng.expovariate(rate)
    if config.require_share or config.prefer_share:
        jobs = with_topology(jobs, config)
    return jobs


def with_topology(jobs: list[Job], config: SynthConfig) -> list[Job]:
    """The jobs, a share of the multi-pod ones requiring or preferring one domain of the level."""
    rng = random.Random(f"{config.seed}-topology")
    out = []
    for job in jobs:
        draw = rng.random()
        if job.pods > 1 and draw < config.require_share:
            job = replace(job, topology_required=config.topology_level)
        elif job.pods > 1 and draw < config.require_share + config.prefer_share:
            job = replace(job, topology_preferred=config.topology_level)
        out.append(job)
    return out


@dataclass(frozen=True)
class StarveConfig:
    """A starvation trace: a steady stream of 1-GPU jobs at `load` (offered GPU demand /
    capacity of the stream alone) and, after every `every` small jobs, one large gang of whole
    nodes asking `gang_share` of the cluster (about 0.14 more load with the defaults).

    A small job finds a free GPU almost at once, and best fit packs it beside others, but a
    large gang needs whole nodes empty together, which a steady stream never leaves: without a
    guard it starts only when the stream stops, so its wait grows with the trace's length.
    Small jobs' run times are log-normal but capped (`max_run_time`), so a guard that drains
    nodes for a gang has a bounded drain."""

    jobs: int = 120  # small jobs and gangs together
    nodes: int = 4
    gpus_per_node: int = 8
    seed: int = 1
    load: float = 0.75
    every: int = 50
    gang_share: float = 0.5
    gang_run_time: float = 1800.0
    median_run_time: float = 2400.0
    run_time_sigma: float = 0.8
    max_run_time: float = 14400.0


def generate_starving(config: StarveConfig) -> list[Job]:
    """Draw a starvation trace of `config.jobs` jobs, sorted by submit time; the large gangs
    are named `gang-...`, the small jobs `job-...`."""
    if config.jobs < 1 or config.nodes < 1 or config.gpus_per_node < 1 or config.every < 1:
        raise ValueError("jobs, nodes, gpus_per_node and every must be at least 1")
    if config.load <= 0 or not 0 < config.gang_share <= 1:
        raise ValueError("load must be positive and gang_share from 0 (excluded) to 1")
    rng = random.Random(f"starve-{config.seed}")
    gang_nodes = max(1, round(config.nodes * config.gang_share))
    mu = math.log(config.median_run_time)
    mean_run = math.exp(mu + config.run_time_sigma ** 2 / 2)  # of the log-normal, before the cap
    rate = config.load * config.nodes * config.gpus_per_node / mean_run  # small jobs per second
    jobs: list[Job] = []
    now = 0.0
    for index in range(config.jobs):
        if (index + 1) % (config.every + 1) == 0:
            jobs.append(Job(f"gang-{index:05d}", float(round(now)), gang_nodes, config.gpus_per_node,
                            str(4 * config.gpus_per_node), f"{16 * config.gpus_per_node}Gi",
                            config.gang_run_time))
            continue
        run = min(config.max_run_time, max(60.0, rng.lognormvariate(mu, config.run_time_sigma)))
        jobs.append(Job(f"job-{index:05d}", float(round(now)), 1, 1, "4", "16Gi", float(round(run))))
        now += rng.expovariate(rate)
    return jobs
