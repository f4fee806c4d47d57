"""Helpers for kubesim's API tests: a Simulator fixture, manifests and a raw HTTP client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator

GATE = "scheduling.k8s.io/group-gate"


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    """A simulator with two 8-GPU nodes and no scheduler, kubelet or controllers (the API alone)."""
    async with Simulator(nodes=2, scheduler=False, kubelet=False, controllers=False, bookmark_seconds=0.2) as simulator:
        yield simulator


@pytest.fixture
async def api(sim: Simulator) -> AsyncIterator[Any]:
    """A kubernetes_asyncio ApiClient for the simulator."""
    async with sim.api_client() as client:
        yield client


def pod_manifest(name: str, *, gates: list[str] | None = None, gpus: int = 0, cpu: str | None = None,
                 labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                 node_name: str | None = None, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if cpu:
        limits["cpu"] = cpu
    if limits:
        container["resources"] = {"limits": limits}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"containers": [container], **spec},
    }
    if namespace:
        body["metadata"]["namespace"] = namespace
    if gates:
        body["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


class Raw:
    """Plain HTTP against the simulator, for what the typed client hides (status bodies, headers)."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url
        self.session = session

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      ) -> tuple[int, Any, dict[str, str]]:
        data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(method, self.base_url + path, data=data, headers=headers) as response:
            text = await response.text()
            try:
                parsed = json.loads(text) if text else None
            except ValueError:
                parsed = text
            return response.status, parsed, dict(response.headers)


@pytest.fixture
async def raw(sim: Simulator) -> AsyncIterator[Raw]:
    async with aiohttp.ClientSession() as session:
        yield Raw(sim.url, session)


async def eventually(check: Callable[[], Awaitable[Any] | Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll until check() returns something truthy (a safety net, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError("condition not met before the safety timeout")
        await asyncio.sleep(interval)


async def read_watch(raw: Raw, path: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Read `count` events (or until the stream ends) from a watch URL."""
    events: list[dict[str, Any]] = []

    async def consume() -> None:
        async with raw.session.get(raw.base_url + path) as response:
            assert response.status == 200
            while len(events) < count:
                line = await response.content.readline()
                if not line:
                    return
                events.append(json.loads(line))

    await asyncio.wait_for(consume(), timeout)
    return events


def status_of(error: Any) -> dict[str, Any]:
    """The Status object of a kubernetes_asyncio ApiException."""
    return json.loads(error.body)
