"""`ganggate certs generate|inject`: certificates, rotation, renewal window, caBundle injection."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import os
import stat
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID

from ganggate.certs import authority
from ganggate.certs.files import generate
from ganggate.certs.inject import ca_bundle_patch, check_ca_pem
from ganggate.cli import main

REPO = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SERVICE_NAMES = {
    "ganggate-webhook",
    "ganggate-webhook.ganggate-system",
    "ganggate-webhook.ganggate-system.svc",
    "ganggate-webhook.ganggate-system.svc.cluster.local",
}


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def run_cli(*argv: str) -> int:
    return main(list(argv))


def test_generate_writes_a_ca_and_a_serving_cert(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli("certs", "generate", "--service", "ganggate-webhook", "--namespace", "ganggate-system",
                   "--out", str(out), "--days", "30", "--dns", "webhook.example.com", "--ip", "127.0.0.1") == 0
    assert "created a new CA" in capsys.readouterr().out
    ca, tls = load(out / "ca.crt"), load(out / "tls.crt")
    tls.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert tls.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    dns, ips = authority.san_names(tls)
    assert set(dns) == SERVICE_NAMES | {"webhook.example.com"}
    assert ips == ["127.0.0.1"]
    lifetime = tls.not_valid_after_utc - tls.not_valid_before_utc
    assert dt.timedelta(days=30) <= lifetime <= dt.timedelta(days=30, minutes=10)
    for key in ("tls.key", "ca.key"):
        assert stat.S_IMODE(os.stat(out / key).st_mode) == 0o600
    authority.load_pair((out / "tls.crt").read_bytes(), (out / "tls.key").read_bytes())  # they match
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_rerun_reuses_the_ca_and_rotates_the_serving_cert(tmp_path):
    first = generate(tmp_path, "ganggate-webhook", "ganggate-system")
    ca_before, tls_before = (tmp_path / "ca.crt").read_bytes(), load(tmp_path / "tls.crt")
    key_before = (tmp_path / "tls.key").read_bytes()
    second = generate(tmp_path, "ganggate-webhook", "ganggate-system")
    assert first.ca_created and not second.ca_created and second.issued
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    tls_after = load(tmp_path / "tls.crt")
    assert tls_after.serial_number != tls_before.serial_number
    assert (tmp_path / "tls.key").read_bytes() != key_before
    tls_after.verify_directly_issued_by(load(tmp_path / "ca.crt"))


def test_renew_before_keeps_a_cert_that_is_valid_long_enough(tmp_path, capsys):
    generate(tmp_path, "ganggate-webhook", "ganggate-system", days=90, now=NOW)
    serial = load(tmp_path / "tls.crt").serial_number
    kept = generate(tmp_path, "ganggate-webhook", "ganggate-system", renew_before_days=30, now=NOW + dt.timedelta(days=10))
    assert not kept.issued and load(tmp_path / "tls.crt").serial_number == serial
    # Inside the window: renewed, from the same CA.
    renewed = generate(tmp_path, "ganggate-webhook", "ganggate-system", renew_before_days=30, now=NOW + dt.timedelta(days=70))
    assert renewed.issued and "renewal window" in renewed.reason
    assert load(tmp_path / "tls.crt").serial_number != serial


def test_renew_before_reissues_when_the_names_change(tmp_path):
    generate(tmp_path, "ganggate-webhook", "ganggate-system", now=NOW)
    result = generate(tmp_path, "ganggate-webhook", "ganggate-system", dns=("extra.example.com",),
                      renew_before_days=30, now=NOW)
    assert result.issued and "names" in result.reason
    assert "extra.example.com" in authority.san_names(load(tmp_path / "tls.crt"))[0]


def test_renew_before_through_the_cli(tmp_path, capsys):
    args = ("certs", "generate", "--service", "ganggate-webhook", "--namespace", "ganggate-system", "--out", str(tmp_path))
    assert run_cli(*args) == 0
    serial = load(tmp_path / "tls.crt").serial_number
    assert run_cli(*args, "--renew-before", "30") == 0
    assert "kept" in capsys.readouterr().out.splitlines()[-1]
    assert load(tmp_path / "tls.crt").serial_number == serial
    assert run_cli(*args, "--renew-before", "400") == 0  # valid 365 days < 400: renewed
    assert load(tmp_path / "tls.crt").serial_number != serial


def test_a_lone_ca_file_is_an_error_not_a_silent_new_ca(tmp_path, capsys):
    generate(tmp_path, "ganggate-webhook", "ganggate-system")
    (tmp_path / "ca.key").unlink()
    ca_before = (tmp_path / "ca.crt").read_bytes()
    assert run_cli("certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)) == 1
    assert "ca.key" in capsys.readouterr().err
    assert (tmp_path / "ca.crt").read_bytes() == ca_before


def test_a_ca_key_ganggate_cannot_sign_with_is_refused_by_name(tmp_path, capsys):
    """An Ed25519 CA in --out (someone else's): a clear error naming the files, nothing written."""
    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "someone-elses-ca")])
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
          .serial_number(1).not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, None))
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "ca.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    assert run_cli("certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "ca.crt and ca.key" in err and "elliptic-curve or RSA" in err
    assert not (tmp_path / "tls.crt").exists()


