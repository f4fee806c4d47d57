"""The webhook over real TLS: handshakes against certs from `certs generate`, live reload, CLI."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from ganggate.admission.server import WebhookConfig, start_webhook
from ganggate.certs import authority
from ganggate.certs.files import TLS_CERT, TLS_KEY, generate, write_atomic
from tests.webhook_support import apply_response, gang_pod, gate_count, make_certs, review

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
                         host="127.0.0.1", port=0, metrics_port=0, **kw)


async def scrape(running) -> str:
    """GET /metrics from the plain-HTTP metrics port."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{running.metrics_url}/metrics") as resp:
            assert resp.status == 200
            return await resp.text()


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
        text = await scrape(running)
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
        from datetime import datetime
        stray = authority.build_serving_cert(ca, authority.new_key(),
                                             authority.service_dns_names("ganggate-webhook", "ganggate-system"),
                                             [], datetime.now(UTC), 30)
        write_atomic(cert_dir / TLS_CERT, authority.cert_pem(stray), 0o644)
        for _ in range(10):  # several reload attempts happen meanwhile
            cert, _ = await handshake(running.port, client_context(ca_file))
            assert cert.serial_number == first.serial_number
            await asyncio.sleep(0.03)
        generate(cert_dir, "ganggate-webhook", "ganggate-system")  # a proper pair
        assert await poll_serial(running.port, ca_file, first.serial_number) != first.serial_number
        text = await scrape(running)
        assert 'ganggate_webhook_certificate_reloads_total{result="error"}' in text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_cli(*args: str) -> tuple[subprocess.Popen, int, str]:
    """`ganggate webhook` as a process on free loopback ports: (process, HTTPS port, metrics URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ganggate", "webhook", "--host", "127.0.0.1", "--port", "0",
         "--metrics-port", "0", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    line = proc.stdout.readline()  # "ganggate webhook listening on https://H:P, metrics on http://H:M"
    match = re.search(r"listening on https://127\.0\.0\.1:(\d+), metrics on (http://127\.0\.0\.1:\d+)", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"webhook did not start: {line!r} {proc.communicate()}")
    return proc, int(match.group(1)), match.group(2)


def tls_request(port: int, ca_file: Path, request: bytes) -> ssl.SSLSocket:
    """A TLS connection to the webhook, as the API server opens it, with `request` sent."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    tls = client_context(ca_file).wrap_socket(raw, server_hostname=SERVICE_HOST)
    tls.sendall(request)
    return tls


def read_all(tls: ssl.SSLSocket) -> bytes:
    data = b""
    while chunk := tls.recv(65536):
        data += chunk
    tls.close()
    return data


