"""Helpers for the scheduler and kubelet tests: raw JSON pods over HTTP and polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

GPU = "nvidia.com/gpu"
TIMEOUT = 30.0  # a safety net only: every wait ends as soon as its condition holds


def pod_manifest(
    name: str,
    *,
    gpus: int = 0,
    cpu: str | None = "1",
    memory: str | None = None,
    priority: int | None = None,
    gated: bool = False,
    node_selector: dict | None = None,
    tolerations: list | None = None,
    annotations: dict | None = None,
    node_name: str | None = None,
    scheduler_name: str | None = None,
) -> dict:
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    if priority is not None:
        spec["priority"] = priority
    if gated:
        spec["schedulingGates"] = [{"name": "scheduling.k8s.io/group-gate"}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if node_name:
        spec["nodeName"] = node_name
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


class Api:
    """A thin raw-JSON client of the simulator."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def create_pod(self, manifest: dict) -> dict:
        async with self.session.post(f"{self.url}/api/v1/namespaces/default/pods", json=manifest) as response:
            body = await response.json()
            assert response.status == 201, body
            return body

    async def pod(self, name: str) -> dict | None:
        async with self.session.get(f"{self.url}/api/v1/namespaces/default/pods/{name}") as response:
            if response.status == 404:
                return None
            assert response.status == 200
            return await response.json()

    async def pods(self) -> list[dict]:
        async with self.session.get(f"{self.url}/api/v1/namespaces/default/pods") as response:
            return (await response.json())["items"]

    async def delete_pod(self, name: str) -> None:
        async with self.session.delete(f"{self.url}/api/v1/namespaces/default/pods/{name}") as response:
            assert response.status in (200, 202), await response.text()

    async def patch(self, path: str, body: Any, content_type: str) -> dict:
        async with self.session.patch(f"{self.url}{path}", json=body, headers={"Content-Type": content_type}) as response:
            result = await response.json()
            assert response.status == 200, result
            return result


def condition(pod: dict | None, kind: str = "PodScheduled") -> dict | None:
    for item in ((pod or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return item
    return None


async def wait_for(probe: Callable[[], Awaitable[Any]], what: str, timeout: float = TIMEOUT) -> Any:
    """Poll `probe` until it returns something truthy; fail with `what` after the safety net."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def bound_node(api: Api, name: str) -> str:
    async def probe():
        pod = await api.pod(name)
        return (pod or {}).get("spec", {}).get("nodeName")

    return await wait_for(probe, f"{name} to be bound")


async def unschedulable_message(api: Api, name: str, expected: str | None = None) -> str:
    async def probe():
        found = condition(await api.pod(name))
        if found and found.get("reason") == "Unschedulable" and (expected is None or found.get("message") == expected):
            return found["message"]
        return None

    return await wait_for(probe, f"{name} to be Unschedulable" + (f" with {expected!r}" if expected else ""))
