"""Small asyncio helpers shared by the tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def running(coro: Coroutine[Any, Any, Any]) -> AsyncIterator[asyncio.Task]:
    """Run a coroutine (a component's run()) as a task for the block; cancel it and wait for it on exit."""
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
