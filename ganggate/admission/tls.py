"""The webhook's serving certificate: a TLS 1.2+ context, and its live reload when the files are
rotated on disk (cert-manager, `ganggate certs rotate`), so a rotation needs no restart."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
from typing import Any

log = logging.getLogger("ganggate.webhook")


def make_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context that speaks TLS 1.2 or newer and serves the given certificate."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def load_pair_safely(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """Load a certificate and key into a live context only once they are known to match.

    OpenSSL installs the certificate before it checks the key, so a failed `load_cert_chain`
    on the live context would leave it serving a certificate without its key. The files are
    read once into a private temporary file, tried on a scratch context, then loaded for real
    from the same bytes, so a rotation racing with the read cannot slip a mismatch in.
    """
    with open(cert_file, "rb") as handle:
        cert = handle.read()
    with open(key_file, "rb") as handle:
        key = handle.read()
    with tempfile.TemporaryDirectory(prefix="ganggate-tls-") as tmp:
        combined = os.path.join(tmp, "pair.pem")
        fd = os.open(combined, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(cert.rstrip(b"\n") + b"\n" + key)
        scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        scratch.load_cert_chain(combined)
        context.load_cert_chain(combined)


def file_stamp(*paths: str) -> tuple[tuple[int, int, int], ...]:
    """What changes when a file is replaced: inode, size, mtime (symlinks followed, as a Secret
    volume swaps its ..data link)."""
    result = []
    for path in paths:
        st = os.stat(path)
        result.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(result)


class CertReloader:
    """Polls the certificate files and loads a changed pair into the live SSLContext.

    `load_cert_chain` on the context in use affects every new handshake; connections already
    open keep their session. A half-written pair (key and cert not matching yet) is retried at
    the next poll while the old certificate goes on being served. `metrics` is the webhook's
    (server.Metrics): its `cert_reloads` counter counts the reloads.
    """

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str, interval: float,
                 metrics: Any, loaded: tuple | None = None) -> None:
        self.context = context
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self.metrics = metrics
        # The stamp taken *before* the context first loaded the files, so a change racing with
        # start-up is picked up at the first poll.
        self._loaded = loaded if loaded is not None else file_stamp(cert_file, key_file)

    def check(self) -> bool:
        """Reload when the files changed; True when a new certificate was loaded."""
        try:
            stamp = file_stamp(self.cert_file, self.key_file)
        except OSError as exc:
            log.warning("cannot stat certificate files: %s", exc)
            return False
        if stamp == self._loaded:
            return False
        try:
            load_pair_safely(self.context, self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            self.metrics.cert_reloads.labels(result="error").inc()
            log.warning("new certificate files not loaded yet (will retry): %s", exc)
            return False
        self._loaded = stamp
        self.metrics.cert_reloads.labels(result="success").inc()
        log.info("loaded new serving certificate from %s", self.cert_file)
        return True

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check()
