"""`ganggate webhook` in a subprocess (its own core), for the benchmarks that call it over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ganggate.certs.files import generate


@dataclass
class WebhookProcess:
    proc: subprocess.Popen
    base: str  # https://127.0.0.1:<port>
    ca_file: str

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _wait_ready(webhook: WebhookProcess) -> None:
    deadline = time.monotonic() + 60
    connector = aiohttp.TCPConnector(ssl=webhook.ssl_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{webhook.base}/readyz") as resp:
                    if resp.status == 200:
                        return
            if webhook.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("webhook did not start")
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def webhook_process(answers: list[tuple[str, str]] | None = None) -> AsyncIterator[WebhookProcess]:
    """Fresh certificates, the webhook started on a free loopback port, stopped with SIGTERM.
    With `answers` ([request body, response body] pairs), bench/bare_webhook.py instead: a bare
    aiohttp server answering those bytes, the floor the webhook is measured against."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), "ganggate-webhook", "ganggate-system", ips=("127.0.0.1",))
        port = _free_port()
        tls = ["--cert-file", f"{tmp}/tls.crt", "--key-file", f"{tmp}/tls.key", "--host", "127.0.0.1",
               "--port", str(port)]
        if answers is not None:
            Path(f"{tmp}/answers.json").write_text(json.dumps(answers), encoding="utf-8")
            command = [sys.executable, str(REPO / "bench" / "bare_webhook.py"), *tls, "--answers", f"{tmp}/answers.json"]
        else:
            command = [sys.executable, "-m", "ganggate", "--log-level", "WARNING", "webhook", *tls, "--metrics-port", "0"]
        proc = subprocess.Popen(
            command,
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            webhook = WebhookProcess(proc, f"https://127.0.0.1:{port}", f"{tmp}/ca.crt")
            await _wait_ready(webhook)
            yield webhook
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
