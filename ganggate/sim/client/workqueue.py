"""What kubesim's controllers share with kube-controller-manager's: a work queue and status writes.

A key is queued at most once until a worker takes it (client-go util/workqueue: "dirty" set),
a failed sync is retried after a delay (AddRateLimited: a fixed delay, or with
`ExponentialFailureRateLimiter` client-go's ItemExponentialFailureRateLimiter, forgotten after a
sync that succeeds), a key added with a delay waits once, the earliest delay winning
(delaying_queue.go AddAfter), and a controller
writes an object's status with a PUT to its /status subresource, where a 409 Conflict means a
newer object is on its way through the watch, which queues the key again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

RETRYABLE = (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError)


class ExponentialFailureRateLimiter:
    """client-go workqueue ItemExponentialFailureRateLimiter: a key's n-th retry in a row waits
    base * 2**n seconds, at most `cap`; Forget starts it again at base."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return min(self.cap, self.base * 2 ** min(failures, 62))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def retries(self, key: str) -> int:
        return self._failures.get(key, 0)


class WorkQueue:
    """Keys to sync, each queued once until taken; `run` works them off with one or more
    workers, retrying failures. A key being synced is never given to a second worker: added
    meanwhile, it is queued again when its sync ends (client-go workqueue: the "processing" set,
    Done re-adds a key that became dirty while processing)."""

    def __init__(self, retry_seconds: float = 0.5, *, rate_limiter: ExponentialFailureRateLimiter | None = None,
                 clock: Any = None) -> None:
        self.retry_seconds = retry_seconds
        self.rate_limiter = rate_limiter
        self.clock = clock  # sleep_until/now (ganggate.sim.clock); None: the event loop's time
        self._waiting: dict[str, float] = {}  # key -> when it is due (AddAfter)
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

    @property
    def delayed(self) -> int:
        """Keys waiting out a delay (AddAfter) before they are queued."""
        return len(self._waiting)

    def add_after(self, seconds: float, key: str) -> None:
        """Queue the key after `seconds`; a key already waiting keeps the earlier of the two times."""
        if seconds <= 0:
            self.add(key)
            return
        now = self.clock.now() if self.clock is not None else asyncio.get_running_loop().time()
        due = now + seconds
        if key in self._waiting and self._waiting[key] <= due:
            return
        self._waiting[key] = due
        if self.clock is not None:
            asyncio.ensure_future(self._wake(key, due))
        else:
            asyncio.get_running_loop().call_later(seconds, self._due, key, due)

    async def _wake(self, key: str, due: float) -> None:
        await self.clock.sleep_until(due)
        self._due(key, due)

    def _due(self, key: str, due: float) -> None:
        if self._waiting.get(key) == due:  # not superseded by an earlier AddAfter
            del self._waiting[key]
            self.add(key)

    def add_rate_limited(self, key: str) -> None:
        """AddRateLimited: retry after the rate limiter's delay (retry_seconds without one)."""
        self.add_after(self.rate_limiter.when(key) if self.rate_limiter else self.retry_seconds, key)

    def forget(self, key: str) -> None:
        if self.rate_limiter is not None:
            self.rate_limiter.forget(key)

    async def run(self, sync: Callable[[str], Awaitable[None]], log: logging.Logger, what: str,
                  workers: int = 1) -> None:
        """Sync keys with `workers` concurrent workers until cancelled (kube-controller-manager
        starts `--concurrent-*-syncs` goroutines per controller); a failed sync is retried
        after the rate limiter's delay (processNextWorkItem: AddRateLimited, Forget on success)."""
        await asyncio.gather(*(self._worker(sync, log, what) for _ in range(max(1, workers))))

    async def _worker(self, sync: Callable[[str], Awaitable[None]], log: logging.Logger, what: str) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                await sync(key)
                self.forget(key)
            except RETRYABLE as exc:
                log.info("%s %s: %s; retrying", what, key, exc)
                self.add_rate_limited(key)
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
