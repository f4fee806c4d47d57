"""Disruptions in the replay (ganggate/replay/run/disruptions.py): the schedule and what a lost pod costs."""

from __future__ import annotations

import pytest

from ganggate.replay.run import disruptions, engine
from ganggate.replay.traces.format import Job


def test_a_seed_gives_one_schedule_and_bad_counts_are_refused():
    nodes = [f"node-{i}" for i in range(4)]
    one = disruptions.schedule(3, 1000.0, nodes, preempt=2, drain=1, node_failure=1, pod_failure=3)
    assert one == disruptions.schedule(3, 1000.0, nodes, preempt=2, drain=1, node_failure=1, pod_failure=3)
    assert sorted(d.kind for d in one) == ["drain", "node-failure", "pod-failure", "pod-failure", "pod-failure",
                                          "preempt", "preempt"]
    assert all(0 <= d.time < 1000 and d.node in nodes for d in one)
    assert disruptions.parse("preempt=2, drain=1") == {"preempt": 2, "drain": 1}
    for bad in ("reboot=1", "drain", "drain=x"):
        with pytest.raises(ValueError, match="--disruptions"):
            disruptions.parse(bad)


@pytest.mark.parametrize("mode", ["none", "ganggate"])
async def test_a_pod_failing_mid_run_costs_the_job_its_run_and_the_job_restarts_whole(mode):
    """The Job replaces the failed pod; the run starts over once all pods run again; nothing is left behind."""
    jobs = [Job("train", 0.0, 2, 2, "1", "1Gi", 600.0)]
    failure = disruptions.Disruption(100.0, "pod-failure")
    result = await engine.run_scenario(engine.Scenario(jobs, engine.uniform_nodes(2, 4), disruptions=[failure]),
                                       mode, exact_webhook=False)
    [record] = result.records
    assert result.interruptions == 1 and result.disruptions["pod-failure"] == 1
    # 100 s lost, the Job controller's 1 s syncJobBatchPeriod before it replaces the pod, then 600 s whole again
    assert record.started_at == 0.0 and record.finished_at == 701.0
    assert result.samples[-1].held_idle_gpus == 0


@pytest.mark.parametrize("mode", ["none", "ganggate"])
async def test_an_urgent_pod_that_starts_late_still_runs_only_its_seconds(mode):
    """An urgent pod that cannot start at once (its only node is cordoned for 1000 s) runs its 600 s
    from when it starts, then frees the node: the trace job after it runs (it used to run forever,
    holding its GPUs, and a job needing them never finished)."""
    jobs = [Job("train", 2000.0, 1, 8, "1", "1Gi", 100.0)]
    cluster = [disruptions.Disruption(0.0, "drain", "node-0", seconds=1000.0),
               disruptions.Disruption(1.0, "preempt", seconds=600.0, gpus=8)]
    result = await engine.run_scenario(engine.Scenario(jobs, engine.uniform_nodes(1, 8), disruptions=cluster),
                                       mode, exact_webhook=False)
    [record] = result.records
    assert result.summary.completed == 1
    assert record.started_at == 2000.0 and record.finished_at == 2100.0
