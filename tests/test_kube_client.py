"""The API client every component builds (ganggate.kube.client.make_api_client): the proxy from
the environment is used, looked up once rather than on every request; a missing kubeconfig is named."""

from __future__ import annotations

import asyncio

import aiohttp.client
import pytest
from kubernetes_asyncio import client

from ganggate.kube.calls import call_json
from ganggate.kube.client import ConfigError, make_api_client
from ganggate.sim import Simulator
from ganggate.sim.kubeconfig import write_kubeconfig


def _clear_proxy_environment(monkeypatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_requests_do_not_look_the_environment_up_each_time(monkeypatch):
    _clear_proxy_environment(monkeypatch)
    lookups = []

    def counting(url):
        lookups.append(url)
        raise LookupError("no proxy")

    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False) as sim:
        api = await make_api_client(sim.kubeconfig, concurrency=4)
        monkeypatch.setattr(aiohttp.client, "get_env_proxy_for_url", counting)
        try:
            core = client.CoreV1Api(api)
            for _ in range(3):
                nodes = await call_json(core.list_node)
                assert [n["metadata"]["name"] for n in nodes["items"]] == ["node-0"]
        finally:
            await api.close()
    assert lookups == []


async def test_the_proxy_in_the_environment_carries_the_requests(monkeypatch, tmp_path):
    _clear_proxy_environment(monkeypatch)
    seen: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0].decode())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"
                     b"Connection: close\r\n\r\n{\"items\":[]}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), "http://kube.example:6443")
    api = await make_api_client(str(kubeconfig))
    try:
        assert await call_json(client.CoreV1Api(api).list_node) == {"items": []}
    finally:
        await api.close()
        server.close()
        await server.wait_closed()
    assert seen == ["GET http://kube.example:6443/api/v1/nodes HTTP/1.1"]


async def test_no_proxy_covering_the_host_sends_requests_directly(monkeypatch):
    _clear_proxy_environment(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False) as sim:
        api = await make_api_client(sim.kubeconfig)
        try:
            nodes = await call_json(client.CoreV1Api(api).list_node)
        finally:
            await api.close()
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["node-0"]


async def test_a_kubeconfig_that_does_not_exist_is_named_as_missing(tmp_path):
    missing = tmp_path / "no-such-kubeconfig"
    with pytest.raises(ConfigError, match="does not exist") as caught:
        await make_api_client(str(missing))
    assert str(missing) in str(caught.value)
