"""Put the CA into a MutatingWebhookConfiguration's caBundle, through the Kubernetes API.

`ca_bundle_patch` is pure (the JSON patch); `inject_ca_bundle` reads the configuration,
builds the patch and sends it with kubernetes-asyncio.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from cryptography import x509


def check_ca_pem(ca_pem: bytes) -> None:
    """Raise ValueError unless the data holds at least one PEM certificate that is a CA."""
    try:
        certs = x509.load_pem_x509_certificates(ca_pem)
    except ValueError as exc:
        raise ValueError(f"not a PEM certificate: {exc}") from None
    for cert in certs:
        try:
            if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
                continue
        except x509.ExtensionNotFound:
            pass
        raise ValueError(f"certificate {cert.subject.rfc4514_string()} is not a CA")


def ca_bundle_patch(configuration: Mapping[str, Any], ca_pem: bytes) -> list[dict[str, Any]]:
    """A JSON patch (RFC 6902) setting clientConfig.caBundle of every webhook.

    Each webhook's name is tested first, so a configuration changed between read and patch
    fails the patch instead of giving the CA to the wrong webhook. caBundle is PEM, base64
    encoded as every []byte in the JSON API.
    """
    bundle = base64.b64encode(ca_pem).decode()
    webhooks = configuration.get("webhooks") or []
    if not webhooks:
        name = (configuration.get("metadata") or {}).get("name")
        raise ValueError(f"MutatingWebhookConfiguration {name} has no webhooks")
    ops: list[dict[str, Any]] = []
    for index, hook in enumerate(webhooks):
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook["name"]})
        if not isinstance(hook.get("clientConfig"), Mapping):
            ops.append({"op": "add", "path": f"/webhooks/{index}/clientConfig", "value": {"caBundle": bundle}})
        else:
            ops.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle})
    return ops


async def inject_ca_bundle(api_client: Any, name: str, ca_pem: bytes) -> int:
    """Patch the CA into every webhook of the named configuration; returns how many."""
    from kubernetes_asyncio import client

    check_ca_pem(ca_pem)
    api = client.AdmissionregistrationV1Api(api_client)
    current = await api.read_mutating_webhook_configuration(name)
    configuration = api_client.sanitize_for_serialization(current)  # the JSON form, camelCase
    ops = ca_bundle_patch(configuration, ca_pem)
    await api.patch_mutating_webhook_configuration(name, body=ops)
    return len(configuration["webhooks"])
