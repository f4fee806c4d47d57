"""Writing and reading the certificate directory: ca.crt, ca.key, tls.crt, tls.key.

Files are replaced atomically (write a temporary file, then rename) so a webhook polling the
directory never reads half a certificate; private keys are mode 0600.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ganggate.certs import authority

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
DEFAULT_CA_DAYS = 3650
DEFAULT_SERVING_DAYS = 365


@dataclass(frozen=True)
class GenerateResult:
    """What `generate` did: whether the CA was created and whether a serving cert was issued."""

    ca_created: bool
    issued: bool
    reason: str
    not_after: dt.datetime


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data` in one rename, created with `mode` from the start."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_pair(out: Path, cert_name: str, key_name: str) -> authority.KeyPair | None:
    cert_path, key_path = out / cert_name, out / key_name
    if not cert_path.exists() and not key_path.exists():
        return None
    if not cert_path.exists() or not key_path.exists():
        raise ValueError(f"{out} has only one of {cert_name} and {key_name}; remove it or add the other")
    try:
        return authority.load_pair(cert_path.read_bytes(), key_path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{out}/{cert_name} and {key_name}: {exc}") from None


def generate(
    out: Path,
    service: str,
    namespace: str,
    *,
    days: int = DEFAULT_SERVING_DAYS,
    ca_days: int = DEFAULT_CA_DAYS,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    renew_before_days: float | None = None,
    now: dt.datetime | None = None,
) -> GenerateResult:
    """Make (or reuse) the CA in `out` and issue a serving certificate for the Service.

    An existing ca.crt/ca.key is reused so a caBundle already injected stays valid. Without
    `renew_before_days` a new serving certificate is always issued (rotation); with it, the
    current one is kept while it is valid for longer than that, for the same names, from this CA.
    """
    now = now or dt.datetime.now(dt.UTC)
    out.mkdir(parents=True, exist_ok=True)
    dns_names = authority.service_dns_names(service, namespace, dns)
    ca = _read_pair(out, CA_CERT, CA_KEY)
    ca_created = ca is None
    if ca is None:
        ca_key = authority.new_key()
        ca = authority.KeyPair(authority.build_ca(ca_key, f"ganggate-ca-{namespace}", now, ca_days), ca_key)
        write_atomic(out / CA_KEY, authority.key_pem(ca.key), 0o600)
        write_atomic(out / CA_CERT, authority.cert_pem(ca.cert), 0o644)
    if renew_before_days is not None and not ca_created:
        try:
            current = _read_pair(out, TLS_CERT, TLS_KEY)
        except ValueError:
            current = None
        reason = authority.renewal_reason(
            current.cert if current else None, ca.cert, dns_names, list(ips), now,
            dt.timedelta(days=renew_before_days),
        )
        if reason is None and current is not None:
            return GenerateResult(False, False, "the serving certificate is still valid",
                                  current.cert.not_valid_after_utc)
    else:
        reason = "new CA" if ca_created else "rotation requested"
    key = authority.new_key()
    cert = authority.build_serving_cert(ca, key, dns_names, list(ips), now, days)
    # Key first, then cert: a reader that sees the new cert already finds the matching key.
    write_atomic(out / TLS_KEY, authority.key_pem(key), 0o600)
    write_atomic(out / TLS_CERT, authority.cert_pem(cert), 0o644)
    return GenerateResult(ca_created, True, reason or "", cert.not_valid_after_utc)
