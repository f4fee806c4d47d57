"""kubesim's controller work queue (ganggate.sim.client.workqueue), as client-go's behaves: a key
is synced by one worker at a time, a key added while it is synced is synced once more after, and
several workers sync different keys at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ganggate.sim.client.workqueue import WorkQueue

log = logging.getLogger("test")


async def test_workers_sync_different_keys_together_and_never_one_key_twice_at_once():
    queue = WorkQueue()
    running: set[str] = set()
    overlaps: list[str] = []
    most = 0
    synced: list[str] = []
    release = asyncio.Event()

    async def sync(key: str) -> None:
        nonlocal most
        if key in running:
            overlaps.append(key)
        running.add(key)
        most = max(most, len(running))
        await release.wait()
        running.discard(key)
        synced.append(key)

    worker = asyncio.create_task(queue.run(sync, log, "thing", workers=3))
    for key in ("a", "b", "c"):
        queue.add(key)
    await asyncio.sleep(0.05)
    queue.add("a")  # while "a" is being synced: once more after, not now
    queue.add("a")  # (queued once)
    await asyncio.sleep(0.05)
    assert most == 3 and overlaps == [] and queue.busy
    release.set()
    while queue.busy:
        await asyncio.sleep(0.01)
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    assert sorted(synced) == ["a", "a", "b", "c"] and overlaps == []