def test_bad_ip_is_refused(tmp_path, capsys):
    assert run_cli("certs", "generate", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--ip", "nope") == 1
    assert "nope" in capsys.readouterr().err
    assert not (tmp_path / "ca.crt").exists()


def test_serving_cert_never_outlives_its_ca():
    key = authority.new_key()
    ca = authority.KeyPair(authority.build_ca(key, "short-ca", NOW, 10), key)
    cert = authority.build_serving_cert(ca, authority.new_key(), ["a"], [], NOW, 365)
    assert cert.not_valid_after_utc == ca.cert.not_valid_after_utc


# --- caBundle injection: the patch --------------------------------------------------------------

def configuration() -> dict:
    return yaml.safe_load((REPO / "deploy" / "base" / "mutatingwebhookconfiguration.yaml").read_text())


def test_ca_bundle_patch_sets_every_webhook(tmp_path):
    generate(tmp_path, "ganggate-webhook", "ganggate-system")
    ca_pem = (tmp_path / "ca.crt").read_bytes()
    mwc = configuration()
    second = copy.deepcopy(mwc["webhooks"][0])
    second["name"] = "second.ganggate.io"
    mwc["webhooks"].append(second)
    mwc["webhooks"][1]["clientConfig"]["caBundle"] = "b2xk"  # an old bundle is replaced
    patched = jsonpatch.apply_patch(mwc, ca_bundle_patch(mwc, ca_pem))
    for hook in patched["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem
        assert hook["clientConfig"]["service"]["name"] == "ganggate-webhook"


def test_ca_bundle_patch_fails_when_the_configuration_changed_meanwhile(tmp_path):
    generate(tmp_path, "ganggate-webhook", "ganggate-system")
    mwc = configuration()
    ops = ca_bundle_patch(mwc, (tmp_path / "ca.crt").read_bytes())
    changed = copy.deepcopy(mwc)
    changed["webhooks"][0]["name"] = "someone-else.example.com"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(changed, ops)


def test_ca_bundle_patch_needs_webhooks():
    with pytest.raises(ValueError, match="no webhooks"):
        ca_bundle_patch({"metadata": {"name": "empty"}, "webhooks": []}, b"")


def test_only_a_ca_certificate_is_injected(tmp_path):
    generate(tmp_path, "ganggate-webhook", "ganggate-system")
    check_ca_pem((tmp_path / "ca.crt").read_bytes())
    with pytest.raises(ValueError, match="not a CA"):
        check_ca_pem((tmp_path / "tls.crt").read_bytes())
    with pytest.raises(ValueError, match="PEM"):
        check_ca_pem(b"hello")


# --- caBundle injection against kubesim, through the real CLI ------------------------------------

kubesim = pytest.importorskip("ganggate.sim.simulator")


async def run_ganggate(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ganggate", *argv, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, out.decode(), err.decode()


async def test_inject_patches_the_configuration_in_kubesim(tmp_path):
    from kubernetes_asyncio import client

    from ganggate.sim import Simulator

    generate(tmp_path, "ganggate-webhook", "ganggate-system")
    ca_pem = (tmp_path / "ca.crt").read_bytes()
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        async with sim.api_client() as api_client:
            api = client.AdmissionregistrationV1Api(api_client)
            body = yaml.safe_load((REPO / "deploy" / "kubesim" / "webhook-url.yaml").read_text())
            await api.create_mutating_webhook_configuration(body)
            code, out, err = await run_ganggate("certs", "inject", "--webhook-configuration", "ganggate",
                                                "--ca-file", str(tmp_path / "ca.crt"), "--kubeconfig", sim.kubeconfig)
            assert code == 0, err
            assert "injected the CA into 2 webhooks of ganggate" in out
            stored = await api.read_mutating_webhook_configuration("ganggate")
            for hook, policy in zip(stored.webhooks, ("Fail", "Ignore"), strict=True):
                assert base64.b64decode(hook.client_config.ca_bundle) == ca_pem
                assert hook.client_config.url == "https://127.0.0.1:8443/mutate"
                assert hook.failure_policy == policy  # nothing else changed

            code, _, err = await run_ganggate("certs", "inject", "--webhook-configuration", "missing",
                                              "--ca-file", str(tmp_path / "ca.crt"), "--kubeconfig", sim.kubeconfig)
            assert code == 1 and "missing" in err and "404" in err


async def test_inject_names_a_missing_kubeconfig(tmp_path):
    generate(tmp_path, "ganggate-webhook", "ganggate-system")
    code, _, err = await run_ganggate("certs", "inject", "--webhook-configuration", "ganggate",
                                      "--ca-file", str(tmp_path / "ca.crt"), "--kubeconfig", str(tmp_path / "nope"))
    assert code == 1 and "nope does not exist" in err and "Traceback" not in err, err
