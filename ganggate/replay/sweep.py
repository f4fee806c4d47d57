"""`replay --sweep`: one ganggate run per setting of a policy parameter, and the baselines, so an
operator can pick the setting from a picture of mean utilisation against the max wait of the
largest gang-size class (replay/plot.py plot_tradeoff), and from sweep.csv.

The baselines: `count` (the seed's check), ganggate with the starvation guard off, and ganggate
with the controller's defaults.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from ganggate.replay.metrics import Summary

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


def point(summary: Summary) -> tuple[float, float]:
    """(max wait of the largest gang-size class with jobs, mean utilisation)."""
    figures = summary.jobs_figures
    largest = figures.largest_class() if figures else None
    return (largest.max_wait or 0.0) if largest else 0.0, summary.mean_utilisation


async def run_sweep(sweep: Sweep, run: Callable[[str, dict], Awaitable[Summary]], out: Path,
                    title: str = "") -> list[tuple[str, Summary]]:
    """Run the baselines and each setting (`run(mode, controller settings)` replays once), write
    sweep.csv and tradeoff.png to `out`, and return (label, summary) in order."""
    from ganggate.replay.plot import plot_tradeoff

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
