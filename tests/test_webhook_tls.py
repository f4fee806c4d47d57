"""The webhook over real TLS: handshakes against certs from `certs generate`, live reload, CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from ganggate.certs import authority
from ganggate.certs.files import TLS_CERT, TLS_KEY, generate, write_atomic
from tests.webhook_support import apply_response, gang_pod, gate_count, make_certs, review
from ganggate.admission.server import WebhookConfig, start_webhook

SERVICE_HOST = "ganggate-webhook.ganggate-system.svc"
REPO = Path(__file__).resolve().parent.parent


def client_context(ca_file: Path) -> ssl.SSLContext:
    """A client that trusts only our CA, as kube-apiserver does with the caBundle."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
    context.load_verify_locations(cafile=str(ca_file))
    return context


async def handshake(port: int, context: ssl.SSLContext, server_hostname: str = SERVICE_HOST):
    """Open a TLS connection to 127.0.0.1:port and return (peer certificate, TLS version)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=server_hostname)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        cert = x509.load_der_x509_certificate(ssl_object.getpeercert(binary_form=True))
        return cert, ssl_object.version()
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ssl.SSLError, ConnectionError):
            pass


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    return make_certs(tmp_path / "certs")


def tls_config(cert_dir: Path, **kw) -> WebhookConfig:
    return WebhookConfig(cert_file=str(cert_dir / TLS_CERT), key_file=str(cert_dir / TLS_KEY),
                         host="127.0.0.1", port=0, **kw)


async def test_handshake_with_a_client_trusting_only_the_ca(cert_dir):
    async with await start_webhook(tls_config(cert_dir)) as running:
        assert running.port > 0
        cert, version = await handshake(running.port, client_context(cert_dir / "ca.crt"))
        assert version in ("TLSv1.2", "TLSv1.3")
        dns, _ = authority.san_names(cert)
        assert set(dns) == {
            "ganggate-webhook",
            "ganggate-webhook.ganggate-system",
            "ganggate-webhook.ganggate-system.svc",
            "ganggate-webhook.ganggate-system.svc.cluster.local",
        }
        # A name the certificate does not carry fails verification.
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(running.port, client_context(cert_dir / "ca.crt"), "evil.example.com")


async def test_a_client_that_does_not_trust_the_ca_is_refused(cert_dir, tmp_path):
    other = make_certs(tmp_path / "other")
    async with await start_webhook(tls_config(cert_dir)) as running:
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(running.port, client_context(other / "ca.crt"))


async def test_tls_older_than_1_2_is_refused(cert_dir):
    context = client_context(cert_dir / "ca.crt")
    # Lift the client's own floor (OpenSSL security level 0 permits TLS 1.0/1.1), so the refusal
    # can only come from the server.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    async with await start_webhook(tls_config(cert_dir)) as running:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await handshake(running.port, context)


async def test_mutate_over_https(cert_dir):
    async with await start_webhook(tls_config(cert_dir)) as running:
        connector = aiohttp.TCPConnector(ssl=client_context(cert_dir / "ca.crt"))
        async with aiohttp.ClientSession(connector=connector) as session:
            pod = gang_pod()
            async with session.post(f"https://127.0.0.1:{running.port}/mutate", json=review(pod),
                                    server_hostname=SERVICE_HOST) as resp:
                assert resp.status == 200
                answer = await resp.json()
            assert gate_count(apply_response(pod, answer["response"])) == 1
            async with session.get(f"https://127.0.0.1:{running.port}/readyz", server_hostname=SERVICE_HOST) as resp:
                assert resp.status == 200


async def poll_serial(port: int, ca_file: Path, unwanted: int, timeout: float = 20.0) -> int:
    """New connections' certificate serial, once it differs from `unwanted` (safety-net timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        cert, _ = await handshake(port, client_context(ca_file))
        if cert.serial_number != unwanted or time.monotonic() > deadline:
            return cert.serial_number
        await asyncio.sleep(0.05)


async def test_replaced_cert_files_are_served_without_restart(cert_dir):
    ca_file = cert_dir / "ca.crt"
    async with await start_webhook(tls_config(cert_dir, cert_reload_seconds=0.1)) as running:
        first, _ = await handshake(running.port, client_context(ca_file))
        # An old connection stays open across the rotation.
        reader, writer = await asyncio.open_connection("127.0.0.1", running.port,
                                                       ssl=client_context(ca_file), server_hostname=SERVICE_HOST)
        result = generate(cert_dir, "ganggate-webhook", "ganggate-system", dns=("webhook.example.com",))
        assert result.issued and not result.ca_created
        new_serial = await poll_serial(running.port, ca_file, first.serial_number)
        expected = x509.load_pem_x509_certificate((cert_dir / TLS_CERT).read_bytes())
        assert new_serial == expected.serial_number != first.serial_number
        cert, _ = await handshake(running.port, client_context(ca_file), "webhook.example.com")
        assert cert.serial_number == expected.serial_number
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()
        text = await get_text(running.port, ca_file, "/metrics")
        assert 'ganggate_webhook_certificate_reloads_total{result="success"} 1.0' in text


