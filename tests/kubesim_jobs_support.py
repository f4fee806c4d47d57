"""kubesim clusters for the Job tests: `running` (scheduler, kubelet and controllers) and `idle`
(controllers only), fixtures every test module finds by name (tests/conftest.py lists this module
in pytest_plugins)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from tests.kubesim_support import Raw


async def _cluster(**kwargs: Any) -> AsyncIterator[tuple[Simulator, Raw]]:
    async with Simulator(nodes=2, bookmark_seconds=0.2, **kwargs) as sim, aiohttp.ClientSession() as session:
        yield sim, Raw(sim.url, session)


@pytest.fixture
async def running() -> AsyncIterator[tuple[Simulator, Raw]]:
    """Scheduler, kubelet and controllers: pods run and, with kubesim.io/run-seconds, finish."""
    async for pair in _cluster():
        yield pair


@pytest.fixture
async def idle() -> AsyncIterator[tuple[Simulator, Raw]]:
    """Controllers only: the Job controller's pods stay Pending until a test finishes them."""
    async for pair in _cluster(scheduler=False, kubelet=False):
        yield pair
