"""Pure certificate building: a CA and the webhook's serving certificate signed by it.

No file or network I/O here (see certs/files.py): everything takes keys, names and a `now`
and returns cryptography objects or PEM bytes. Keys are ECDSA P-256, which kube-apiserver
accepts for webhook serving certificates and which is quick to generate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# ganggate makes elliptic-curve keys; an RSA CA found in --out signs as well.
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# Backdate notBefore a little so that a node whose clock is slightly behind accepts the cert.
CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: PrivateKey


def new_key() -> PrivateKey:
    """A fresh ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def service_dns_names(service: str, namespace: str, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The names a Service is reached by in-cluster, then any extras, without duplicates."""
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
             f"{service}.{namespace}.svc.cluster.local", *extra]
    return list(dict.fromkeys(names))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def build_ca(key: PrivateKey, common_name: str, now: dt.datetime, days: int) -> x509.Certificate:
    """A self-signed CA certificate that may sign serving certificates only (pathlen 0)."""
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def build_serving_cert(
    ca: KeyPair,
    key: PrivateKey,
    dns_names: list[str],
    ips: list[str],
    now: dt.datetime,
    days: int,
) -> x509.Certificate:
    """A TLS server certificate for the given DNS names and IPs, signed by the CA.

    Go's crypto/x509 (used by kube-apiserver) checks only subjectAltName, never the CN.
    """
    if not dns_names and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    public = key.public_key()
    not_after = min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0] if dns_names else ips[0]))
        .issuer_name(ca.cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False,
                content_commitment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (it lives in a Secret / a 0600 file)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_pair(cert_data: bytes, key_data: bytes) -> KeyPair:
    """Parse a PEM certificate and key, checking that they belong together."""
    cert = x509.load_pem_x509_certificate(cert_data)
    key = serialization.load_pem_private_key(key_data, password=None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ValueError(f"the private key is of a kind ganggate cannot sign with ({type(key).__name__.lstrip('_')}): "
                         "it signs with an elliptic-curve or RSA key")
    if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise ValueError("the certificate does not match the private key")
    return KeyPair(cert=cert, key=key)


def san_names(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """The DNS names and IP addresses a certificate is valid for."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return san.get_values_for_type(x509.DNSName), [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when `cert` carries a valid signature of `ca`."""
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # InvalidSignature, or ValueError/TypeError for another issuer or key type
        return False
    return True


def renewal_reason(
    serving: x509.Certificate | None,
    ca: x509.Certificate,
    dns_names: list[str],
    ips: list[str],
    now: dt.datetime,
    renew_before: dt.timedelta,
) -> str | None:
    """Why the serving certificate must be (re)issued, or None when it can be kept."""
    if serving is None:
        return "no serving certificate yet"
    if not issued_by(serving, ca):
        return "the serving certificate was not issued by this CA"
    have_dns, have_ips = san_names(serving)
    if sorted(have_dns) != sorted(dns_names) or sorted(have_ips) != sorted(str(ipaddress.ip_address(i)) for i in ips):
        return "the serving certificate's names differ from the requested ones"
    left = serving.not_valid_after_utc - now
    if left <= renew_before:
        return f"the serving certificate expires in {left}, within the renewal window {renew_before}"
    return None
