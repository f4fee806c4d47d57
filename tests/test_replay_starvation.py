"""The starvation trace replayed (issue #20): without a guard a large gang waits until the
stream of small jobs stops; with the guard it starts while the stream still runs; with run-time
bounds (activeDeadlineSeconds) its Event says by when it starts at the latest."""

from __future__ import annotations

import asyncio

from ganggate.replay.results.predictions import score
from ganggate.replay.run import engine
from ganggate.replay.traces.format import with_deadlines
from ganggate.replay.traces.synth import StarveConfig, generate_starving

# Short runs (median 10 min, at most 30) so that a CI-size trace spans several drains.
CONFIG = StarveConfig(jobs=110, nodes=4, every=25, median_run_time=600, max_run_time=1800, gang_run_time=600)
GUARD_OFF = {"starvation_seconds": 1e9, "starvation_blind_seconds": 1e9}


def replay(jobs, settings):
    scenario = engine.Scenario(jobs, engine.uniform_nodes(4, 8))
    return asyncio.run(engine.run_scenario(scenario, "ganggate", exact_webhook=False, controller_settings=settings))


def test_a_large_gang_starves_until_the_stream_stops_without_a_guard_and_not_with_one():
    jobs = generate_starving(CONFIG)
    stream_stops = max(j.submit_time for j in jobs if j.gpus == 1)
    off = {r.job_id: r for r in replay(jobs, GUARD_OFF).records}
    assert off["gang-00051"].started_at > stream_stops  # it waited for the stream to stop
    # The default's blind limit (6 h) is longer than a CI-size trace: 300 s stands in for it.
    guarded = replay(jobs, {"starvation_blind_seconds": 300})
    started = {r.job_id: r for r in guarded.records}
    assert started["gang-00051"].started_at < stream_stops
    assert guarded.summary.jobs_figures.largest_class().max_wait < largest_wait(off)
    assert guarded.summary.held_idle_gpu_hours == 0 and guarded.summary.deadlocked == 0


def test_with_deadlines_the_held_gangs_event_says_by_when_it_starts():
    bounded = replay(with_deadlines(generate_starving(CONFIG), 1.5), {})
    assert score(bounded.events, bounded.records, bounded.epoch_offset).made >= 1
    assert any("at the latest" in message for _, name, message, _ in bounded.events if name.startswith("gang-"))
    assert bounded.summary.held_idle_gpu_hours == 0 and bounded.summary.deadlocked == 0


def largest_wait(records: dict) -> float:
    return max(r.started_at - r.submit_time for r in records.values() if r.gpus > 8)
