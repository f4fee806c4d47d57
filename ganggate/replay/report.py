"""Replay results as text and files: the per-mode table, summary.csv and timeseries.csv."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping, Sequence

from ganggate.replay.metrics import Sample, Summary

SUMMARY_COLUMNS = (
    "mode",
    "jobs",
    "completed",
    "deadlocked",
    "busy_gpu_hours",
    "held_idle_gpu_hours",
    "held_idle_gpus_at_end",
    "mean_utilisation",
    "mean_queue_delay_s",
    "p95_queue_delay_s",
    "makespan_s",
)
TIMESERIES_COLUMNS = ("mode", "time_s", "busy_gpus", "held_idle_gpus", "jobs_running", "jobs_waiting",
                      "jobs_finished")


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def summary_row(s: Summary) -> list[str]:
    return [
        s.mode, str(s.jobs), str(s.completed), str(s.deadlocked), _num(s.busy_gpu_hours, 2),
        _num(s.held_idle_gpu_hours, 2), str(s.held_idle_gpus_at_end), _num(s.mean_utilisation, 3),
        _num(s.mean_queue_delay), _num(s.p95_queue_delay), _num(s.makespan),
    ]


def write_summary_csv(summaries: Sequence[Summary], path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(SUMMARY_COLUMNS)
        for summary in summaries:
            writer.writerow(summary_row(summary))
    return path


def write_timeseries_csv(runs: Mapping[str, Sequence[Sample]], path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(TIMESERIES_COLUMNS)
        for mode, samples in runs.items():
            for s in samples:
                writer.writerow([mode, _num(s.time, 3), s.busy_gpus, s.held_idle_gpus, s.jobs_running,
                                 s.jobs_waiting, s.jobs_finished])
    return path


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def markdown_table(summaries: Sequence[Summary]) -> str:
    """The per-mode comparison as a Markdown table (what docs/replay.md shows)."""
    lines = [
        "| mode | jobs completed | deadlocked | GPU-hours held idle | GPUs held idle at end | "
        "busy GPU-hours | mean utilisation | mean queueing delay | p95 queueing delay | makespan |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.mode} | {s.completed}/{s.jobs} | {s.deadlocked} | {s.held_idle_gpu_hours:.1f} | "
            f"{s.held_idle_gpus_at_end} | {s.busy_gpu_hours:.1f} | {s.mean_utilisation:.1%} | "
            f"{_duration(s.mean_queue_delay)} | {_duration(s.p95_queue_delay)} | "
            f"{'never (deadlock)' if s.deadlocked else _duration(s.makespan)} |"
        )
    return "\n".join(lines)