async def get_text(port: int, ca_file: Path, path: str) -> str:
    """GET a path over TLS, verifying the service name, and return the body."""
    connector = aiohttp.TCPConnector(ssl=client_context(ca_file))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"https://127.0.0.1:{port}{path}", server_hostname=SERVICE_HOST) as resp:
            assert resp.status == 200
            return await resp.text()


async def test_a_mismatched_pair_keeps_the_old_cert_until_fixed(cert_dir):
    ca_file = cert_dir / "ca.crt"
    async with await start_webhook(tls_config(cert_dir, cert_reload_seconds=0.05)) as running:
        first, _ = await handshake(running.port, client_context(ca_file))
        # A cert whose key has not been written yet: the reloader must not break TLS.
        ca = authority.load_pair(ca_file.read_bytes(), (cert_dir / "ca.key").read_bytes())
        from datetime import datetime, timezone
        stray = authority.build_serving_cert(ca, authority.new_key(),
                                             authority.service_dns_names("ganggate-webhook", "ganggate-system"),
                                             [], datetime.now(timezone.utc), 30)
        write_atomic(cert_dir / TLS_CERT, authority.cert_pem(stray), 0o644)
        for _ in range(10):  # several reload attempts happen meanwhile
            cert, _ = await handshake(running.port, client_context(ca_file))
            assert cert.serial_number == first.serial_number
            await asyncio.sleep(0.03)
        generate(cert_dir, "ganggate-webhook", "ganggate-system")  # a proper pair
        assert await poll_serial(running.port, ca_file, first.serial_number) != first.serial_number
        text = await get_text(running.port, ca_file, "/metrics")
        assert 'ganggate_webhook_certificate_reloads_total{result="error"}' in text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_cli_serves_https_and_stops_on_sigterm(cert_dir):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ganggate", "webhook", "--cert-file", str(cert_dir / TLS_CERT),
         "--key-file", str(cert_dir / TLS_KEY), "--host", "127.0.0.1", "--port", str(port),
         "--max-pod-num", "3"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        context = client_context(cert_dir / "ca.crt")
        deadline = time.monotonic() + 30
        while True:  # wait for the server to listen (safety-net deadline)
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "webhook did not start"
                time.sleep(0.1)
        tls = context.wrap_socket(raw, server_hostname=SERVICE_HOST)
        body = json.dumps(review(gang_pod(pod_num="4"))).encode()
        tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
        tls.close()
        assert data.startswith(b"HTTP/1.1 200")
        answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
        # --max-pod-num 3 is in force.
        assert answer["response"]["allowed"] is False and "from 1 to 3" in answer["response"]["status"]["message"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"listening on https://127.0.0.1:{port}" in out


async def test_rotation_by_a_secret_volume_symlink_swap(tmp_path):
    """The kubelet updates a mounted Secret by swapping a `..data` symlink (AtomicWriter,
    pkg/volume/util/atomic_writer.go): tls.crt -> ..data/tls.crt -> ..<timestamp>/tls.crt."""
    mount = tmp_path / "mount"
    mount.mkdir()
    first = make_certs(tmp_path / "v1")
    (mount / "..v1").symlink_to(first)
    (mount / "..data").symlink_to("..v1")
    for name in (TLS_CERT, TLS_KEY, "ca.crt"):
        (mount / name).symlink_to(f"..data/{name}")
    async with await start_webhook(tls_config(mount, cert_reload_seconds=0.05)) as running:
        before, _ = await handshake(running.port, client_context(mount / "ca.crt"))
        second = tmp_path / "v2"
        second.mkdir()
        for name in ("ca.crt", "ca.key"):
            (second / name).write_bytes((first / name).read_bytes())
        generate(second, "ganggate-webhook", "ganggate-system")
        (mount / "..data_tmp").symlink_to("..v2")
        (mount / "..v2").symlink_to(second)
        os.replace(mount / "..data_tmp", mount / "..data")
        after = await poll_serial(running.port, mount / "ca.crt", before.serial_number)
        assert after == x509.load_pem_x509_certificate((second / TLS_CERT).read_bytes()).serial_number
