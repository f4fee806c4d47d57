"""A recording HTTPS admission webhook and its TLS material, for the tests of kubesim's mutating
admission chain (test_kubesim_admission and the tests built on it). `tls_pair` and `webhook` are
fixtures every test module finds by name (tests/conftest.py lists this module in pytest_plugins)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from ganggate.certs.authority import KeyPair, build_ca, build_serving_cert, cert_pem, key_pem, new_key

# --- certificates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    ca_bundle: str  # base64 PEM, as in clientConfig.caBundle
    cert_file: str
    key_file: str


def _make_tls(directory: Path, label: str) -> Tls:
    now = dt.datetime.now(dt.UTC)
    ca_key = new_key()
    ca = KeyPair(build_ca(ca_key, f"{label}-ca", now, 1), ca_key)
    key = new_key()
    cert = build_serving_cert(ca, key, ["localhost"], ["127.0.0.1"], now, 1)
    cert_file, key_file = directory / f"{label}.crt", directory / f"{label}.key"
    cert_file.write_bytes(cert_pem(cert))
    key_file.write_bytes(key_pem(key))
    return Tls(base64.b64encode(cert_pem(ca.cert)).decode(), str(cert_file), str(key_file))


@pytest.fixture(scope="module")
def tls_pair() -> tuple[Tls, Tls]:
    """The webhook's TLS material, and an unrelated CA's (to present the wrong caBundle)."""
    with tempfile.TemporaryDirectory() as tmp:
        yield _make_tls(Path(tmp), "webhook"), _make_tls(Path(tmp), "other")


# --- the recording webhook server ---------------------------------------------------------

Behaviour = Callable[[dict], Awaitable[web.Response | dict] | web.Response | dict]


@dataclass
class Call:
    path: str
    query: dict[str, str]
    review: dict

    @property
    def request(self) -> dict:
        return self.review["request"]


@dataclass
class RecordingWebhook:
    """An HTTPS webhook that records reviews and answers per path with a configured behaviour."""

    base_url: str
    ca_bundle: str
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path}"

    def on(self, path: str, behaviour: Behaviour) -> str:
        self.behaviours[path] = behaviour
        return self.url(path)

    def calls_to(self, path: str) -> list[Call]:
        return [c for c in self.calls if c.path == path]

    async def handle(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        review = await request.json()
        self.calls.append(Call(path, dict(request.query), review))
        answer = self.behaviours[path](review["request"])
        if asyncio.iscoroutine(answer):
            answer = await answer
        if isinstance(answer, web.Response):
            return answer
        return web.json_response({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": answer})


async def serve(tls: Tls) -> tuple[RecordingWebhook, web.AppRunner]:
    """A RecordingWebhook on a free loopback port, serving tls."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    server = RecordingWebhook("", tls.ca_bundle)
    app = web.Application()
    app.router.add_post("/{path}", server.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    server.base_url = f"https://127.0.0.1:{port}"
    return server, runner


@pytest.fixture
async def webhook(tls_pair):
    server, runner = await serve(tls_pair[0])
    yield server
    server.release.set()
    await runner.cleanup()
