"""Jobs from the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, CC-BY 4.0).

Reads an `openb_pod_list_*.csv` of the dataset in place (../shared/traces/alibaba-gpu-v2023/,
Weng et al., "Beware of Fragmentation", USENIX ATC 2023; nothing is copied into the repo).
The dataset lists pods, not jobs, and records no gang membership, so each pod that was ever
scheduled becomes a job of one pod:

- submit_time = creation_time (shifted so that the first kept pod arrives at 0);
- run_time = deletion_time - scheduled_time (pods never scheduled, or with no run, are skipped);
- GPUs = num_gpu; a GPU-sharing pod (num_gpu 1, gpu_milli < 1000) asks for a whole GPU, since
  kubesim has no GPU sharing; gpu_spec (GPU model constraints) is ignored;
- CPU = cpu_milli "m", memory = memory_mib "Mi"; a pod recorded with no CPU or no memory is
  skipped (openb_pod_list_default.csv has one).

With one-pod jobs all-or-nothing changes nothing by itself; what differs between the modes is
where pods go (ganggate pins each gang by best fit, the default scheduler spreads).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Mapping

from ganggate.replay.trace import Job, TraceError, parse_row

TRACE_HINT = ("The Alibaba GPU trace is not part of the repository: download openb_pod_list_default.csv from "
              "https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023 (CC-BY 4.0) "
              "and pass its path to --alibaba.")
REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "creation_time", "deletion_time", "scheduled_time")


def convert_rows(rows: Iterable[Mapping[str, str]], limit: int | None = None) -> list[Job]:
    """Pods (rows of an openb_pod_list CSV) -> one-pod jobs, the first `limit` by creation time."""
    kept: list[tuple[int, Job]] = []
    for line, row in enumerate(rows, start=2):
        try:
            scheduled = (row.get("scheduled_time") or "").strip()
            if not scheduled:
                continue  # never scheduled (Pending in the trace): nothing to replay
            created, deleted, started = int(row["creation_time"]), int(row["deletion_time"]), int(scheduled)
            run_time = deleted - started
            if run_time <= 0:
                continue
            gpus = int(row["num_gpu"])
            cpu_milli, memory_mib = int(row["cpu_milli"]), int(row["memory_mib"])
        except (KeyError, ValueError) as exc:
            raise TraceError(f"line {line}: not an openb pod row ({exc})") from None
        if gpus < 0 or cpu_milli < 0 or memory_mib < 0:
            raise TraceError(f"line {line}: negative resources")
        if cpu_milli == 0 or memory_mib == 0:
            continue  # the trace format needs a CPU and a memory request (one such pod in default)
        # Through the trace format's own validation (job ids, quantities, ranges).
        kept.append((created, parse_row({
            "job_id": row["name"].strip().lower(),
            "submit_time": str(created),
            "pods": "1",
            "gpus_per_pod": str(gpus),
            "cpu_per_pod": f"{cpu_milli}m",
            "memory_per_pod": f"{memory_mib}Mi",
            "run_time": str(run_time),
        }, line)))
    kept.sort(key=lambda item: item[0])
    if limit is not None:
        kept = kept[:limit]
    if not kept:
        raise TraceError("no pod of the trace was ever scheduled: nothing to replay")
    origin = kept[0][0]
    return [Job(j.job_id, float(created - origin), j.pods, j.gpus_per_pod, j.cpu_per_pod, j.memory_per_pod,
                j.run_time) for created, j in kept]


def load_alibaba(path: str | Path, limit: int | None = None) -> list[Job]:
    """Read an openb_pod_list CSV and convert it (see the module docstring)."""
    try:
        with open(path, newline="", encoding="utf-8") as stream:
            reader = csv.DictReader(stream)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{path}: not an openb_pod_list CSV (no column {', '.join(missing)})")
            return convert_rows(reader, limit)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from None
