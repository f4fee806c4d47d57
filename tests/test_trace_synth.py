"""The synthetic trace generator: deterministic, the size mix it promises, valid CSV."""

from __future__ import annotations

import io
import statistics

from ganggate.replay.traces.format import format_trace, read_trace
from ganggate.replay.traces.synth import SIZE_MIX, SynthConfig, generate, pod_shape


def test_same_seed_same_trace_other_seed_other_trace():
    config = SynthConfig(jobs=200, nodes=16, gpus_per_node=8, seed=7)
    assert generate(config) == generate(config)
    assert generate(config) != generate(SynthConfig(jobs=200, nodes=16, gpus_per_node=8, seed=8))


def test_mostly_single_gpu_jobs_with_a_multi_node_tail():
    jobs = generate(SynthConfig(jobs=2000, nodes=64, gpus_per_node=8, seed=3))
    sizes = [j.gpus for j in jobs]
    single = sizes.count(1) / len(sizes)
    assert 0.65 < single < 0.75  # SIZE_MIX gives 1 GPU a weight of 0.70
    assert any(s >= 16 for s in sizes)
    assert set(sizes) <= set(SIZE_MIX)


def test_sizes_never_exceed_the_cluster():
    jobs = generate(SynthConfig(jobs=500, nodes=2, gpus_per_node=4, seed=1))
    assert max(j.gpus for j in jobs) <= 8
    assert all(j.gpus_per_pod <= 4 for j in jobs)


def test_arrivals_increase_and_run_times_are_heavy_tailed_and_clipped():
    config = SynthConfig(jobs=1000, seed=5)
    jobs = generate(config)
    submits = [j.submit_time for j in jobs]
    assert submits == sorted(submits) and submits[0] == 0
    runs = [j.run_time for j in jobs]
    assert min(runs) >= config.min_run_time and max(runs) <= config.max_run_time
    assert statistics.mean(runs) > statistics.median(runs) * 1.3  # a long right tail


def test_offered_load_scales_the_arrival_rate():
    busy = generate(SynthConfig(jobs=400, seed=2, load=2.0))
    calm = generate(SynthConfig(jobs=400, seed=2, load=0.5))
    assert busy[-1].submit_time < calm[-1].submit_time


def test_pod_shapes():
    assert pod_shape(1, 8, per_gpu=False) == (1, 1)
    assert pod_shape(16, 8, per_gpu=False) == (2, 8)
    assert pod_shape(16, 8, per_gpu=True) == (16, 1)
    assert pod_shape(4, 8, per_gpu=False) == (1, 4)
    assert pod_shape(12, 8, per_gpu=False) == (12, 1)  # 12 does not split into 8-GPU pods


def test_generated_trace_is_a_valid_csv():
    jobs = generate(SynthConfig(jobs=50, nodes=4, seed=11))
    assert read_trace(io.StringIO(format_trace(jobs))) == jobs


def test_the_starvation_trace_puts_a_half_cluster_gang_after_every_fifty_one_gpu_jobs():
    from ganggate.replay.traces.synth import StarveConfig, generate_starving

    jobs = generate_starving(StarveConfig(jobs=153, nodes=4, gpus_per_node=8, seed=3))
    gangs = [j for j in jobs if j.job_id.startswith("gang-")]
    assert [j.gpus for j in gangs] == [16, 16, 16] and all(j.gpus_per_pod == 8 for j in gangs)
    assert all(j.gpus == 1 and j.run_time <= 14400 for j in jobs if j not in gangs)
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)
    assert generate_starving(StarveConfig(jobs=153, seed=3)) == jobs  # the same seed, the same trace
