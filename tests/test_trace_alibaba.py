"""The Alibaba (openb_pod_list) converter, on rows written here in the dataset's format."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ganggate.replay.traces.alibaba import convert_gangs, convert_rows, group_gangs, load_alibaba, scheduled_pods
from ganggate.replay.traces.format import TraceError

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
ROWS = (
    "pod-b,88000,327680,8,1000,,Burstable,Succeeded,500,4100,600\n"     # waits 100 s, runs 3500 s
    "pod-a,6000,12288,1,460,,LS,Running,100,1000,100\n"                  # GPU sharing: a whole GPU
    "pod-pending,4000,8192,1,1000,,BE,Pending,200,300,\n"                # never scheduled: skipped
    "pod-cpu,2000,4096,0,0,,LS,Failed,300,310,300\n"                     # CPU only, 10 s
    "pod-nomem,14000,0,1,1000,,Burstable,Succeeded,400,800,400\n"        # no memory request: skipped
)


def rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(HEADER + text)))


def test_scheduled_pods_become_one_pod_jobs_in_creation_order():
    jobs = convert_rows(rows(ROWS))
    assert [j.job_id for j in jobs] == ["pod-a", "pod-cpu", "pod-b"]
    a, cpu, b = jobs
    assert (a.submit_time, a.run_time, a.gpus_per_pod, a.pods) == (0, 900, 1, 1)
    assert (cpu.submit_time, cpu.gpus_per_pod, cpu.cpu_per_pod, cpu.memory_per_pod) == (200, 0, "2000m", "4096Mi")
    assert (b.submit_time, b.run_time, b.gpus_per_pod) == (400, 3500, 8)


def test_limit_keeps_the_first_pods_and_restarts_the_clock():
    jobs = convert_rows(rows(ROWS), limit=2)
    assert [j.job_id for j in jobs] == ["pod-a", "pod-cpu"]
    assert jobs[0].submit_time == 0


def test_bad_rows_are_refused():
    with pytest.raises(TraceError, match="line 2: not an openb pod row"):
        convert_rows(rows("x,lots,1,1,1000,,LS,Running,0,10,0\n"))
    with pytest.raises(TraceError, match="line 2: job_id='bad_name'"):
        convert_rows(rows("bad_name,1000,1,1,1000,,LS,Running,0,10,0\n"))
    with pytest.raises(TraceError, match="nothing to replay"):
        convert_rows(rows("p,1000,1,1,1000,,BE,Pending,0,10,\n"))


def test_a_file_without_times_is_refused(tmp_path):
    path = tmp_path / "multigpu.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1000\n")
    with pytest.raises(TraceError, match="not an openb_pod_list CSV"):
        load_alibaba(path)


def test_replay_alibaba_from_the_command_line(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + ROWS)
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-m", "ganggate", "replay", "--alibaba", str(path), "--nodes", "2", "--node-cpu", "96",
         "--node-memory", "512Gi", "--modes", "none", "--out", str(tmp_path / "out")],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| none | 3/3 | 0 |" in result.stdout
    assert (tmp_path / "out" / "trace.csv").read_text().count("\n") == 4


# Pods of one shape created close together, as the replicas of a job are; and others.
GANG_ROWS = (
    "w-0,4000,16384,1,1000,,BE,Succeeded,1000,5000,1000\n"     # with w-1 and w-2: a gang of 3 (longest run 4000 s)
    "w-1,4000,16384,1,1000,,BE,Succeeded,1030,4900,1030\n"
    "w-2,4000,16384,1,1000,,BE,Succeeded,1060,4000,1060\n"     # 60 s after w-0: still in its window
    "w-3,4000,16384,1,1000,,BE,Succeeded,1061,3000,1061\n"     # 61 s after w-0: a gang of its own
    "s-0,4000,16384,1,1000,,LS,Running,1010,9000,1010\n"       # same resources, another QoS: not w's replica
    "big,88000,327680,8,1000,,Burstable,Succeeded,1020,2020,1020\n"
)


def test_same_shape_pods_created_within_the_window_are_one_gang():
    jobs = convert_gangs(rows(GANG_ROWS))
    assert [(j.job_id, j.pods, j.gpus_per_pod, j.submit_time, j.run_time) for j in jobs] == [
        ("w-0", 3, 1, 0, 4000), ("s-0", 1, 1, 10, 7990), ("big", 1, 8, 20, 1000), ("w-3", 1, 1, 61, 1939)]
    assert (jobs[0].cpu_per_pod, jobs[0].memory_per_pod) == ("4000m", "16384Mi")


def test_the_window_decides_and_zero_groups_only_pods_created_together():
    assert [j.pods for j in convert_gangs(rows(GANG_ROWS), window=120)][0] == 4
    assert all(j.pods == 1 for j in convert_gangs(rows(GANG_ROWS), window=0))
    assert [j.job_id for j in convert_gangs(rows(GANG_ROWS), limit=2)] == ["w-0", "s-0"]


def test_the_gangs_cover_every_scheduled_pod_once():
    gangs = group_gangs(scheduled_pods(rows(ROWS + GANG_ROWS)))
    names = [p.name for g in gangs for p in g]
    assert sorted(names) == sorted(["pod-a", "pod-cpu", "pod-b", "w-0", "w-1", "w-2", "w-3", "s-0", "big"])
    with pytest.raises(ValueError, match="window"):
        group_gangs([], window=-1)


def test_replay_alibaba_gangs_from_the_command_line(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + GANG_ROWS)
    root = Path(__file__).resolve().parents[1]

    def replay(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ganggate", "replay", *flags, "--nodes", "2", "--node-cpu", "96",
             "--node-memory", "512Gi", "--modes", "ganggate", "--quiet", "--out", str(tmp_path / "out")],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=120)

    refused = replay("--synth", "--gangs")
    assert refused.returncode == 2 and "--gangs and --gang-window need --alibaba" in refused.stderr
    refused = replay("--alibaba", str(path), "--gang-window", "30")
    assert refused.returncode == 2 and "--gang-window needs --gangs" in refused.stderr
    result = replay("--alibaba", str(path), "--gangs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| ganggate | 4/4 | 0 |" in result.stdout
    assert (tmp_path / "out" / "trace.csv").read_text().splitlines()[1].startswith("w-0,0,3,1,")
