"""What kubesim's controllers share with kube-controller-manager's: a work queue and status writes.

A key is queued at most once until a worker takes it (client-go util/workqueue: "dirty" set),
a failed sync is retried after a delay (AddRateLimited, here a fixed delay), and a controller
writes an object's status with a PUT to its /status subresource, where a 409 Conflict means a
newer object is on its way through the watch, which queues the key again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import aiohttp

RETRYABLE = (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError)


class WorkQueue:
    """Keys to sync, each queued once until taken; `run` works them off, retrying failures."""

    def __init__(self, retry_seconds: float = 0.5) -> None:
        self.retry_seconds = retry_seconds
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._syncing = 0  # keys taken by a worker and not yet synced (client-go's processing set)

    def __len__(self) -> int:
        """Keys queued and not yet taken by a worker."""
        return len(self._queued)

    @property
    def busy(self) -> bool:
        """Keys queued, or one being synced (its writes may still be on their way)."""
        return bool(self._queued) or self._syncing > 0

    def add(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, seconds: float, key: str) -> None:
        asyncio.get_running_loop().call_later(seconds, self.add, key)

    async def run(self, sync: Callable[[str], Awaitable[None]], log: logging.Logger, what: str) -> None:
        """Sync keys one at a time until cancelled; a failed sync is retried after retry_seconds."""
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._syncing += 1
            try:
                await sync(key)
            except RETRYABLE as exc:
                log.info("%s %s: %s; retrying", what, key, exc)
                self.add_after(self.retry_seconds, key)
            finally:
                self._syncing -= 1


async def put_status(session: aiohttp.ClientSession, url: str, obj: dict[str, Any], status: dict[str, Any],
                     key: str) -> None:
    """PUT the object with its new status to `url` (its /status); a 409 or 404 is left to the watch."""
    async with session.put(url, json=dict(obj, status=status)) as response:
        await response.read()
        if response.status == 409:
            return  # a newer object is on its way through the watch, which queues it again
        if response.status >= 300 and response.status != 404:
            raise RuntimeError(f"status of {key}: HTTP {response.status}")
