"""The replay's metrics on hand-made timelines with answers worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.replay.results.metrics import (
    JobProgress,
    JobRecord,
    Sample,
    busy_gpu_hours,
    deadlocked,
    held_idle_gpu_hours,
    makespan,
    percentile,
    queue_delays,
    split_gpus,
    summarise,
    utilisation_series,
)


def sample(time, busy, held, running=0, waiting=0, finished=0):
    return Sample(time, busy, held, running, waiting, finished)


def test_split_gpus_counts_only_complete_gangs_as_busy():
    jobs = [
        JobProgress("whole", pods=2, gpus_per_pod=4, bound=2, running=2),
        JobProgress("partial", pods=100, gpus_per_pod=1, bound=99, running=99),
        JobProgress("pending", pods=3, gpus_per_pod=2, bound=0, running=0),
        JobProgress("bound-not-started", pods=2, gpus_per_pod=1, bound=2, running=1),
    ]
    assert split_gpus(jobs) == (8, 99 + 2)


def test_gpu_hours_integrate_the_step_function():
    # 0-1h: 8 busy; 1h-3h: 4 busy + 4 held; 3h-4h (end): 0 busy + 4 held.
    samples = [sample(0, 8, 0), sample(3600, 4, 4), sample(3 * 3600, 0, 4)]
    assert busy_gpu_hours(samples, end=4 * 3600) == pytest.approx(8 + 8)
    assert held_idle_gpu_hours(samples, end=4 * 3600) == pytest.approx(8 + 4)


def test_samples_at_the_same_instant_take_no_time():
    samples = [sample(0, 8, 0), sample(0, 0, 8), sample(1800, 0, 0)]
    assert held_idle_gpu_hours(samples, end=1800) == pytest.approx(4)
    assert busy_gpu_hours(samples, end=1800) == 0


def test_utilisation_series_is_fractions_of_capacity():
    samples = [sample(0, 8, 0), sample(10, 2, 6)]
    assert utilisation_series(samples, 16) == [(0, 0.5, 0.0), (10, 0.125, 0.375)]
    with pytest.raises(ValueError):
        utilisation_series(samples, 0)


def test_queue_delays_deadlocks_and_makespan():
    records = [
        JobRecord("a", submit_time=10, gpus=1, started_at=10, finished_at=70),
        JobRecord("b", submit_time=20, gpus=8, started_at=80, finished_at=200),
        JobRecord("c", submit_time=30, gpus=99, started_at=None, finished_at=None),
    ]
    assert queue_delays(records) == [0, 60]
    assert deadlocked(records) == ["c"]
    assert makespan(records[:2]) == 190  # first submit 10 -> last completion 200
    assert makespan(records) is None  # c never completes: the makespan is unbounded
    assert makespan([]) is None


def test_percentile_is_nearest_rank():
    values = list(range(1, 21))  # 1..20
    assert percentile(values, 95) == 19
    assert percentile(values, 100) == 20
    assert percentile([5.0], 95) == 5.0
    assert percentile([], 95) is None
    with pytest.raises(ValueError):
        percentile(values, 0)


def test_summarise_a_deadlocked_run():
    # 16 GPUs. A 1-pod job runs 0-100 s; a 24-GPU job binds 16 pods at 0 and never runs.
    samples = [sample(0, 0, 16, waiting=2), sample(100, 0, 16, waiting=1, finished=0)]
    records = [
        JobRecord("small", 0, 1, started_at=None, finished_at=None),
        JobRecord("big", 0, 24, started_at=None, finished_at=None),
    ]
    summary = summarise("none", samples, records, capacity=16, end=100)
    assert summary.deadlocked == 2 and summary.completed == 0
    assert summary.held_idle_gpu_hours == pytest.approx(16 * 100 / 3600)
    assert summary.held_idle_gpus_at_end == 16
    assert summary.mean_queue_delay is None and summary.makespan is None
    assert summary.mean_utilisation == 0


def test_summarise_a_clean_run():
    samples = [sample(0, 8, 0, running=1), sample(3600, 16, 0, running=2), sample(7200, 0, 0)]
    records = [
        JobRecord("a", 0, 8, started_at=0, finished_at=7200),
        JobRecord("b", 1800, 8, started_at=3600, finished_at=7200),
    ]
    summary = summarise("ganggate", samples, records, capacity=16, end=7200)
    assert summary.held_idle_gpu_hours == 0
    assert summary.busy_gpu_hours == pytest.approx(24)
    assert summary.mean_utilisation == pytest.approx(24 / 32)
    assert summary.mean_queue_delay == pytest.approx(900)
    assert summary.p95_queue_delay == pytest.approx(1800)
    assert summary.makespan == 7200 and summary.deadlocked == 0


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3600), st.integers(0, 64), st.integers(0, 64)), min_size=1, max_size=15),
    st.integers(0, 3600),
    st.data(),
)
def test_an_extra_sample_that_changes_nothing_changes_no_total(steps, tail, data):
    """Splitting a step in two (a sample repeating the values before it) keeps every integral."""
    samples, now = [], 0
    for gap, busy, held in steps:
        now += gap
        samples.append(sample(now, busy, held))
    end = now + tail
    index = data.draw(st.integers(0, len(samples) - 1))
    here = samples[index]
    until = samples[index + 1].time if index + 1 < len(samples) else end
    at = data.draw(st.integers(here.time, until))
    split = samples[: index + 1] + [sample(at, here.busy_gpus, here.held_idle_gpus)] + samples[index + 1:]
    assert busy_gpu_hours(split, end) == pytest.approx(busy_gpu_hours(samples, end))
    assert held_idle_gpu_hours(split, end) == pytest.approx(held_idle_gpu_hours(samples, end))
    assert held_idle_gpu_hours(samples, end) <= 64 * end / 3600 + 1e-9


def test_job_figures_count_a_job_that_never_started_as_waiting_until_the_end():
    from ganggate.replay.results.metrics import figures

    records = [
        JobRecord("small", 0, 1, started_at=60, finished_at=660),  # waited 1 min, ran 10 min
        JobRecord("mid", 0, 8, started_at=0, finished_at=60),  # ran 1 min: slowdown floored at 10 min
        JobRecord("big", 100, 64),  # never started: waits until the end (10,100 s)
    ]
    f = figures(records, end=10_200)
    assert f.max_wait == 10_100 and f.never_started == 1
    by_class = {c.name: c for c in f.classes}
    assert by_class["1 GPU"].max_wait == 60 and by_class["2-8"].max_wait == 0
    assert by_class["9-32"].jobs == 0 and by_class[">32"].max_wait == 10_100
    assert f.largest_class() is by_class[">32"]
    assert f.max_slowdown == (60 + 600) / 600 and f.mean_slowdown == ((60 + 600) / 600 + 60 / 600) / 2
