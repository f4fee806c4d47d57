"""What a replay measured, as pure functions over a recorded timeline.

A replay records a `Sample` after each step of simulated time (the cluster is quiescent then,
so the values hold until the next sample) and one `JobRecord` per job. From those:

- busy GPUs: GPUs of the pods of jobs whose pods are all running (the job computes);
- held-idle GPUs: GPUs of bound pods of jobs not all running (they wait for the rest of their
  gang: a distributed training job cannot take a step before every rank has joined);
- GPU-hours busy / held idle: the time integrals of the two step functions;
- deadlocked jobs: jobs that never complete by the end of the run;
- queueing delay: submit -> all pods running; makespan: first submit -> last completion
  (none, i.e. never, when a job deadlocked).

Job by job (`JobFigures`): a mean over all jobs hides the few large gangs a starvation guard
exists for. A job that never started by the end of the run waited *at least* until the end:
its wait counts as end - submit (censored), so a gang that starves shows in the max wait
instead of vanishing from the figures.
- max wait and p99 wait over all jobs;
- wait by gang-size class (1 GPU, 2-8, 9-32, >32 GPUs): jobs, p95 and max wait;
- bounded slowdown, (wait + run) / max(run, 10 min), mean, p95 and max (Feitelson's bounded
  slowdown: the 10-minute floor keeps a short job's tiny run from blowing its ratio up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class JobProgress:
    """One job at one instant: how many of its pods are bound (not finished) and running."""

    job_id: str
    pods: int
    gpus_per_pod: int
    bound: int
    running: int
    #: GPUs its bound / running pods hold, counted from their allocated DRA claims (a --dra replay);
    #: None: pods x gpus_per_pod (device-plugin GPUs).
    bound_gpus: int | None = None
    running_gpus: int | None = None

    @property
    def all_running(self) -> bool:
        return self.running >= self.pods


@dataclass(frozen=True)
class Sample:
    """The cluster at `time`, valid until the next sample."""

    time: float
    busy_gpus: int
    held_idle_gpus: int
    jobs_running: int
    jobs_waiting: int
    jobs_finished: int


@dataclass(frozen=True)
class JobRecord:
    """One job's outcome: when it was submitted, started (all pods running) and finished."""

    job_id: str
    submit_time: float
    gpus: int
    started_at: float | None = None
    finished_at: float | None = None
    nodes: tuple[str, ...] = ()  # the nodes its pods ran on when it first started


#: (name, smallest GPUs, largest GPUs) of each gang-size class.
SIZE_CLASSES: tuple[tuple[str, int, float], ...] = (
    ("1 GPU", 0, 1), ("2-8", 2, 8), ("9-32", 9, 32), (">32", 33, float("inf")),
)
#: The bounded slowdown's floor on run time, seconds.
SLOWDOWN_FLOOR = 600.0


@dataclass(frozen=True)
class ClassWait:
    """The waits of one gang-size class."""

    name: str
    jobs: int
    p95_wait: float | None
    max_wait: float | None


@dataclass(frozen=True)
class JobFigures:
    """The job-by-job figures of one run."""

    max_wait: float | None
    p99_wait: float | None
    classes: tuple[ClassWait, ...]
    mean_slowdown: float | None
    p95_slowdown: float | None
    max_slowdown: float | None
    never_started: int

    def largest_class(self) -> ClassWait | None:
        """The largest gang-size class that has jobs (what a starvation guard is for)."""
        return next((c for c in reversed(self.classes) if c.jobs), None)


def size_class(gpus: int) -> str:
    """The name of the gang-size class of a job of `gpus` GPUs."""
    return next(name for name, low, high in SIZE_CLASSES if low <= gpus <= high)


def wait_of(record: JobRecord, end: float) -> float:
    """Submit -> start; a job that never started waited until `end` at least."""
    start = record.started_at if record.started_at is not None else end
    return max(start - record.submit_time, 0.0)


def run_of(record: JobRecord) -> float | None:
    """Start -> end (restarts after a disruption included); None until it has finished."""
    if record.started_at is None or record.finished_at is None:
        return None
    return record.finished_at - record.started_at


def slowdown(wait: float, run: float) -> float:
    """Bounded slowdown: (wait + run) / max(run, SLOWDOWN_FLOOR)."""
    return (wait + run) / max(run, SLOWDOWN_FLOOR)


