"""The Alibaba (openb_pod_list) converter, on rows written here in the dataset's format."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ganggate.replay.alibaba import convert_rows, load_alibaba
from ganggate.replay.trace import TraceError

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
