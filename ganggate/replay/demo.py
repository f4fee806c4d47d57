"""`ganggate demo`: the seed's story on an embedded cluster, without and then with ganggate.

13 nodes of 8 GPUs, 5 GPUs of the last one taken by an inference server: 99 GPUs free. A
training job of 100 pods (1 GPU each) arrives, then a stream of small 2-pod jobs; at minute 40
a node is added. The default scheduler alone binds 99 pods of the big job, which then holds 99
GPUs doing nothing while the small jobs starve. With ganggate the big job waits behind its
gate holding nothing, the small jobs run, and the big job starts the moment the node joins.
Both runs use kubesim, the real webhook (HTTPS, registered by a MutatingWebhookConfiguration)
and the real controller, in simulated time.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from ganggate.replay.run.engine import run_scenario
from ganggate.replay.run.scenario import Background, NodeEvent, NodeSpec, RunResult, Scenario, StepView
from ganggate.replay.traces.format import Job

# The controller runs on the replay's simulated clock, so its starvation guard fires in
# simulated time. The big job cannot fit before the node joins at minute 40 (the inference
# server never ends); a hold-back from minute 5 on would hold back the whole cluster, the small
# jobs waiting with it. No pod here has a deadline, so a hold would be blind, and the default
# holds blind only after 6 h (#20): the story is told with the controller's defaults.
CONTROLLER_SETTINGS: dict[str, float] = {}

BIG_JOB = "train-100"
NODE_ADDED_AT = 40 * 60.0
SMALL_JOBS = 8
LABELS = {"none": "default scheduler", "ganggate": "ganggate"}
LEGEND = ("GPUs busy: held by pods of jobs that run; held idle: held by pods of a job that cannot start "
          "until all its pods are placed, doing no work")


def demo_scenario() -> Scenario:
    """The cluster, the jobs and the node that joins at minute 40."""
    nodes = [NodeSpec(f"gpu-{i}", 8) for i in range(13)]
    jobs = [Job(BIG_JOB, 0.0, 100, 1, "2", "8Gi", 30 * 60.0)]
    for i in range(SMALL_JOBS):
        jobs.append(Job(f"small-{i + 1}", 60.0 + 180.0 * i, 2, 2, "2", "8Gi", 10 * 60.0))
    return Scenario(
        jobs=jobs,
        nodes=nodes,
        node_events=[NodeEvent(NODE_ADDED_AT, NodeSpec("gpu-13", 8))],
        background=[Background("inference-server", node="gpu-12", gpus=5)],
    )


@dataclass(frozen=True)
class Style:
    color: bool

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def red(self, text: str) -> str:
        return self.paint(text, "31;1")

    def green(self, text: str) -> str:
        return self.paint(text, "32;1")

    def bold(self, text: str) -> str:
        return self.paint(text, "1")

    def dim(self, text: str) -> str:
        return self.paint(text, "2")


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}:{secs:02d}"


def step_line(step: StepView, style: Style) -> str:
    """One line of the live view: time, the big job's progress, GPUs held, jobs running/finished."""
    big = step.progress.get(BIG_JOB)
    placed = big.bound if big else 0
    total = big.pods if big else 100
    record = step.records.get(BIG_JOB)
    if record is not None and record.finished_at is not None:
        big_text = style.green("big job done")
    elif record is not None and record.started_at is not None:
        big_text = style.green(f"big job running {total}/{total}")
    else:
        big_text = f"big job {placed:3d}/{total} placed"
    held = step.sample.held_idle_gpus
    held_text = f"held idle {held:3d}"
    held_text = style.red(held_text) if held else held_text
    sample = step.sample
    events = "; ".join(step.events)
    return (
        f"[{LABELS.get(step.mode, step.mode):>17}] t={clock_text(step.time)}  {big_text} | "
        f"GPUs busy {sample.busy_gpus:3d}  {held_text} | jobs: {sample.jobs_running} running, "
        f"{sample.jobs_waiting} waiting, {sample.jobs_finished} done  {style.dim(events) if events else ''}"
    ).rstrip()


@dataclass(frozen=True)
class DemoFacts:
    """What the summary compares, for one run."""

    held_idle_gpu_hours: float
    peak_held_idle_gpus: int
    small_done_before_node: int
    small_mean_wait: float | None
    big_started_at: float | None
    all_done_at: float | None
    deadlocked: int


def facts(result: RunResult) -> DemoFacts:
    records = {r.job_id: r for r in result.records}
    small = [r for r in result.records if r.job_id != BIG_JOB]
    waits = [r.started_at - r.submit_time for r in small if r.started_at is not None]
    return DemoFacts(
        held_idle_gpu_hours=result.summary.held_idle_gpu_hours,
        peak_held_idle_gpus=max((s.held_idle_gpus for s in result.samples), default=0),
        small_done_before_node=sum(1 for r in small if r.finished_at is not None and r.finished_at <= NODE_ADDED_AT),
        small_mean_wait=sum(waits) / len(waits) if waits else None,
        big_started_at=records[BIG_JOB].started_at if BIG_JOB in records else None,
        all_done_at=max((r.finished_at for r in result.records if r.finished_at is not None), default=None)
        if result.summary.deadlocked == 0 else None,
        deadlocked=result.summary.deadlocked,
    )


