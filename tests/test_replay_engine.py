"""The replay engine on a real (embedded) cluster: kubesim, webhook over HTTPS, controller.

Six jobs on 2 nodes x 4 GPUs. A 1-GPU job `s` runs on one node; gang `a` (2 pods x 4 GPUs)
arrives and, with the default scheduler alone, binds one pod to the empty node; gang `b`
(5 pods x 1 GPU) fills what is left of the other. When `s` ends, `b` gets one more pod but
never its fifth, and `a` never its second: a deadlock that also starves every later job.
With ganggate neither gang binds anything before all of it fits, and every job completes.
"""

from __future__ import annotations

import logging

import pytest

from ganggate.replay.run.engine import ReplayError, Scenario, check_fits, run_scenario, uniform_nodes
from ganggate.replay.traces.format import Job

JOBS = [
    Job("s", 0, 1, 1, "1", "1Gi", 100),
    Job("a", 1, 2, 4, "2", "4Gi", 600),
    Job("b", 10, 5, 1, "1", "1Gi", 300),
    Job("c", 20, 1, 1, "1", "1Gi", 60),
    Job("d", 30, 2, 1, "500m", "1Gi", 120),
    Job("e", 40, 1, 2, "1", "1Gi", 30),
]


@pytest.fixture(autouse=True)
def quiet_components():
    loggers = [logging.getLogger(name) for name in ("gate", "webhook", "kubesim", "certs")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def scenario() -> Scenario:
    return Scenario(JOBS, uniform_nodes(2, 4))


async def test_default_scheduler_alone_holds_gpus_idle_and_deadlocks():
    result = await run_scenario(scenario(), "none")
    summary = result.summary
    assert summary.held_idle_gpu_hours > 0
    assert summary.held_idle_gpus_at_end == 8  # every GPU bound to a job that cannot start
    records = {r.job_id: r for r in result.records}
    assert records["s"].finished_at == 100
    assert records["a"].started_at is None and records["b"].started_at is None
    assert summary.deadlocked == 5 and summary.completed == 1 and summary.makespan is None
    # The run stopped by itself once nothing could happen: when s finished.
    assert result.end == 100


async def test_ganggate_holds_nothing_idle_and_completes_every_job():
    result = await run_scenario(scenario(), "ganggate")
    summary = result.summary
    assert summary.held_idle_gpu_hours == 0
    assert all(s.held_idle_gpus == 0 for s in result.samples)
    assert summary.completed == 6 and summary.deadlocked == 0
    records = {r.job_id: r for r in result.records}
    # b fits next to s at once; a waits (holding nothing) until two whole nodes are free.
    assert records["b"].started_at == 10
    assert records["a"].started_at >= records["s"].finished_at
    # Utilisation never exceeds the cluster and busy GPU-hours add up to the trace's work.
    assert all(s.busy_gpus <= 8 for s in result.samples)
    work = sum(j.gpus * j.run_time for j in JOBS) / 3600
    assert summary.busy_gpu_hours == pytest.approx(work)
    assert summary.makespan == max(r.finished_at for r in result.records)


async def test_same_trace_same_timeline():
    first = await run_scenario(scenario(), "ganggate")
    second = await run_scenario(scenario(), "ganggate")
    assert first.samples == second.samples
    assert first.records == second.records


async def test_count_baseline_runs_through_the_webhook_and_controller():
    result = await run_scenario(scenario(), "count")
    # Whatever the count check decides, the accounting holds together.
    assert result.summary.completed + result.summary.deadlocked == 6
    assert all(s.busy_gpus + s.held_idle_gpus <= 8 for s in result.samples)


def test_a_pod_larger_than_every_node_is_refused():
    big = Scenario([Job("huge", 0, 1, 16, "1", "1Gi", 60)], uniform_nodes(2, 8))
    with pytest.raises(ReplayError, match="huge: a pod of 16 GPUs"):
        check_fits(big)


async def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        await run_scenario(scenario(), "volcano")
