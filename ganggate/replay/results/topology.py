"""Replays on a cluster with a topology (blocks of racks of nodes, ganggate/sim/topology.py), and
what they measure about placement, as pure functions over the jobs, the nodes and the records.

- a gang's **span** at a level: how many distinct values of that level's label its nodes have
  (its racks, its blocks), read from the nodes its pods ran on when it first started;
- **multi-node gangs**: the gangs whose pods fit on no single node (by GPUs), so they must span
  nodes under any policy: the same gangs whatever the policy, so their spans compare;
- **one rack when it could**: of the gangs of more than one pod whose pods fit in one rack (by
  GPUs, pod by pod: the rack's nodes can hold all of them at once on an empty rack), the share
  that ran in one rack;
- utilisation and p95 queueing delay are the replay's own (ganggate/replay/results/metrics.py);
- **required kept**: a job that requires a level (scheduling.k8s.io/group-topology-required)
  started with all its pods in one domain of it (one value of that label; kubesim's rack
  values name their block, so one value is one rack); any other start is a violation.

CPU and memory are not counted in "fits": the replay's pods are GPU-bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ganggate.replay.results.gangcheck import span
from ganggate.replay.results.metrics import JobRecord, Summary, mean, percentile
from ganggate.replay.run.scenario import NodeSpec
from ganggate.replay.traces.format import Job
from ganggate.sim.topology import BLOCK_LABEL, RACK_LABEL, TopologyShape


def topology_nodes(shape: TopologyShape, gpus_per_node: int, cpu: str = "64", memory: str = "512Gi",
                   prefix: str = "node-") -> list[NodeSpec]:
    """The shape's nodes, named `<prefix><i>` rack by rack, labelled as kubesim labels them."""
    return [NodeSpec(f"{prefix}{i}", gpus_per_node, cpu, memory, tuple(sorted(shape.labels(i).items())))
            for i in range(shape.nodes)]


def pods_fit(job: Job, gpus: Sequence[int]) -> bool:
    """True when all the job's pods fit at once on nodes of these GPU counts (each node whole)."""
    if job.gpus_per_pod == 0:
        return bool(gpus)
    return sum(g // job.gpus_per_pod for g in gpus) >= job.pods


def domains(nodes: Sequence[NodeSpec], key: str) -> dict[str, list[int]]:
    """Label value -> the GPU counts of the nodes that have it."""
    out: dict[str, list[int]] = {}
    for node in nodes:
        value = dict(node.labels).get(key)
        if value is not None:
            out.setdefault(value, []).append(node.gpus)
    return out


@dataclass(frozen=True)
class TopologySummary:
    """Placement figures of one replay run (one mode)."""

    mode: str
    multi_node_gangs: int  # multi-node gangs that started
    mean_racks: float | None
    p95_racks: float | None
    mean_blocks: float | None
    p95_blocks: float | None
    could_fit_one_rack: int  # started gangs of 2+ pods that fit in one rack
    in_one_rack: int  # of those, the ones that ran in one rack
    mean_utilisation: float
    p95_queue_delay: float | None

    @property
    def one_rack_share(self) -> float | None:
        return self.in_one_rack / self.could_fit_one_rack if self.could_fit_one_rack else None


def summarise_topology(summary: Summary, jobs: Sequence[Job], records: Sequence[JobRecord],
                       nodes: Sequence[NodeSpec], rack_label: str = RACK_LABEL,
                       block_label: str = BLOCK_LABEL) -> TopologySummary:
    """The placement figures of a run, from its jobs, records (with the nodes each started on) and nodes."""
    labels = {n.name: dict(n.labels) for n in nodes}
    by_id = {j.job_id: j for j in jobs}
    racks = domains(nodes, rack_label).values()
    largest_node = max((n.gpus for n in nodes), default=0)
    rack_spans: list[float] = []
    block_spans: list[float] = []
    could = landed = 0
    for record in records:
        job = by_id.get(record.job_id)
        if job is None or record.started_at is None or not record.nodes:
            continue
        in_racks = span(record.nodes, labels, rack_label)
        if not pods_fit(job, [largest_node]):
            rack_spans.append(in_racks)
            block_spans.append(span(record.nodes, labels, block_label))
        if job.pods > 1 and any(pods_fit(job, rack) for rack in racks):
            could += 1
            landed += in_racks == 1
    return TopologySummary(summary.mode, len(rack_spans), mean(rack_spans), percentile(rack_spans, 95),
                           mean(block_spans), percentile(block_spans, 95), could, landed,
                           summary.mean_utilisation, summary.p95_queue_delay)


def markdown_table(rows: Sequence[TopologySummary]) -> str:
    """One row per mode: spans, one-rack share, utilisation, p95 wait."""
    def num(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["| mode | multi-node gangs | racks mean | racks p95 | blocks mean | blocks p95 | one rack when it could "
             "| GPU utilisation | p95 wait (s) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        share = "-" if r.one_rack_share is None else f"{r.one_rack_share:.0%} ({r.in_one_rack}/{r.could_fit_one_rack})"
        lines.append(f"| {r.mode} | {r.multi_node_gangs} | {num(r.mean_racks)} | {num(r.p95_racks, 0)} | "
                     f"{num(r.mean_blocks)} | {num(r.p95_blocks, 0)} | {share} | {r.mean_utilisation:.1%} | "
                     f"{num(r.p95_queue_delay, 0)} |")
    return "\n".join(lines)


def required_violations(jobs: Sequence[Job], records: Sequence[JobRecord], nodes: Sequence[NodeSpec]) -> list[str]:
    """The jobs that require a topology level and started across more than one of its domains."""
    labels = {n.name: dict(n.labels) for n in nodes}
    by_id = {j.job_id: j for j in jobs}
    found = []
    for record in records:
        job = by_id.get(record.job_id)
        if job is None or not job.topology_required or record.started_at is None or not record.nodes:
            continue
        spanned = span(record.nodes, labels, job.topology_required)
        if spanned > 1:
            found.append(f"job {job.job_id} requires one {job.topology_required} and started in {spanned}: "
                         f"{', '.join(sorted(set(record.nodes)))}")
    return found


def required_line(jobs: Sequence[Job], records: Sequence[JobRecord], nodes: Sequence[NodeSpec]) -> str:
    """'12 jobs require one domain of a level, 11 started, 0 across domains' (and which)."""
    required = {j.job_id for j in jobs if j.topology_required}
    started = sum(1 for r in records if r.job_id in required and r.started_at is not None)
    broken = required_violations(jobs, records, nodes)
    line = f"{len(required)} jobs require one domain of a level, {started} started, {len(broken)} across domains"
    return line + (f" ({'; '.join(broken[:3])})" if broken else "")
