"""The job-trace CSV format: load, validate and write.

A trace is one CSV row per job (a gang of identical pods):

    job_id,submit_time,pods,gpus_per_pod,cpu_per_pod,memory_per_pod,run_time,priority

`submit_time` and `run_time` are seconds (decimals allowed); `cpu_per_pod` is a Kubernetes
quantity or plain cores ("500m", "4", "2.5"); `memory_per_pod` a quantity ("16Gi");
`priority` an integer (optional column, default 0). Two more optional columns,
`topology_required` and `topology_preferred`, give a job's topology level (a node label key,
e.g. ganggate.io/rack; empty: none), which its pods carry as the annotations
scheduling.k8s.io/group-topology-required / -preferred. Bad input is reported as a
`TraceError` naming the line and the column, and nothing is returned.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from ganggate.contract import is_label_key
from ganggate.core.fit.resources import QuantityError, parse_quantity

COLUMNS = (
    "job_id",
    "submit_time",
    "pods",
    "gpus_per_pod",
    "cpu_per_pod",
    "memory_per_pod",
    "run_time",
    "priority",
)
OPTIONAL_COLUMNS = ("priority",)
#: Optional columns after COLUMNS, written only when a job has a value in them.
TOPOLOGY_COLUMNS = ("topology_required", "topology_preferred")

# The job id names the gang (scheduling.k8s.io/group-name) and prefixes its pods' names,
# so it must be a DNS-1123 label short enough to leave room for "-<index>"
# (k8s.io/apimachinery/pkg/util/validation.IsDNS1123Label).
_JOB_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
JOB_ID_MAX = 50
MAX_PODS = 10000


class TraceError(ValueError):
    """A trace that cannot be replayed, with where and why."""


@dataclass(frozen=True)
class Job:
    """One job of a trace: `pods` pods, each asking for the same resources, all run `run_time`."""

    job_id: str
    submit_time: float
    pods: int
    gpus_per_pod: int
    cpu_per_pod: str
    memory_per_pod: str
    run_time: float
    priority: int = 0
    #: Topology levels (node label keys) the gang requires / prefers to sit in one domain of.
    topology_required: str | None = None
    topology_preferred: str | None = None
    #: The pods' spec.activeDeadlineSeconds (a run-time bound the user states; replay
    #: --deadline-factor sets it from run_time), None: none.
    deadline_seconds: int | None = None

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return self.pods * self.gpus_per_pod


def _number(text: str, line: int, column: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"line {line}: {column}={text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        rule = "greater than 0" if positive else "0 or more"
        raise TraceError(f"line {line}: {column}={text!r} must be {rule}")
    return value


def _integer(text: str, line: int, column: str, low: int, high: int) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise TraceError(f"line {line}: {column}={text!r} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise TraceError(f"line {line}: {column}={text!r} must be from {low} to {high}")
    return value


def _quantity(text: str, line: int, column: str) -> str:
    try:
        milli = parse_quantity(text)
    except QuantityError:
        raise TraceError(f"line {line}: {column}={text!r} is not a Kubernetes quantity") from None
    if milli <= 0:
        raise TraceError(f"line {line}: {column}={text!r} must be greater than 0")
    return text


def parse_row(row: dict[str, str], line: int) -> Job:
    """One CSV row (already keyed by column) -> a Job, or TraceError."""
    values = {k: (row.get(k) or "").strip() for k in COLUMNS}
    for column in COLUMNS:
        if column not in OPTIONAL_COLUMNS and not values[column]:
            raise TraceError(f"line {line}: {column} is empty")
    job_id = values["job_id"]
    if len(job_id) > JOB_ID_MAX or not _JOB_ID.match(job_id):
        raise TraceError(
            f"line {line}: job_id={job_id!r} must be a DNS-1123 label of at most {JOB_ID_MAX} "
            "characters (lower-case alphanumerics or '-', starting and ending alphanumeric)"
        )
    return Job(
        job_id=job_id,
        submit_time=_number(values["submit_time"], line, "submit_time", positive=False),
        pods=_integer(values["pods"], line, "pods", 1, MAX_PODS),
        gpus_per_pod=_integer(values["gpus_per_pod"], line, "gpus_per_pod", 0, 1024),
        cpu_per_pod=_quantity(values["cpu_per_pod"], line, "cpu_per_pod"),
        memory_per_pod=_quantity(values["memory_per_pod"], line, "memory_per_pod"),
        run_time=_number(values["run_time"], line, "run_time", positive=True),
        priority=_integer(values["priority"] or "0", line, "priority", -(2**31), 10**9),
        topology_required=_level(row.get("topology_required"), line, "topology_required"),
        topology_preferred=_level(row.get("topology_preferred"), line, "topology_preferred"),
    )


def _level(text: str | None, line: int, column: str) -> str | None:
    """An optional topology level: empty is none, else a node label key."""
    value = (text or "").strip()
    if not value:
        return None
    if not is_label_key(value):
        raise TraceError(f"line {line}: {column}={value!r} is not a node label key (e.g. ganggate.io/rack)")
    return value


def read_trace(stream: TextIO) -> list[Job]:
    """Parse a trace from an open text stream; jobs come back sorted by submit time (stable).

    One record per line; blank lines and lines starting with '#' are skipped.
    """
    numbered = [
        (number, text)
        for number, text in enumerate(stream, start=1)
        if text.strip() and not text.lstrip().startswith("#")
    ]
    if not numbered:
        raise TraceError("the trace is empty: expected a header line " + ",".join(COLUMNS))
    rows = list(csv.reader(text for _, text in numbered))
    if len(rows) != len(numbered):
        raise TraceError("a quoted field spans lines: one job per line, please")
    header_line = numbered[0][0]
    header = [h.strip() for h in rows[0]]
    missing = [c for c in COLUMNS if c not in header and c not in OPTIONAL_COLUMNS]
    if missing:
        raise TraceError(f"line {header_line}: the header lacks column(s) {', '.join(missing)}")
    unknown = [c for c in header if c not in COLUMNS + TOPOLOGY_COLUMNS]
    if unknown or len(set(header)) != len(header):
        bad = unknown or sorted({c for c in header if header.count(c) > 1})
        raise TraceError(f"line {header_line}: unknown or repeated column(s) {', '.join(bad)}")
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for (line, _), fields in zip(numbered[1:], rows[1:], strict=True):
        if len(fields) != len(header):
            raise TraceError(
                f"line {line}: {len(fields)} fields where the header has {len(header)}"
            )
        job = parse_row(dict(zip(header, fields, strict=True)), line)
        if job.job_id in seen:
            raise TraceError(
                f"line {line}: job_id={job.job_id!r} repeats line {seen[job.job_id]}"
            )
        seen[job.job_id] = line
        jobs.append(job)
    if not jobs:
        raise TraceError("the trace has a header but no jobs")
    return sorted(jobs, key=lambda j: j.submit_time)


def load_trace(path: str | Path) -> list[Job]:
    """Read and validate a trace file."""
    try:
        with open(path, newline="", encoding="utf-8") as stream:
            return read_trace(stream)
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TraceError(f"trace {path} is not UTF-8 text") from None


def format_trace(jobs: Iterable[Job]) -> str:
    """The CSV text of a trace (header included)."""
    jobs = list(jobs)
    topology = any(job.topology_required or job.topology_preferred for job in jobs)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS + (TOPOLOGY_COLUMNS if topology else ()))
    for job in jobs:
        row = [
            job.job_id,
            _seconds(job.submit_time),
            job.pods,
            job.gpus_per_pod,
            job.cpu_per_pod,
            job.memory_per_pod,
            _seconds(job.run_time),
            job.priority,
        ]
        writer.writerow(row + ([job.topology_required or "", job.topology_preferred or ""] if topology else []))
    return out.getvalue()


def write_trace(jobs: Iterable[Job], path: str | Path) -> None:
    Path(path).write_text(format_trace(jobs), encoding="utf-8")


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}".rstrip("0")


def with_deadlines(jobs: list[Job], factor: float | None) -> list[Job]:
    """The jobs with deadline_seconds = ceil(factor x run_time) (None: unchanged); a factor
    below 1 would kill jobs before they finish, and is refused (ValueError)."""
    if factor is None:
        return jobs
    if not factor >= 1:
        raise ValueError(f"--deadline-factor {factor:g}: must be at least 1 (a deadline before a job's run time "
                         "ends it unfinished)")
    return [replace(job, deadline_seconds=max(1, math.ceil(factor * job.run_time))) for job in jobs]
