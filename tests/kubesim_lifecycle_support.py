"""Helpers for the graceful-deletion and node-lifecycle tests: a simulator on a ManualClock, raw HTTP, watches."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp

from ganggate.sim import Simulator
from ganggate.sim.clock import ManualClock
from tests.test_kubesim_scheduler_support import Api, wait_for

PODS = "/api/v1/namespaces/default/pods"


@contextlib.asynccontextmanager
async def simulator(clock: ManualClock, **kwargs: Any):
    async with Simulator(clock=clock, **kwargs) as sim, aiohttp.ClientSession() as session:
        yield sim, Api(session, sim.url)


async def delete(api: Api, name: str, **options: Any) -> tuple[int, dict]:
    async with api.session.delete(f"{api.url}{PODS}/{name}", json=options or None) as response:
        return response.status, await response.json()


async def sleeper_at(clock: ManualClock, when: float) -> None:
    """Wait until some component sleeps on the clock until `when`."""
    async def probe():
        return clock.next_wakeup() == when
    await wait_for(probe, f"a sleeper at {when}")


async def gone(api: Api, name: str) -> None:
    async def probe():
        return await api.pod(name) is None
    await wait_for(probe, f"{name} to be deleted")


async def pod_where(api: Api, name: str, check, what: str) -> dict:
    async def probe():
        pod = await api.pod(name)
        return pod if pod is not None and check(pod) else None
    return await wait_for(probe, what)


class Watch:
    """The events of one pod, collected from a watch started now."""

    def __init__(self, api: Api, name: str) -> None:
        self.events: list[tuple[str, dict]] = []
        self._task = asyncio.ensure_future(self._run(api, name))

    async def _run(self, api: Api, name: str) -> None:
        url = f"{api.url}{PODS}?watch=true&fieldSelector=metadata.name={name}"
        async with api.session.get(url) as response:
            async for line in response.content:
                event = json.loads(line)
                self.events.append((event["type"], event["object"]))

    async def until(self, kind: str) -> list[tuple[str, dict]]:
        async def probe():
            return any(k == kind for k, _ in self.events)
        await wait_for(probe, f"a {kind} event")
        return self.events

    def close(self) -> None:
        self._task.cancel()
