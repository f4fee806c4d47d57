"""What a replay runs and what it gives back: the scenario (jobs, nodes, node events, background
pods), a step's view and a run's result; plain data, shared by the engine, the demo and the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ganggate.core.fit.resources import parse_quantity
from ganggate.replay.results.metrics import JobProgress, JobRecord, Sample, Summary
from ganggate.replay.traces.format import Job


class ReplayError(RuntimeError):
    """The replay could not go on (a component died, the cluster never settled)."""


@dataclass(frozen=True)
class NodeSpec:
    """A node of the simulated cluster."""

    name: str
    gpus: int = 8
    cpu: str = "64"
    memory: str = "512Gi"
    #: Node labels as (key, value) pairs, e.g. its zone, block and rack (replay/results/topology.py).
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodeEvent:
    """A node that joins the cluster at `time` (the demo's "add a node")."""

    time: float
    node: NodeSpec


@dataclass(frozen=True)
class Background:
    """A long-running pod that is not part of any gang (something else using GPUs on a node)."""

    name: str
    node: str
    gpus: int
    cpu: str = "1"
    memory: str = "1Gi"


@dataclass(frozen=True)
class Disruption:
    """One disruption at `time` (simulated seconds); the kinds are ganggate/replay/run/disruptions.py's."""

    time: float
    kind: str
    node: str = ""
    seconds: float = 600.0
    gpus: int = 8
    pick: int = 0

    def describe(self) -> str:
        if self.kind == "preempt":
            return f"urgent pod of {self.gpus} GPUs arrives ({self.seconds:g} s)"
        if self.kind == "pod-failure":
            return "a running pod fails"
        return f"{self.kind} of {self.node} ({self.seconds:g} s)"


@dataclass(frozen=True)
class Scenario:
    """What to replay: the jobs, the cluster and anything else that happens."""

    jobs: Sequence[Job]
    nodes: Sequence[NodeSpec]
    node_events: Sequence[NodeEvent] = ()
    background: Sequence[Background] = ()
    #: Disruptions injected during the run (ganggate/replay/run/disruptions.py); with any, or with
    #: `owners`, each job is a batch/v1 Job that replaces the pods it loses.
    disruptions: Sequence[Disruption] = ()
    owners: bool = False
    #: Node label keys of the topology, widest first (mode `topology` passes them to the controller).
    topology_levels: tuple[str, ...] = ()
    #: Node groups kubesim's cluster-autoscaler grows and shrinks (ganggate.sim.autoscaler), and its
    #: options (scan_seconds, unneeded_seconds): an autoscaled cluster (replay/results/autoscaling.py).
    node_groups: Sequence[Any] = ()
    autoscaler: dict[str, Any] = field(default_factory=dict)
    #: GPUs as DRA devices of this productName (ganggate/sim/kubelet/dradriver.py), each job's pods
    #: claiming theirs through a ResourceClaimTemplate; None: nvidia.com/gpu (the device plugin).
    dra_product: str | None = None

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes)


@dataclass
class StepView:
    """What a step looked like, for a live view."""

    mode: str
    time: float
    sample: Sample
    progress: dict[str, JobProgress]
    records: dict[str, JobRecord]
    capacity: int
    events: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    mode: str
    samples: list[Sample]
    records: list[JobRecord]
    summary: Summary
    end: float
    capacity: int
    steps: int
    wall_seconds: float
    #: Runs lost: a job that had all its pods running lost one before it finished (its run restarts).
    interruptions: int = 0
    #: Disruptions applied, per kind, and evictions a disruption budget refused.
    disruptions: dict[str, int] = field(default_factory=dict)
    #: The Events in the cluster at the end, as `kubectl get events` lists them:
    #: (reason, pod, message, count), sorted.
    events: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: With node groups: (time, GPUs of every node) whenever that changed (replay/results/autoscaling.py).
    provisioned: list[tuple[float, int]] = field(default_factory=list)
    #: The Unix time of simulated time 0 (the controller and kubesim stamp Unix times).
    epoch_offset: float = 0.0


def uniform_nodes(count: int, gpus_per_node: int, cpu: str = "64", memory: str = "512Gi") -> list[NodeSpec]:
    return [NodeSpec(f"node-{i}", gpus_per_node, cpu, memory) for i in range(count)]


def check_fits(scenario: Scenario) -> None:
    """Refuse a scenario with a pod larger than every node: it could never run in any mode."""
    nodes = list(scenario.nodes) + [e.node for e in scenario.node_events]
    nodes += [NodeSpec(g.name, g.gpus, g.cpu, g.memory) for g in scenario.node_groups]
    for job in scenario.jobs:
        if not any(
            job.gpus_per_pod <= n.gpus
            and parse_quantity(job.cpu_per_pod) <= parse_quantity(n.cpu)
            and parse_quantity(job.memory_per_pod) <= parse_quantity(n.memory)
            for n in nodes
        ):
            raise ReplayError(f"job {job.job_id}: a pod of {job.gpus_per_pod} GPUs, {job.cpu_per_pod} CPU, "
                              f"{job.memory_per_pod} memory fits on no node of the cluster")
