"""Every bench/ script runs at its `--small` size (seconds) and prints figures that can be right.

A bench nothing runs rots (one did in a day); this runs each as `make bench` would, in its own
process, only smaller, and fails on an exception, a non-zero exit, a negative time, an empty table
or a NaN. The full sizes stay for `make bench`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("bench_*.py"))
TRACE = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"
NEGATIVE_TIME = re.compile(r"(?<![\w.])-\d[\d,]*(\.\d+)?\s?(ms|µs|us|s|h|min)\b")
NOT_A_NUMBER = re.compile(r"\b(nan|NaN|inf)\b")


def problems(output: str) -> list[str]:
    """What in a bench's output cannot be right: no figure at all, a negative time, a table with no
    rows, a NaN."""
    found = []
    if not re.search(r"\d", output):
        found.append("no figure printed")
    found += [f"negative time: {m.group(0)!r}" for m in NEGATIVE_TIME.finditer(output)]
    found += [f"not a number: {m.group(0)!r}" for m in NOT_A_NUMBER.finditer(output)]
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\|\s*:?-{3}", line) and not (i + 1 < len(lines) and lines[i + 1].startswith("|")):
            found.append(f"a table with no rows under {lines[i - 1] if i else line!r}")
    return found


def test_the_checks_catch_what_cannot_be_right() -> None:
    assert problems("| a | b |\n|---|---:|\n| x | 1.0 ms |\n") == []
    assert problems("took -3.2 ms") == ["negative time: '-3.2 ms'"]
    assert problems("| a | 1 |\n|---|---|\n") == ["a table with no rows under '| a | 1 |'"]
    assert problems("3 rounds, median nan ms") == ["not a number: 'nan'"]
    assert problems("nothing") == ["no figure printed"]
    assert problems("x-1 s and 10-12 s") == []  # ranges and names are not negative times


@pytest.mark.parametrize("bench", BENCHES)
def test_each_bench_runs_small(bench: str, tmp_path: Path) -> None:
    if bench == "bench_gpushare.py" and not TRACE.exists():
        pytest.skip(f"its trace is not beside this checkout ({TRACE}; CI has ../shared)")
    result = subprocess.run([sys.executable, str(ROOT / "bench" / bench), "--small"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"{bench} --small exited {result.returncode}:\n{result.stderr[-3000:]}"
    assert not problems(result.stdout), f"{bench} --small printed:\n{result.stdout}\n" + "\n".join(problems(result.stdout))
    assert list(tmp_path.iterdir()) == [], "a bench wrote into the directory it was run from"


def test_every_bench_takes_small_and_help() -> None:
    for bench in BENCHES:
        text = (ROOT / "bench" / bench).read_text()
        assert '"--small"' in text, f"{bench} has no --small"
    shown = subprocess.run([sys.executable, str(ROOT / "bench" / BENCHES[0]), "--help"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "--small" in shown.stdout
