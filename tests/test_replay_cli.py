"""`ganggate replay` as a user runs it: files written, the table printed, bad input refused."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from ganggate.replay.traces.format import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
TRACE = """job_id,submit_time,pods,gpus_per_pod,cpu_per_pod,memory_per_pod,run_time,priority
s,0,1,1,1,1Gi,100,0
a,1,2,4,2,4Gi,600,0
b,10,5,1,1,1Gi,300,0
c,20,1,1,1,1Gi,60,0
d,30,2,1,500m,1Gi,120,0
e,40,1,2,1,1Gi,30,0
"""


def ganggate(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "ganggate", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


def test_replay_writes_summary_timeseries_and_plot(tmp_path):
    trace = tmp_path / "six.csv"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    result = ganggate("replay", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "4",
                      "--modes", "none,ganggate", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["mode"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert set(rows) == {"none", "ganggate"}
    assert float(rows["none"]["held_idle_gpu_hours"]) > 0 and rows["none"]["deadlocked"] == "5"
    assert float(rows["ganggate"]["held_idle_gpu_hours"]) == 0 and rows["ganggate"]["completed"] == "6"
    series = list(csv.DictReader((out / "timeseries.csv").open()))
    assert {r["mode"] for r in series} == {"none", "ganggate"}
    assert max(int(r["held_idle_gpus"]) for r in series if r["mode"] == "none") == 8
    assert (out / "replay.png").read_bytes()[:4] == b"\x89PNG"
    assert "| none | 1/6 | 5 |" in result.stdout and "| ganggate | 6/6 | 0 | 0.0 |" in result.stdout
    jobs = [r for r in csv.DictReader((out / "jobs.csv").open()) if r["mode"] == "none"]
    assert len(jobs) == 6 and sum(1 for r in jobs if r["start_s"] == "") == 5  # five never started
    assert {r["job"]: r["gpus"] for r in jobs}["a"] == "8"
    assert rows["none"]["max_wait_s"] != "" and "Job by job" in result.stdout
    assert result.stderr == ""  # no log lines, no progress bar off a terminal


def test_synthetic_replay_writes_its_trace(tmp_path):
    out = tmp_path / "synth"
    result = ganggate("replay", "--synth", "--jobs", "12", "--nodes", "2", "--seed", "4", "--modes", "none",
                      "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    with (out / "trace.csv").open() as stream:
        header = next(csv.reader(stream))
        assert tuple(header) == COLUMNS and len(stream.readlines()) == 12
    assert "12 jobs" in result.stdout


def test_bad_input_is_refused_with_a_clear_message(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(TRACE.replace("d,30,2,1,500m", "d,30,2,1,lots"))
    result = ganggate("replay", "--trace", str(bad), "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "line 6: cpu_per_pod='lots' is not a Kubernetes quantity" in result.stderr
    assert not (tmp_path / "o").exists()
    result = ganggate("replay", "--trace", str(bad), "--modes", "none,volcano")
    assert result.returncode == 2 and "unknown mode(s) volcano" in result.stderr
    big = tmp_path / "big.csv"
    big.write_text(TRACE.replace("e,40,1,2,", "e,40,1,16,"))
    result = ganggate("replay", "--trace", str(big), "--nodes", "2", "--gpus-per-node", "4")
    assert result.returncode == 2 and "job e: a pod of 16 GPUs" in result.stderr
    result = ganggate("replay", "--trace", str(big), "--starvation-seconds", "0", "--out", str(tmp_path / "s"))
    assert result.returncode == 2 and "--starvation-seconds: '0' must be greater than 0" in result.stderr
    assert not (tmp_path / "s").exists()


def test_replay_on_a_topology_prints_the_placement_table(tmp_path):
    trace = tmp_path / "six.csv"
    trace.write_text(TRACE)
    result = ganggate("replay", "--trace", str(trace), "--topology", "1x2x2", "--gpus-per-node", "4",
                      "--modes", "free,ganggate", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "on 4 nodes x 4 GPUs" in result.stdout
    assert "Placement on the topology" in result.stdout
    assert "| free | 2 |" in result.stdout and "| ganggate | 2 |" in result.stdout  # a: 2 x 4 GPUs, b: 5 x 1
    result = ganggate("replay", "--trace", str(trace), "--modes", "topology", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "needs a cluster with a topology" in result.stderr
    result = ganggate("replay", "--trace", str(trace), "--topology", "2x2", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "BLOCKSxRACKSxNODES" in result.stderr


def test_a_sweep_plots_utilisation_against_the_largest_gangs_max_wait(tmp_path):
    out = tmp_path / "sweep"
    result = ganggate("replay", "--synth", "--starve", "--jobs", "12", "--nodes", "2",
                      "--sweep", "starvation-blind-seconds=600", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [r["setting"] for r in csv.DictReader((out / "sweep.csv").open())]
    assert rows == ["count", "ganggate, guard off", "ganggate, default", "starvation-blind-seconds=600"]
    assert (out / "tradeoff.png").read_bytes()[:4] == b"\x89PNG"
    bad = ganggate("replay", "--synth", "--sweep", "starvation-minutes=5", "--out", str(out))
    assert bad.returncode == 2 and "unknown parameter 'starvation-minutes'" in bad.stderr


def test_replay_quiet_prints_the_table_alone_and_verbose_adds_the_log(tmp_path):
    trace = tmp_path / "six.csv"
    trace.write_text(TRACE)
    quiet = ganggate("replay", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "4", "--modes", "ganggate",
                     "--out", str(tmp_path / "q"), "--quiet")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stdout.splitlines()[0].startswith("| mode |") and len(quiet.stdout.splitlines()) == 3, quiet.stdout
    assert quiet.stderr == ""
    verbose = ganggate("replay", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "4", "--modes", "ganggate",
                       "--out", str(tmp_path / "v"), "--verbose")
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    assert "INFO ganggate.controller" in verbose.stderr and "ganggate.controller" not in verbose.stdout


def test_replay_shows_progress_on_a_terminal(tmp_path):
    """Run on a pseudo-terminal, as a person would: a progress bar (tqdm) per mode on stderr."""
    import fcntl
    import pty
    import struct
    import termios

    trace = tmp_path / "six.csv"
    trace.write_text(TRACE)
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "ganggate", "replay", "--trace", str(trace), "--nodes", "2",
                                "--gpus-per-node", "4", "--modes", "ganggate", "--out", str(tmp_path / "o")],
                               cwd=ROOT, env=env, stdin=child, stdout=child, stderr=child)
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert process.wait(timeout=240) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "  ganggate:" in text and "/6 [" in text and "job/s" in text, text


def test_replay_help_ends_with_examples_that_parse():
    """`ganggate replay --help` shows examples; each is a command the parser accepts as written."""
    import shlex

    from ganggate.cli import build_parser

    result = ganggate("replay", "--help")
    assert result.returncode == 0
    examples = result.stdout.split("\nexamples:\n", 1)[1]
    commands = [line.strip() for line in examples.splitlines() if line.startswith("  ganggate replay ")]
    assert len(commands) >= 2
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert args.func is not None, command
