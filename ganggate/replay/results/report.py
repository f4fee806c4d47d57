"""Replay results as text and files: the per-mode table, summary.csv and timeseries.csv."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ganggate.replay.results.metrics import SIZE_CLASSES, ClassWait, JobFigures, JobRecord, Sample, Summary, run_of

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
    "max_wait_s",
    "p99_wait_s",
    *(f"{kind}_wait_s_{name.replace(' GPU', '').replace('>', 'over')}" for name, _, _ in SIZE_CLASSES
      for kind in ("p95", "max")),
    "mean_slowdown",
    "p95_slowdown",
    "max_slowdown",
)
JOBS_COLUMNS = ("mode", "job", "gpus", "submit_s", "start_s", "end_s", "wait_s", "run_s")
TIMESERIES_COLUMNS = ("mode", "time_s", "busy_gpus", "held_idle_gpus", "jobs_running", "jobs_waiting",
                      "jobs_finished")


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def summary_row(s: Summary) -> list[str]:
    return [
        s.mode, str(s.jobs), str(s.completed), str(s.deadlocked), _num(s.busy_gpu_hours, 2),
        _num(s.held_idle_gpu_hours, 2), str(s.held_idle_gpus_at_end), _num(s.mean_utilisation, 3),
        _num(s.mean_queue_delay), _num(s.p95_queue_delay), _num(s.makespan),
        *_figures_row(s.jobs_figures),
    ]


def _figures_row(f: JobFigures | None) -> list[str]:
    """summary.csv's job-by-job columns (empty without figures)."""
    if f is None:
        return [""] * (4 + 2 * len(SIZE_CLASSES))
    by_class = [_num(value) for c in f.classes for value in (c.p95_wait, c.max_wait)]
    return [_num(f.max_wait), _num(f.p99_wait), *by_class, _num(f.mean_slowdown, 2), _num(f.p95_slowdown, 2),
            _num(f.max_slowdown, 2)]


def write_jobs_csv(runs: Mapping[str, Sequence[JobRecord]], path: str | Path) -> Path:
    """jobs.csv: one row per job and mode: its gang size in GPUs, submit, start (all pods
    running), end, wait and run, in simulated seconds; empty where it never started or ended."""
    def row(mode: str, rec: JobRecord) -> list[object]:
        wait = None if rec.started_at is None else rec.started_at - rec.submit_time
        return [mode, rec.job_id, rec.gpus, _num(rec.submit_time), _num(rec.started_at), _num(rec.finished_at),
                _num(wait), _num(run_of(rec))]

    return _write_csv(path, JOBS_COLUMNS, (row(mode, rec) for mode, records in runs.items() for rec in records))


def write_summary_csv(summaries: Sequence[Summary], path: str | Path) -> Path:
    return _write_csv(path, SUMMARY_COLUMNS, (summary_row(summary) for summary in summaries))


def write_timeseries_csv(runs: Mapping[str, Sequence[Sample]], path: str | Path) -> Path:
    return _write_csv(path, TIMESERIES_COLUMNS, (
        [mode, _num(s.time, 3), s.busy_gpus, s.held_idle_gpus, s.jobs_running, s.jobs_waiting, s.jobs_finished]
        for mode, samples in runs.items() for s in samples))


def _write_csv(path: str | Path, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    """A CSV file of the header and the rows, "\n" line ends."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
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


def jobs_table(summaries: Sequence[Summary]) -> str:
    """Job by job, per mode: max and p99 wait, p95 / max wait of each gang-size class that has
    jobs, and bounded slowdown (docs/replay.md). A job that never started counts as waiting
    until the end of the run."""
    shown = [name for name, _, _ in SIZE_CLASSES
             if any(s.jobs_figures and _class(s.jobs_figures, name).jobs for s in summaries)]
    lines = [
        "| mode | max wait | p99 wait | " + " | ".join(f"{n} p95 / max wait" for n in shown)
        + " | bounded slowdown mean / p95 / max |",
        "|---|---:|---:|" + "---:|" * len(shown) + "---:|",
    ]
    for s in summaries:
        f = s.jobs_figures
        if f is None:
            continue
        cells = [f"{_duration(_class(f, n).p95_wait)} / {_duration(_class(f, n).max_wait)} "
                 f"({_class(f, n).jobs})" for n in shown]
        slow = " / ".join("-" if v is None else f"{v:.1f}" for v in (f.mean_slowdown, f.p95_slowdown, f.max_slowdown))
        lines.append(f"| {s.mode} | {_duration(f.max_wait)} | {_duration(f.p99_wait)} | "
                     + " | ".join(cells) + f" | {slow} |")
    return "\n".join(lines)


def _class(f: JobFigures, name: str) -> ClassWait:
    """The figures of the class named `name`."""
    return next(c for c in f.classes if c.name == name)
