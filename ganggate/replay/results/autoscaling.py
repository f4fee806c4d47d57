"""What an autoscaled cluster costs and gives, per mode of a replay with node groups: GPU-hours
provisioned (what the user pays), busy (GPUs of running pods), held by gangs that run partly
(the GPUs a gang without all its pods holds idle), idle but paid, and how soon gangs start."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ganggate.replay.results.metrics import JobRecord, Sample


@dataclass(frozen=True)
class Paid:
    mode: str
    provisioned_gpu_hours: float
    busy_gpu_hours: float
    partial_gpu_hours: float
    idle_paid_gpu_hours: float
    started: int
    jobs: int
    mean_start_minutes: float | None
    p95_start_minutes: float | None


def _integral(points: Sequence[tuple[float, float]], end: float) -> float:
    """The area under a step function given as (time, value from then on), up to `end`, in hours."""
    total = 0.0
    for (time, value), (after, _) in zip(points, [*points[1:], (end, 0.0)], strict=True):
        total += value * max(0.0, min(after, end) - time)
    return total / 3600.0


def paid(mode: str, provisioned: Sequence[tuple[float, int]], samples: Sequence[Sample],
         records: Sequence[JobRecord], end: float) -> Paid:
    """The figures of one run that ended at `end`."""
    busy = _integral([(s.time, s.busy_gpus) for s in samples], end)
    held = _integral([(s.time, s.held_idle_gpus) for s in samples], end)
    bought = _integral([(t, g) for t, g in provisioned], end)
    waits = sorted((r.started_at - r.submit_time) / 60.0 for r in records if r.started_at is not None)
    p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else None
    return Paid(mode, bought, busy, held, max(0.0, bought - busy), len(waits), len(records),
                statistics.fmean(waits) if waits else None, p95)


def markdown_table(rows: Sequence[Paid]) -> str:
    head = ("| mode | GPU-h provisioned | busy | held by partial gangs | idle but paid | jobs started | "
            "mean start (min) | p95 start (min) |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    def minutes(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"
    lines = [f"| {r.mode} | {r.provisioned_gpu_hours:.1f} | {r.busy_gpu_hours:.1f} | {r.partial_gpu_hours:.1f} | "
             f"{r.idle_paid_gpu_hours:.1f} | {r.started}/{r.jobs} | {minutes(r.mean_start_minutes)} | "
             f"{minutes(r.p95_start_minutes)} |" for r in rows]
    return "\n".join([head, *lines])
