"""Jobs from the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, CC-BY 4.0).

Reads an `openb_pod_list_*.csv` of the dataset in place (../shared/traces/alibaba-gpu-v2023/,
Weng et al., "Beware of Fragmentation", USENIX ATC 2023; nothing is copied into the repo).
Every pod that was ever scheduled is kept:

- submit_time = creation_time (shifted so that the first kept pod arrives at 0);
- run_time = deletion_time - scheduled_time (pods never scheduled, or with no run, are skipped);
- GPUs = num_gpu; a GPU-sharing pod (num_gpu 1, gpu_milli < 1000) asks for a whole GPU, since
  kubesim has no GPU sharing; gpu_spec (GPU model constraints) is ignored for placement;
- CPU = cpu_milli "m", memory = memory_mib "Mi"; a pod recorded with no CPU or no memory is
  skipped (openb_pod_list_default.csv has one).

The dataset records no gang membership. `load_alibaba` makes each pod a job of one pod (with
one-pod jobs all-or-nothing changes nothing by itself; what differs between the modes is where
pods go). `load_alibaba_gangs` reads gangs into it by one stated, deterministic rule
(`group_gangs`): pods of the same shape (cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec,
qos) created within `window` seconds of the first pod of their group are the replicas of one
job, a gang. Why that is a fair reading: such pods also *end* together far more often than
chance (docs/replay.md gives the figures), as the ranks of one job do.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ganggate.replay.traces.format import Job, TraceError, parse_row

TRACE_HINT = ("The Alibaba GPU trace is not part of the repository: download openb_pod_list_default.csv from "
              "https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023 (CC-BY 4.0) "
              "and pass its path to --alibaba.")
REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "creation_time", "deletion_time", "scheduled_time")
#: Seconds within which same-shape pods are read as one gang (`group_gangs`, docs/replay.md).
GANG_WINDOW = 60.0


@dataclass(frozen=True)
class Pod:
    """One scheduled pod of the list, as the replay needs it."""

    name: str
    created: int
    run_time: int
    gpus: int
    cpu_milli: int
    memory_mib: int
    shape: tuple[str, ...]  # what must be equal for two pods to be replicas of one job
    line: int


def scheduled_pods(rows: Iterable[Mapping[str, str]], first_line: int = 2) -> Iterator[Pod]:
    """The pods of an openb_pod_list that ran, in file order; a malformed row raises TraceError
    naming its line (the first row's is `first_line`)."""
    for line, row in enumerate(rows, start=first_line):
        try:
            scheduled = (row.get("scheduled_time") or "").strip()
            if not scheduled:
                continue  # never scheduled (Pending in the trace): nothing to replay
            created, deleted, started = int(row["creation_time"]), int(row["deletion_time"]), int(scheduled)
            gpus, cpu_milli, memory_mib = int(row["num_gpu"]), int(row["cpu_milli"]), int(row["memory_mib"])
        except (KeyError, ValueError) as exc:
            raise TraceError(f"line {line}: not an openb pod row ({exc})") from None
        if gpus < 0 or cpu_milli < 0 or memory_mib < 0:
            raise TraceError(f"line {line}: negative resources")
        if deleted - started <= 0 or cpu_milli == 0 or memory_mib == 0:
            continue  # no run; or no CPU / memory request, which the trace format needs (one such pod in default)
        shape = tuple((row.get(c) or "").strip() for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
                                                            "gpu_spec", "qos"))
        yield Pod(row["name"].strip().lower(), created, deleted - started, gpus, cpu_milli, memory_mib, shape, line)


def group_gangs(pods: Iterable[Pod], window: float = GANG_WINDOW) -> list[list[Pod]]:
    """Pods -> gangs, in creation order (ties by name): a pod joins the open group of its shape
    if it was created at most `window` seconds after that group's first pod, else it opens a
    new one. Deterministic: the same list and window give the same gangs."""
    if window < 0:
        raise ValueError("the gang window must be 0 or more seconds")
    groups: list[list[Pod]] = []
    open_by_shape: dict[tuple[str, ...], list[Pod]] = {}
    for pod in sorted(pods, key=lambda p: (p.created, p.name)):
        group = open_by_shape.get(pod.shape)
        if group is not None and pod.created - group[0].created <= window:
            group.append(pod)
            continue
        group = open_by_shape[pod.shape] = [pod]
        groups.append(group)
    return groups


def _job(group: list[Pod], origin: int) -> Job:
    """A gang as a trace job, through the trace format's own validation: named after its first pod,
    submitted when it was created, running as long as its longest pod (a job holds its GPUs until
    its last rank ends)."""
    first = group[0]
    return parse_row({
        "job_id": first.name,
        "submit_time": str(first.created - origin),
        "pods": str(len(group)),
        "gpus_per_pod": str(first.gpus),
        "cpu_per_pod": f"{first.cpu_milli}m",
        "memory_per_pod": f"{first.memory_mib}Mi",
        "run_time": str(max(p.run_time for p in group)),
    }, first.line)


def _jobs(groups: list[list[Pod]], limit: int | None) -> list[Job]:
    groups = sorted(groups, key=lambda g: (g[0].created, g[0].name))[:limit]
    if not groups:
        raise TraceError("no pod of the trace was ever scheduled: nothing to replay")
    origin = groups[0][0].created
    return [_job(group, origin) for group in groups]


def convert_rows(rows: Iterable[Mapping[str, str]], limit: int | None = None, first_line: int = 2) -> list[Job]:
    """Pods (rows of an openb_pod_list CSV) -> one-pod jobs, the first `limit` by creation time."""
    return _jobs([[pod] for pod in scheduled_pods(rows, first_line)], limit)


def convert_gangs(rows: Iterable[Mapping[str, str]], limit: int | None = None,
                  window: float = GANG_WINDOW, first_line: int = 2) -> list[Job]:
    """Pods -> gang jobs (`group_gangs`), the first `limit` gangs by creation time."""
    return _jobs(group_gangs(scheduled_pods(rows, first_line), window), limit)


def _read(path: str | Path) -> tuple[list[dict[str, str]], int]:
    """The rows of the file and the line number of the first; lines starting with `#` before the
    header are skipped (an excerpt keeps its attribution there, as the CC-BY licence asks)."""
    try:
        with open(path, newline="", encoding="utf-8") as stream:
            lines = stream.read().splitlines(keepends=True)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from None
    skipped = 0
    while skipped < len(lines) and lines[skipped].startswith("#"):
        skipped += 1
    reader = csv.DictReader(lines[skipped:])
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(f"{path}: not an openb_pod_list CSV (no column {', '.join(missing)})")
    return list(reader), skipped + 2


def load_alibaba(path: str | Path, limit: int | None = None) -> list[Job]:
    """Read an openb_pod_list CSV and convert it, a job per pod (see the module docstring)."""
    rows, first_line = _read(path)
    return convert_rows(rows, limit, first_line)


def load_alibaba_gangs(path: str | Path, limit: int | None = None, window: float = GANG_WINDOW) -> list[Job]:
    """Read an openb_pod_list CSV and convert it into gangs (`group_gangs`)."""
    rows, first_line = _read(path)
    return convert_gangs(rows, limit, window, first_line)
