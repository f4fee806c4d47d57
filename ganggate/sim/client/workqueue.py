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
    """Keys to sync, each queued once until taken; `run` works them off with one or more
    workers, retrying failures. A key being synced is never given to a second worker: added
    meanwhile, it is queued again when its sync ends (client-go workqueue: the "processing" set,
    Done re-adds a key that became dirty while processing)."""

    def __init__(self, retry_seconds: float = 0.5) -> None:
        self.retry_seconds = retry_seconds
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()  # client-go's dirty set
        self._processing: set[str] = set()  # keys taken by a worker and not yet synced

    def __len__(self) -> int:
        """Keys waiting for a sync (taken by no worker yet, or due again after the current one)."""
        return len(self._queued)

    @property
    def busy(self) -> bool:
        """Keys queued, or one being synced (its writes may still be on their way)."""
        return bool(self._queued) or bool(self._processing)

    def add(self, key: str) -> None:
        if key in self._queued:
            return
        self._queued.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, seconds: float, key: str) -> None:
        asyncio.get_running_loop().call_later(seconds, self.add, key)

    async def run(self, sync: Callable[[str], Awaitable[None]], log: logging.Logger, what: str,
                  workers: int = 1) -> None:
        """Sync keys with `workers` concurrent workers until cancelled (kube-controller-manager
        starts `--concurrent-*-syncs` goroutines per controller); a failed sync is retried
        after retry_seconds."""
        await asyncio.gather(*(self._worker(sync, log, what) for _ in range(max(1, workers))))

    async def _worker(self, sync: Callable[[str], Awaitable[None]], log: logging.Logger, what: str) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                await sync(key)
            except RETRYABLE as exc:
                log.info("%s %s: %s; retrying", what, key, exc)
                self.add_after(self.retry_seconds, key)
            finally:
                self._processing.discard(key)
                if key in self._queued:  # added while it was synced: its turn again
                    self._queue.put_nowait(key)


async def put_status(session: aiohttp.ClientSession, url: str, obj: dict[str, Any], status: dict[str, Any],
                     key: str) -> None:
    """PUT the object with its new status to `url` (its /status); a 409 or 404 is left to the watch."""
    async with session.put(url, json=dict(obj, status=status)) as response:
        await response.read()
        if response.status == 409:
            return  # a newer object is on its way through the watch, which queues it again
        if response.status >= 300 and response.status != 404:
            raise RuntimeError(f"status of {key}: HTTP {response.status}")