def figures(records: Sequence[JobRecord], end: float) -> JobFigures:
    """The job-by-job figures of a run that ended at simulated time `end`."""
    waits = [wait_of(r, end) for r in records]
    classes = []
    for name, _, _ in SIZE_CLASSES:
        mine = [w for r, w in zip(records, waits, strict=True) if size_class(r.gpus) == name]
        classes.append(ClassWait(name, len(mine), percentile(mine, 95), max(mine, default=None)))
    slowdowns = [slowdown(w, run) for r, w in zip(records, waits, strict=True) if (run := run_of(r)) is not None]
    return JobFigures(
        max_wait=max(waits, default=None), p99_wait=percentile(waits, 99), classes=tuple(classes),
        mean_slowdown=mean(slowdowns), p95_slowdown=percentile(slowdowns, 95),
        max_slowdown=max(slowdowns, default=None),
        never_started=sum(1 for r in records if r.started_at is None),
    )


@dataclass(frozen=True)
class Summary:
    """The figures of one replay run (one admission mode)."""

    mode: str
    jobs: int
    completed: int
    deadlocked: int
    busy_gpu_hours: float
    held_idle_gpu_hours: float
    held_idle_gpus_at_end: int
    mean_utilisation: float
    mean_queue_delay: float | None
    p95_queue_delay: float | None
    makespan: float | None
    jobs_figures: JobFigures | None = None  # job by job: max and p99 wait, by class, slowdown


def split_gpus(jobs: Iterable[JobProgress]) -> tuple[int, int]:
    """(busy, held idle) GPUs: all-running jobs compute, bound pods of the others wait."""
    busy = held = 0
    for job in jobs:
        if job.all_running:
            busy += job.running * job.gpus_per_pod if job.running_gpus is None else job.running_gpus
        else:
            held += job.bound * job.gpus_per_pod if job.bound_gpus is None else job.bound_gpus
    return busy, held


def integrate(samples: Sequence[Sample], value: Callable[[Sample], float], end: float) -> float:
    """The integral over time of a step function that takes `value(sample)` from each
    sample's time until the next one (the last one until `end`), in value-seconds."""
    total = 0.0
    for here, there in zip(samples, list(samples[1:]) + [None], strict=True):
        until = end if there is None else there.time
        if until > here.time:
            total += value(here) * (until - here.time)
    return total


def busy_gpu_hours(samples: Sequence[Sample], end: float) -> float:
    return integrate(samples, lambda s: s.busy_gpus, end) / 3600.0


def held_idle_gpu_hours(samples: Sequence[Sample], end: float) -> float:
    return integrate(samples, lambda s: s.held_idle_gpus, end) / 3600.0


def utilisation_series(
    samples: Sequence[Sample], capacity: int
) -> list[tuple[float, float, float]]:
    """(time, busy fraction, held-idle fraction) of the cluster's GPUs at each sample."""
    if capacity <= 0:
        raise ValueError("capacity must be positive")
    return [(s.time, s.busy_gpus / capacity, s.held_idle_gpus / capacity) for s in samples]


def deadlocked(records: Iterable[JobRecord]) -> list[str]:
    """Ids of the jobs that never completed."""
    return [r.job_id for r in records if r.finished_at is None]


def queue_delays(records: Iterable[JobRecord]) -> list[float]:
    """Submit -> start for each job that started (jobs that never started are not delays
    but deadlocks or starvation, counted by `deadlocked`)."""
    return [r.started_at - r.submit_time for r in records if r.started_at is not None]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (0 < q <= 100): the smallest value with at least
    q% of the values at or below it."""
    if not 0 < q <= 100:
        raise ValueError("q must be in (0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q / 100.0 * len(ordered))
    return ordered[max(rank, 1) - 1]


def makespan(records: Sequence[JobRecord]) -> float | None:
    """First submit -> last completion; None (never) when some job never completed."""
    if not records or any(r.finished_at is None for r in records):
        return None
    return max(r.finished_at for r in records if r.finished_at is not None) - min(r.submit_time for r in records)


def summarise(
    mode: str, samples: Sequence[Sample], records: Sequence[JobRecord], capacity: int, end: float
) -> Summary:
    """All the figures of one run that ended at simulated time `end`."""
    delays = queue_delays(records)
    start = min((r.submit_time for r in records), default=0.0)
    span = end - start
    busy = busy_gpu_hours(samples, end)
    return Summary(
        mode=mode,
        jobs=len(records),
        completed=sum(1 for r in records if r.finished_at is not None),
        deadlocked=len(deadlocked(records)),
        busy_gpu_hours=busy,
        held_idle_gpu_hours=held_idle_gpu_hours(samples, end),
        held_idle_gpus_at_end=samples[-1].held_idle_gpus if samples else 0,
        mean_utilisation=(busy * 3600.0 / (capacity * span)) if span > 0 and capacity > 0 else 0.0,
        mean_queue_delay=mean(delays),
        p95_queue_delay=percentile(delays, 95),
        makespan=makespan(records),
        jobs_figures=figures(records, end),
    )
