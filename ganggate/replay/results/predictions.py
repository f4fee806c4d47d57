"""How often the controller's start predictions held in a replay.

When the room held for a starving gang frees by known deadlines, its Event says when it will
start at the latest ("... starts after default/a-0 end, by 2026-11-25T14:20:00Z at the latest";
core.planner.start_message). A prediction held when the gang's pods all ran by then: the job's
recorded start (all pods running) is at or before the time promised, within `slack` seconds
(the controller's debounce and the steps of the replay's instant).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ganggate.replay.results.metrics import JobRecord

_BY = re.compile(r"by (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) at the latest")


@dataclass(frozen=True)
class PredictionScore:
    """Distinct (job, promised time) predictions made, and how many held."""

    made: int
    held: int

    def describe(self) -> str:
        if not self.made:
            return "no start predicted (no held room freed by known deadlines)"
        return f"{self.held}/{self.made} start predictions held ({self.held / self.made:.0%})"


def job_of(pod_name: str, jobs: set[str]) -> str | None:
    """The job a pod belongs to: its name is "<job>-<index>" (or, made by a Job, "<job>-<index>-<suffix>")."""
    for cut in (1, 2):
        head = pod_name.rsplit("-", cut)[0]
        if head in jobs:
            return head
    return None


def promised(events: Iterable[tuple[str, str, str, int]], jobs: set[str]) -> set[tuple[str, float]]:
    """(job, promised start, Unix seconds) from the Events' messages."""
    out = set()
    for _, name, message, _ in events:
        job = job_of(name, jobs)
        match = _BY.search(message)
        if job is not None and match is not None:
            out.add((job, datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S%z").timestamp()))
    return out


def score(events: Iterable[tuple[str, str, str, int]], records: Iterable[JobRecord], epoch_offset: float,
          slack: float = 2.0) -> PredictionScore:
    """How many of the predictions in the Events held (see the module's docstring); the
    records' times are simulated seconds, `epoch_offset` the Unix time of simulated 0."""
    starts = {r.job_id: r.started_at for r in records}
    made = held = 0
    for job, when in promised(events, set(starts)):
        made += 1
        start = starts.get(job)
        if start is not None and start + epoch_offset <= when + slack:
            held += 1
    return PredictionScore(made, held)
