"""`replay --sweep`: one ganggate run per setting of a policy parameter, and the baselines, so an
operator can pick the setting from a picture of mean utilisation against the max wait of the
largest gang-size class (replay/results/plot.py plot_tradeoff), and from sweep.csv.

The baselines: `count` (the seed's check), ganggate with the starvation guard off, and ganggate
with the controller's defaults.
"""

from __future__ import annotations

import csv
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from ganggate.replay.results.metrics import Summary

#: Swept flag -> the controller setting it sets.
PARAMETERS = {"starvation-seconds": "starvation_seconds", "starvation-blind-seconds": "starvation_blind_seconds"}
GUARD_OFF = {"starvation_seconds": 1e9, "starvation_blind_seconds": 1e9}


@dataclass(frozen=True)
class Sweep:
    parameter: str  # the flag's name, e.g. starvation-seconds
    values: tuple[float, ...]

    @property
    def setting(self) -> str:
        return PARAMETERS[self.parameter]


def parse_sweep(text: str) -> Sweep:
    """NAME=V1,V2,... with NAME one of PARAMETERS and positive numbers; ValueError otherwise."""
    name, _, values = text.partition("=")
    if name not in PARAMETERS:
        raise ValueError(f"--sweep: unknown parameter {name!r}; choose from {', '.join(PARAMETERS)} (NAME=V1,V2,...)")
    try:
        numbers = tuple(float(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--sweep {text!r}: the values must be numbers, e.g. {name}=300,3600,21600") from None
    if not numbers or any(not v > 0 for v in numbers):
        raise ValueError(f"--sweep {text!r}: give one or more positive values, e.g. {name}=300,3600,21600")
    return Sweep(name, numbers)


@dataclass(frozen=True)
class Verdict:
    """Issue #20's test of the defaults: within 1 point of utilisation and 5% of the p95 wait of
    the guard off, and at least as good as count on both."""

    utilisation_vs_off: float  # default - guard off, in fractions (0.01: 1 point)
    p95: tuple[float, float, float]  # the p95 waits (seconds) of the default, the guard off and count
    near_off: bool
    beats_count: bool

    @property
    def ok(self) -> bool:
        return self.near_off and self.beats_count

    def line(self) -> str:
        default, off, count = (f"{v / 3600:.2f} h" for v in self.p95)
        return (f"check: default vs guard off: utilisation {self.utilisation_vs_off * 100:+.1f} points, p95 wait "
                f"{default} against {off} ({'ok' if self.near_off else 'FAILS'}); at least as good as count "
                f"(p95 wait {count}) on both: {'ok' if self.beats_count else 'FAILS'}")


def judge_default(default: Summary, off: Summary, count: Summary) -> Verdict:
    """How ganggate's defaults fare against the guard off and count on one trace (`Verdict`)."""
    def p95(summary: Summary) -> float:
        return summary.p95_queue_delay or 0.0

    near = (default.mean_utilisation >= off.mean_utilisation - 0.01 - 1e-12
            and p95(default) <= p95(off) * 1.05 + 1e-9)
    beats = default.mean_utilisation >= count.mean_utilisation - 1e-12 and p95(default) <= p95(count) + 1e-9
    return Verdict(default.mean_utilisation - off.mean_utilisation, (p95(default), p95(off), p95(count)), near, beats)


def point(summary: Summary) -> tuple[float, float]:
    """(max wait of the largest gang-size class with jobs, mean utilisation)."""
    figures = summary.jobs_figures
    largest = figures.largest_class() if figures else None
    return (largest.max_wait or 0.0) if largest else 0.0, summary.mean_utilisation


async def run_sweep(sweep: Sweep, run: Callable[[str, dict], Awaitable[Summary]], out: Path,
                    title: str = "") -> list[tuple[str, Summary]]:
    """Run the baselines and each setting (`run(mode, controller settings)` replays once), write
    sweep.csv and tradeoff.png to `out`, and return (label, summary) in order."""
    from ganggate.replay.results.plot import plot_tradeoff

    rows: list[tuple[str, Summary]] = [
        ("count", await run("count", {})),
        ("ganggate, guard off", await run("ganggate", GUARD_OFF)),
        ("ganggate, default", await run("ganggate", {})),
    ]
    points = []
    for value in sweep.values:
        label = f"{sweep.parameter}={value:g}"
        summary = await run("ganggate", {sweep.setting: value})
        rows.append((label, summary))
        points.append((f"{value:g}", *point(summary)))
    with open(out / "sweep.csv", "w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(("setting", "largest_class_max_wait_s", "mean_utilisation", "p95_wait_s"))
        for label, summary in rows:
            wait, util = point(summary)
            writer.writerow((label, f"{wait:.1f}", f"{util:.4f}",
                             "" if summary.p95_queue_delay is None else f"{summary.p95_queue_delay:.1f}"))
    plot_tradeoff(points, [(label, *point(s)) for label, s in rows[:3]], out / "tradeoff.png",
                  title=title, parameter=sweep.parameter)
    return rows
