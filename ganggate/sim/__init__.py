"""kubesim: an in-memory stand-in for kube-apiserver and the default scheduler, served over HTTP.

`from kubesim import Simulator` gives the embedded harness (kubesim/simulator.py); it is imported
lazily so that the pure modules (clock, validation, selectors) load without aiohttp.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Simulator"]


def __getattr__(name: str) -> Any:
    if name == "Simulator":
        from ganggate.sim.simulator import Simulator

        return Simulator
    raise AttributeError(f"module 'ganggate.sim' has no attribute {name!r}")
