"""The replay plot is a PNG with one panel per mode."""

from __future__ import annotations

from ganggate.replay.results.metrics import Sample
from ganggate.replay.results.plot import plot_modes


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_writes_a_png_with_a_panel_per_mode(tmp_path):
    samples = [Sample(0, 8, 0, 1, 0, 0), Sample(3600, 4, 4, 1, 1, 0), Sample(7200, 0, 0, 0, 0, 2)]
    three = plot_modes(
        {"none": samples, "count": samples, "ganggate": samples[:1]},
        16,
        tmp_path / "sub" / "three.png",
        title="test",
    )
    one = plot_modes({"none": samples}, 16, tmp_path / "one.png")
    (w3, h3), (w1, h1) = png_size(three.read_bytes()), png_size(one.read_bytes())
    assert w3 == w1 and h3 > 2 * h1  # three stacked panels