def http_status(url: str) -> int | None:
    """The status of a plain GET, or None when nothing answers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def post_headers(body: bytes, *extra: bytes) -> bytes:
    return (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + b"".join(extra) + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")


def test_cli_serves_https_and_metrics_apart(cert_dir):
    proc, port, metrics_url = start_cli("--cert-file", str(cert_dir / TLS_CERT),
                                        "--key-file", str(cert_dir / TLS_KEY), "--max-pod-num", "3")
    try:
        body = json.dumps(review(gang_pod(pod_num="4"))).encode()
        data = read_all(tls_request(port, cert_dir / "ca.crt", post_headers(body) + body))
        assert data.startswith(b"HTTP/1.1 200")
        answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
        # --max-pod-num 3 is in force.
        assert answer["response"]["allowed"] is False and "from 1 to 3" in answer["response"]["status"]["message"]
        # Prometheus scrapes plain HTTP on its own port; the admission port keeps only the probes.
        import urllib.request

        with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=30) as resp:
            assert 'ganggate_webhook_requests_total{outcome="denied"} 1.0' in resp.read().decode()
        assert http_status(f"{metrics_url}/readyz") == 200 and http_status(f"{metrics_url}/healthz") == 200
        for path, status in (("/metrics", b"404"), ("/healthz", b"200"), ("/readyz", b"200")):
            get = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            assert read_all(tls_request(port, cert_dir / "ca.crt", get)).startswith(b"HTTP/1.1 " + status)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_review_in_flight_at_shutdown_is_answered(cert_dir, sig):
    proc, port, metrics_url = start_cli("--cert-dir", str(cert_dir))
    try:
        body = json.dumps(review(gang_pod(pod_num="4"))).encode()
        # The headers only: "100 Continue" comes back once the webhook is handling the request.
        tls = tls_request(port, cert_dir / "ca.crt", post_headers(body, b"Expect: 100-continue\r\n"))
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            interim += tls.recv(1)
        assert interim.startswith(b"HTTP/1.1 100")
        proc.send_signal(sig)
        while http_status(f"{metrics_url}/readyz") != 503:  # unready at once
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        while True:  # and no longer accepting connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=30).close()
            except ConnectionRefusedError:
                break
            time.sleep(0.05)
        assert proc.poll() is None  # still draining
        tls.sendall(body)
        data = read_all(tls)
    finally:  # the one signal is all it gets: having drained, it exits by itself
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert data.startswith(b"HTTP/1.1 200"), data
    response = json.loads(data.split(b"\r\n\r\n", 1)[1])["response"]
    assert response["uid"] == json.loads(body)["request"]["uid"] and response["allowed"] is True
    assert apply_response(gang_pod(pod_num="4"), response)["spec"]["schedulingGates"]
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopping" in err


def test_a_review_that_never_completes_is_cut_off_after_the_grace(cert_dir):
    proc, port, _ = start_cli("--cert-dir", str(cert_dir), "--shutdown-grace-seconds", "0.2")
    body = json.dumps(review(gang_pod())).encode()
    tls = tls_request(port, cert_dir / "ca.crt", post_headers(body, b"Expect: 100-continue\r\n"))
    assert tls.recv(25).startswith(b"HTTP/1.1 100")
    proc.send_signal(signal.SIGTERM)  # the body never comes
    out, err = proc.communicate(timeout=60)
    tls.close()
    assert proc.returncode == 0, err
    assert "1 review(s) still in flight after 0.2s: cut off" in err and "Traceback" not in err


@pytest.mark.parametrize("args, code, message", [
    ([], 2, "ganggate webhook: the serving certificate is needed: --cert-dir DIR, or --cert-file and --key-file"),
    (["--cert-dir", "/nonexistent/certs"], 1, "ganggate webhook: cannot serve: [Errno 2] No such file or directory"),
])
def test_bad_certificate_options_are_one_line_errors(args, code, message):
    result = subprocess.run([sys.executable, "-m", "ganggate", "webhook", "--port", "0", "--metrics-port", "0", *args],
                            cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == code
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message), result.stderr


def test_a_taken_metrics_port_is_a_one_line_error(cert_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = subprocess.run([sys.executable, "-m", "ganggate", "webhook", "--cert-dir", str(cert_dir),
                                 "--host", "127.0.0.1", "--port", "0",
                                 "--metrics-port", str(taken.getsockname()[1])],
                                cwd=REPO, capture_output=True, text=True, timeout=60,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and "cannot serve" in result.stderr, result.stderr


async def test_https_port_has_no_metrics_and_the_metrics_port_no_tls(cert_dir):
    async with await start_webhook(tls_config(cert_dir)) as running:
        assert running.metrics_url.startswith("http://127.0.0.1:")
        assert 'ganggate_webhook_requests_total{outcome="gated"} 0.0' in await scrape(running)
        connector = aiohttp.TCPConnector(ssl=client_context(cert_dir / "ca.crt"))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get(f"https://127.0.0.1:{running.port}/metrics", server_hostname=SERVICE_HOST) as resp:
                assert resp.status == 404
    assert running.health.ready is False


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
