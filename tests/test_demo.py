"""`ganggate demo` as a user runs it: a subprocess that tells the story and exits by itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_demo(*flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "ganggate", "demo", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )


def summary_row(output: str, label: str) -> list[str]:
    for line in output.splitlines():
        if line.startswith(label):
            return line[len(label):].split()
    raise AssertionError(f"no summary row {label!r} in:\n{output}")


def test_demo_tells_the_story_live_and_compares():
    result = run_demo("--no-color")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "\033[" not in out  # --no-color
    # The live view: the default scheduler binds 99 of 100 pods, which then hold 99 GPUs.
    assert re.search(r"\[default scheduler\] t=00:00:00 +big job +99/100 placed .*held idle +99", out)
    # ... and every small job waits behind it until the node joins.
    assert re.search(r"\[default scheduler\] t=00:22:00 .*jobs: 0 running, 9 waiting, 0 done", out)
    # With ganggate nothing of the big job is placed until the node joins at minute 40.
    assert re.search(r"\[ +ganggate\] t=00:00:00 +big job +0/100 placed .*held idle +0 ", out)
    assert re.search(r"\[ +ganggate\] t=00:40:00 +big job running 100/100 .*node gpu-13 added", out)
    # The two-column summary.
    assert summary_row(out, "GPUs held idle by an incomplete job (peak)") == ["99", "0"]
    held = summary_row(out, "GPU-hours held idle")
    assert float(held[0]) > 60 and float(held[1]) == 0
    assert summary_row(out, "small jobs done before the node joined (of 8)") == ["0", "8"]
    assert summary_row(out, "big job started") == ["minute", "40", "minute", "40"]
    assert "unexpected" not in out
    # "held idle" is explained before the first step, and no step line says nothing new (a step
    # where only a controller timer fired, e.g. t=00:05:00, is not printed).
    assert "held idle: held by pods of a job that cannot start until all its pods are placed" in out.split("==")[0]
    steps = [line for line in out.splitlines() if "] t=" in line]
    assert not [line for line in steps if line.endswith(" done")], steps
    # The story alone: no log line of the controller, webhook or kubesim, on either stream.
    assert result.stderr == ""
    assert not re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING|ERROR)", out)


def test_demo_quiet_prints_only_the_summary_and_keeps_the_log_in_the_file_it_names(tmp_path):
    log = tmp_path / "demo.log"
    result = run_demo("--quiet", "--no-color", "--log-file", str(log))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "== Summary (simulated time) ==" and len(lines) == 8, result.stdout
    assert summary_row(result.stdout, "GPUs held idle by an incomplete job (peak)") == ["99", "0"]
    assert result.stderr == f"the components' log (controller, webhook, kubesim): {log}\n"
    text = log.read_text()
    # The big job's wait is logged once, not every round its free room moved.
    assert text.count("GangUnschedulable default/train-100") == 1, text