def _minutes(seconds: float | None) -> str:
    return "never" if seconds is None else f"minute {seconds / 60:.0f}"


def summary_table(without: DemoFacts, with_gate: DemoFacts, style: Style) -> str:
    """The two-column comparison printed at the end."""
    rows = [
        ("GPUs held idle by an incomplete job (peak)", str(without.peak_held_idle_gpus),
         str(with_gate.peak_held_idle_gpus)),
        ("GPU-hours held idle", f"{without.held_idle_gpu_hours:.1f}", f"{with_gate.held_idle_gpu_hours:.1f}"),
        (f"small jobs done before the node joined (of {SMALL_JOBS})", str(without.small_done_before_node),
         str(with_gate.small_done_before_node)),
        ("small jobs' mean wait",
         "-" if without.small_mean_wait is None else f"{without.small_mean_wait / 60:.1f} min",
         "-" if with_gate.small_mean_wait is None else f"{with_gate.small_mean_wait / 60:.1f} min"),
        ("big job started", _minutes(without.big_started_at), _minutes(with_gate.big_started_at)),
        ("every job done", _minutes(without.all_done_at), _minutes(with_gate.all_done_at)),
    ]
    width = max(len(r[0]) for r in rows)
    head = f"{'':{width}}   {'default scheduler':>18}   {'ganggate':>10}"
    lines = [style.bold(head)]
    for label, left, right in rows:
        lines.append(f"{label:{width}}   {left:>18}   {right:>10}")
    return "\n".join(lines)


async def play(out: TextIO, *, quiet: bool, style: Style, pace: float) -> tuple[DemoFacts, DemoFacts]:
    scenario = demo_scenario()

    last: list[str] = []  # the line last printed, without its mode and time

    def printer(step: StepView) -> None:
        if not quiet:
            line = step_line(step, style)
            same = line.split("] t=", 1)[-1][8:].split(" done", 1)[0]  # what it shows, without time and events
            if not step.events and last and last[0] == same:
                return  # a step where nothing a user sees happened (a controller timer): no line
            last[:] = [same]
            print(line, file=out, flush=True)
            if pace:
                time.sleep(pace)

    results: dict[str, RunResult] = {}
    for mode, title in (("none", "Without ganggate: the default scheduler alone"),
                        ("ganggate", "With ganggate: webhook + gate controller")):
        if not quiet:
            print(style.bold(f"\n== {title} =="), file=out, flush=True)
        results[mode] = await run_scenario(scenario, mode, on_step=printer, controller_settings=CONTROLLER_SETTINGS)
    return facts(results["none"]), facts(results["ganggate"])


def run(quiet: bool = False, color: bool | None = None, pace: float | None = None,
        out: TextIO | None = None) -> int:
    """Play the demo; returns 0 when the story came out as told (else 1, saying what differed)."""
    out = out or sys.stdout
    if color is None:
        color = out.isatty() and "NO_COLOR" not in os.environ
    if pace is None:
        pace = 0.08 if out.isatty() and not quiet else 0.0
    style = Style(color)
    if not quiet:
        print(style.bold("ganggate demo: 13 nodes x 8 GPUs, 5 GPUs used by an inference server (99 free); "
                         f"a {BIG_JOB} job of 100 pods x 1 GPU, {SMALL_JOBS} small 2-pod jobs, a node added at "
                         "minute 40"), file=out, flush=True)
        print(LEGEND, file=out, flush=True)
    without, with_gate = asyncio.run(play(out, quiet=quiet, style=style, pace=pace))
    print(style.bold(("" if quiet else "\n") + "== Summary (simulated time) =="), file=out)
    print(summary_table(without, with_gate, style), file=out, flush=True)
    problems = story_problems(without, with_gate)
    for problem in problems:
        print(f"unexpected: {problem}", file=out)
    return 1 if problems else 0


def story_problems(without: DemoFacts, with_gate: DemoFacts) -> list[str]:
    """What, if anything, did not come out as the story says (checked, not assumed)."""
    problems = []
    if without.peak_held_idle_gpus < 99:
        problems.append(f"without ganggate only {without.peak_held_idle_gpus} GPUs were held idle")
    if with_gate.peak_held_idle_gpus or with_gate.held_idle_gpu_hours:
        problems.append("with ganggate some GPUs were held idle")
    if with_gate.small_done_before_node < SMALL_JOBS:
        problems.append(f"with ganggate only {with_gate.small_done_before_node} small jobs ran before the node")
    if with_gate.big_started_at != NODE_ADDED_AT:
        problems.append(f"with ganggate the big job started at {with_gate.big_started_at}, not when the node joined")
    if with_gate.deadlocked:
        problems.append(f"with ganggate {with_gate.deadlocked} jobs never completed")
    return problems

