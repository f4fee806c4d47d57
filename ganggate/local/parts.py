"""The start-up steps shared by `ganggate sim up` and the demo's stack: certificates, the webhook
over HTTPS registered by its MutatingWebhookConfiguration (with the ValidatingAdmissionPolicies
that police pod updates in its stead), a namespace, the gate controller."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: deploy/kubesim/webhook-url.yaml, shipped in the package so an installed wheel has it.
MANIFEST = "webhook-url.yaml"
#: deploy/base/validatingadmissionpolicies.yaml, shipped likewise.
POLICIES = "validatingadmissionpolicies.yaml"


def manifest_text() -> str:
    """The MutatingWebhookConfiguration in the URL form of clientConfig, as shipped."""
    return resources.files("ganggate.local").joinpath(MANIFEST).read_text(encoding="utf-8")


def policies_text() -> str:
    """The ValidatingAdmissionPolicies and bindings of deploy/base, as shipped."""
    return resources.files("ganggate.local").joinpath(POLICIES).read_text(encoding="utf-8")


def admission_policies() -> list[dict[str, Any]]:
    """The shipped policies and their bindings, policies first (a binding names its policy)."""
    import yaml

    objects = [doc for doc in yaml.safe_load_all(policies_text()) if doc]
    return sorted(objects, key=lambda doc: doc["kind"] != "ValidatingAdmissionPolicy")


def webhook_configuration(url: str, ca_pem: bytes, *, match_conditions: bool = True) -> dict[str, Any]:
    """The shipped MutatingWebhookConfiguration pointed at `url` with the CA (without its
    matchConditions when `match_conditions` is False)."""
    import yaml

    configuration: dict[str, Any] = yaml.safe_load(manifest_text())
    for webhook in configuration["webhooks"]:
        webhook["clientConfig"] = {
            "url": url.rstrip("/") + "/mutate",
            "caBundle": base64.b64encode(ca_pem).decode(),
        }
        if not match_conditions:
            webhook.pop("matchConditions", None)
    return configuration


@dataclass(frozen=True)
class Certificates:
    """The webhook's serving certificate and key, and the CA that signed them."""

    cert_file: Path
    key_file: Path
    ca_file: Path


def make_certificates(directory: Path) -> Certificates:
    """Make (or reuse) a CA and a serving certificate for 127.0.0.1 in `directory`."""
    from ganggate.certs import files as certfiles

    certfiles.generate(directory, "ganggate-webhook", "ganggate-system", ips=("127.0.0.1",))
    return Certificates(directory / certfiles.TLS_CERT, directory / certfiles.TLS_KEY, directory / certfiles.CA_CERT)


async def start_tls_webhook(certs: Certificates, port: int = 0, **podgroups: Any) -> Any:
    """Serve the webhook over HTTPS on 127.0.0.1:`port` (0: a free one); a taken port raises OSError.
    `podgroups`: the webhook's podgroups and native_gang_scheduling settings (WebhookConfig)."""
    from ganggate.admission.server import WebhookConfig, start_webhook

    return await start_webhook(WebhookConfig(cert_file=str(certs.cert_file), key_file=str(certs.key_file),
                                             host="127.0.0.1", port=port, cert_reload_seconds=0, **podgroups))


async def register_webhook(api: Any, configuration: dict[str, Any], *, policies: bool = True) -> None:
    """Create the MutatingWebhookConfiguration through the API server, and (unless `policies` is
    False) the shipped ValidatingAdmissionPolicies: the configuration matches pod CREATE only and
    relies on them to keep the gang annotations immutable."""
    from kubernetes_asyncio import client

    admission = client.AdmissionregistrationV1Api(api)
    if policies:
        await register_policies(api)
    # A dict body: kubernetes_asyncio sends it as is (ApiClient.sanitize_for_serialization); its hints name the model.
    await admission.create_mutating_webhook_configuration(configuration)  # type: ignore[arg-type]
    log.info("webhook registered: MutatingWebhookConfiguration %s -> %s",
             configuration["metadata"]["name"], configuration["webhooks"][0]["clientConfig"]["url"])


