"""Draw GPUs busy vs held idle over time, one panel per admission mode (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ganggate.replay.results.metrics import Sample


def _steps(samples: Sequence[Sample], end: float) -> tuple[list[float], list[int], list[int]]:
    """Hours, busy and held-idle as a step function drawn point to point."""
    times: list[float] = []
    busy: list[int] = []
    held: list[int] = []
    for here, there in zip(samples, list(samples[1:]) + [None], strict=True):
        until = end if there is None else there.time
        for t in (here.time, max(until, here.time)):
            times.append(t / 3600.0)
            busy.append(here.busy_gpus)
            held.append(here.held_idle_gpus)
    return times, busy, held


def plot_modes(
    runs: Mapping[str, Sequence[Sample]],
    capacity: int,
    path: str | Path,
    *,
    title: str = "",
    ends: Mapping[str, float] | None = None,
) -> Path:
    """Save a PNG with one panel per mode: busy GPUs and GPUs held idle by incomplete jobs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    modes = list(runs)
    figure, axes = plt.subplots(
        len(modes), 1, figsize=(9, 2.4 * max(len(modes), 1) + 0.6), sharex=True, squeeze=False
    )
    horizon = max(
        [(ends or {}).get(m, s[-1].time if s else 0.0) for m, s in runs.items()] or [0.0]
    )
    for axis, mode in zip(axes[:, 0], modes, strict=True):
        samples = runs[mode]
        end = (ends or {}).get(mode, samples[-1].time if samples else 0.0)
        times, busy, held = _steps(samples, end)
        axis.stackplot(
            times,
            busy,
            held,
            labels=["busy (whole gang running)", "held idle (gang incomplete)"],
            colors=["#2e7d32", "#c62828"],
            alpha=0.85,
        )
        axis.axhline(capacity, color="black", linewidth=0.8, linestyle="--", label="capacity")
        axis.set_ylim(0, capacity * 1.08)
        axis.set_xlim(0, max(horizon / 3600.0, 1e-6))
        axis.set_ylabel("GPUs")
        axis.set_title(f"mode: {mode}", fontsize=10, loc="left")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("simulated time (hours)")
    if title:
        figure.suptitle(title, fontsize=11)
    return _save(figure, path)


def plot_tradeoff(points: Sequence[tuple[str, float, float]], baselines: Sequence[tuple[str, float, float]],
                  path: str | Path, *, title: str = "", parameter: str = "") -> Path:
    """Save a PNG of mean utilisation against the max wait of the largest gang-size class:
    one labelled point per setting of a swept policy parameter (joined in order), and the
    baselines as distinct markers. Each point is (label, max wait in seconds, utilisation 0-1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axis = plt.subplots(figsize=(7, 4.5))
    if points:
        axis.plot([p[1] / 3600 for p in points], [p[2] * 100 for p in points], "o-", color="#1565c0",
                  label=parameter or "setting")
        for label, wait, util in points:
            axis.annotate(label, (wait / 3600, util * 100), textcoords="offset points", xytext=(5, 5), fontsize=8)
    for (label, wait, util), marker in zip(baselines, "s^Dv*", strict=False):
        axis.plot([wait / 3600], [util * 100], marker, markersize=9, label=label, linestyle="none")
    axis.set_xlabel("max wait of the largest gang-size class (hours)")
    axis.set_ylabel("mean GPU utilisation (%)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    if title:
        axis.set_title(title, fontsize=10)
    return _save(figure, path)


def _save(figure: Any, path: Path) -> Path:
    """Lay the figure out, write it as a PNG and let it go."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
