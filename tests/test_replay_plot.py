"""The replay plot is a PNG with one panel per mode."""

from __future__ import annotations

from replay.metrics import Sample
from replay.plot import plot_modes


def test_plot_writes_a_png_with_a_panel_per_mode(tmp_path):
    samples = [Sample(0, 8, 0, 1, 0, 0), Sample(3600, 4, 4, 1, 1, 0), Sample(7200, 0, 0, 0, 0, 2)]
    path = plot_modes(
        {"none": samples, "count": samples, "ganggate": samples[:1]},
        16,
        tmp_path / "sub" / "plot.png",
        title="test",
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # Three stacked panels make the picture taller than it is wide.
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert height > width