async def register_policies(api: Any) -> None:
    """Create the shipped ValidatingAdmissionPolicies and their bindings."""
    from kubernetes_asyncio import client

    admission = client.AdmissionregistrationV1Api(api)
    for obj in admission_policies():
        if obj["kind"] == "ValidatingAdmissionPolicy":
            await admission.create_validating_admission_policy(obj)  # type: ignore[arg-type]  # a dict body (see above)
        else:
            await admission.create_validating_admission_policy_binding(obj)  # type: ignore[arg-type]  # a dict body (see above)
    log.info("admission policies registered: %s",
             ", ".join(o["metadata"]["name"] for o in admission_policies() if o["kind"] == "ValidatingAdmissionPolicy"))


#: deploy/components/gate-by-policy's policies, shipped likewise (the gate by policy, `sim up --gate-by policy`).
GATE_POLICIES = ("gate-mutatingadmissionpolicies.yaml", "gate-validatingadmissionpolicies.yaml")
#: ... and its kustomization, whose patch narrows the webhook to the pods a policy cannot gate.
GATE_KUSTOMIZATION = "gate-kustomization.yaml"
#: The version of MutatingAdmissionPolicy kubesim serves: 1.35's beta (the component's manifests say
#: v1, GA in 1.36; the two have the same fields).
KUBESIM_MAP_VERSION = "admissionregistration.k8s.io/v1beta1"


def gate_policies_text(name: str) -> str:
    """One of deploy/components/gate-by-policy's manifests, as shipped."""
    return resources.files("ganggate.local").joinpath(name).read_text(encoding="utf-8")


def gate_policies(map_version: str = KUBESIM_MAP_VERSION) -> list[dict[str, Any]]:
    """The gate-by-policy objects, policies before their bindings, the MutatingAdmissionPolicies
    in `map_version`."""
    import yaml

    objects = [doc for name in GATE_POLICIES for doc in yaml.safe_load_all(gate_policies_text(name)) if doc]
    for obj in objects:
        if obj["kind"].startswith("MutatingAdmissionPolicy"):
            obj["apiVersion"] = map_version
    return sorted(objects, key=lambda doc: doc["kind"].endswith("Binding"))


def gate_by_policy_webhook(configuration: dict[str, Any]) -> dict[str, Any]:
    """The MutatingWebhookConfiguration as the gate-by-policy component leaves it: the component's own
    JSON patch applied (the webhook is sent shared-GPU pods without gang annotations only)."""
    import jsonpatch
    import yaml

    kustomization = yaml.safe_load(gate_policies_text(GATE_KUSTOMIZATION))
    (patch,) = [p for p in kustomization["patches"] if p["target"]["kind"] == "MutatingWebhookConfiguration"]
    patched: dict[str, Any] = jsonpatch.apply_patch(configuration, yaml.safe_load(patch["patch"]))
    return patched


async def register_gate_policies(api: Any) -> None:
    """Create the gate by policy: the MutatingAdmissionPolicies that add the gate and the
    ValidatingAdmissionPolicy with the webhook's checks (with their bindings). kubesim must serve
    MutatingAdmissionPolicy (its feature gate on)."""
    from kubernetes_asyncio import client

    mutating = client.AdmissionregistrationV1beta1Api(api)
    validating = client.AdmissionregistrationV1Api(api)
    create: dict[str, Callable[..., Awaitable[Any]]] = {
        "MutatingAdmissionPolicy": mutating.create_mutating_admission_policy,
        "MutatingAdmissionPolicyBinding": mutating.create_mutating_admission_policy_binding,
        "ValidatingAdmissionPolicy": validating.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": validating.create_validating_admission_policy_binding,
    }
    for obj in gate_policies():
        await create[obj["kind"]](obj)
    log.info("gate by policy registered: %s", ", ".join(
        o["metadata"]["name"] for o in gate_policies() if not o["kind"].endswith("Binding")))


async def ensure_namespace(api: Any, name: str) -> None:
    """Create the namespace unless it exists."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]  # a dict body (see above)
    except ApiException as exc:
        if exc.status != 409:
            raise


def start_controller(api: Any, config: Any, name: str = "ganggate-controller",
                     clock: Any = None) -> tuple[Any, asyncio.Task]:
    """Start the gate controller as a task (on `clock`, a ganggate.kube.clock.Clock; default the
    wall clock); returns it and the task."""
    from ganggate.controller.round.loop import Controller

    controller = Controller(api, config) if clock is None else Controller(api, config, clock=clock)
    return controller, asyncio.create_task(controller.run(), name=name)


async def stop_task(task: asyncio.Task | None) -> None:
    """Cancel a task and wait for it to finish its clean-up."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
