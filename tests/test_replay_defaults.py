"""ganggate's defaults judged as issue #20 asks, at CI size: on a synthetic trace and on real
arrivals read as gangs, the default starvation guard is within 1 point of utilisation and 5% of
the p95 wait of the guard off, holds no GPU idle and deadlocks nothing. (The comparison with
`count`, which varies from run to run, and the full-size traces are bench/bench_starvation.py's,
figures in docs/benchmarks.md.)

The traces: examples/traces/sample.csv (the synthetic trace of docs/replay.md at 40 jobs on
4 x 8 GPUs), and tests/data/alibaba-gpu-v2023-pods.csv, 54 unchanged pods of the Alibaba GPU
trace (cluster-trace-gpu-v2023, CC-BY 4.0, Weng et al., USENIX ATC 2023) that
ganggate.replay.traces.alibaba reads as 50 gangs (three pods of 8 GPUs, three gangs of two 1-GPU
pods), on 2 x 8 GPUs, where they wait up to hours for each other.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ganggate.replay.run import engine
from ganggate.replay.sweep import GUARD_OFF, judge_default
from ganggate.replay.traces.alibaba import load_alibaba_gangs
from ganggate.replay.traces.format import load_trace

ROOT = Path(__file__).resolve().parents[1]


def sample() -> engine.Scenario:
    return engine.Scenario(load_trace(ROOT / "examples" / "traces" / "sample.csv"), engine.uniform_nodes(4, 8))


def alibaba_gangs() -> engine.Scenario:
    jobs = load_alibaba_gangs(ROOT / "tests" / "data" / "alibaba-gpu-v2023-pods.csv")
    return engine.Scenario(jobs, engine.uniform_nodes(2, 8, "128", "1Ti"))


def replay(scenario: engine.Scenario, mode: str, settings: dict) -> engine.RunResult:
    return asyncio.run(engine.run_scenario(scenario, mode, exact_webhook=False, controller_settings=settings))


@pytest.mark.parametrize("make", [sample, alibaba_gangs], ids=["sample", "alibaba-gangs"])
def test_the_default_guard_costs_nothing_against_the_guard_off(make):
    """Default against guard off, both pinned and repeatable, judged as #20 asks. Not against
    count here: count releases unpinned, so where the scheduler puts its pods, and the waits
    that follow, vary from run to run (docs/replay.md, Known gaps; on sample.csv count's p95 was
    3.15 h in most runs and 2.24 h in one). bench_starvation reports that comparison."""
    scenario = make()
    default = replay(scenario, "ganggate", {})
    off = replay(scenario, "ganggate", GUARD_OFF)
    verdict = judge_default(default.summary, off.summary, off.summary)
    assert verdict.near_off, verdict.line()
    for result in (default, off):
        assert result.summary.completed == len(scenario.jobs)
        assert result.summary.held_idle_gpu_hours == 0 and result.summary.deadlocked == 0


def test_the_excerpt_is_read_as_the_gangs_the_docs_describe():
    jobs = alibaba_gangs().jobs
    assert len(jobs) == 50 and sum(j.pods for j in jobs) == 54
    assert sum(1 for j in jobs if j.gpus_per_pod == 8) == 3
    assert sorted(j.pods for j in jobs if j.pods > 1) == [2, 2, 2, 2]
