"""The whole system in one process on loopback: kubesim, and for a gated mode the webhook
(over HTTPS with certificates made on the spot, registered by a MutatingWebhookConfiguration
with a URL clientConfig and caBundle, as in deploy/) and the gate controller.

Modes: `none` (the default scheduler alone), `count` (webhook + controller with the seed's
count-only check) and `ganggate` (webhook + controller with the planner).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


MODES = ("none", "count", "ganggate")
POLICY = {"count": "count", "ganggate": "plan"}
WEBHOOK_CONFIGURATION = "ganggate"


DEPLOY_URL_FORM = Path(__file__).resolve().parents[2] / "deploy" / "kubesim" / "webhook-url.yaml"

# deploy/kubesim/webhook-url.yaml in short, for an installed copy without the deploy/ tree.
_GANG_ANNOTATIONS_CEL = " || ".join(
    f"'{a}' in {{o}}.metadata.annotations"
    for a in ("scheduling.k8s.io/group-name", "scheduling.k8s.io/group-pod-num",
              "scheduling.k8s.io/group-min-available")
)
_FALLBACK = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"app.kubernetes.io/name": "ganggate-webhook"}},
    "webhooks": [{
        "name": "gang-gate.ganggate.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "reinvocationPolicy": "IfNeeded",
        "matchPolicy": "Equivalent",
        "clientConfig": {"url": "https://127.0.0.1:8443/mutate"},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                    "values": ["kube-system", "ganggate-system"]}]},
        "matchConditions": [{
            "name": "carries-gang-annotation",
            "expression": (
                "(has(object.metadata.annotations) && (" + _GANG_ANNOTATIONS_CEL.format(o="object") + ")) || "
                "(request.operation == 'UPDATE' && (has(oldObject.metadata.annotations) && ("
                + _GANG_ANNOTATIONS_CEL.format(o="oldObject") + ")))"
            ),
        }],
    }],
}


def webhook_configuration(url: str, ca_pem: bytes, *, match_conditions: bool = True) -> dict[str, Any]:
    """deploy/'s MutatingWebhookConfiguration in the URL form, pointed at `url` with the CA
    (without its matchConditions when `match_conditions` is False)."""
    if DEPLOY_URL_FORM.exists():
        import yaml

        configuration = yaml.safe_load(DEPLOY_URL_FORM.read_text(encoding="utf-8"))
    else:
        configuration = copy.deepcopy(_FALLBACK)
    for webhook in configuration["webhooks"]:
        webhook["clientConfig"] = {
            "url": url.rstrip("/") + "/mutate",
            "caBundle": base64.b64encode(ca_pem).decode(),
        }
        if not match_conditions:
            webhook.pop("matchConditions", None)
    return configuration


@dataclass
class Stack:
    """A running simulator plus, for a gated mode, webhook and controller. Use `start_stack`."""

    mode: str
    sim: Any
    api: Any = None
    webhook: Any = None
    controller: Any = None
    controller_task: asyncio.Task | None = None
    workdir: tempfile.TemporaryDirectory | None = None

    async def close(self) -> None:
        if self.controller_task is not None:
            self.controller_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.controller_task
        if self.webhook is not None:
            await self.webhook.close()
        if self.api is not None:
            await self.api.close()
        if self.workdir is not None:
            self.workdir.cleanup()

    def controller_failed(self) -> BaseException | None:
        """The controller's exception if it stopped by itself (a replay must not go on)."""
        task = self.controller_task
        if task is not None and task.done() and not task.cancelled():
            return task.exception() or RuntimeError("the gate controller stopped")
        return None


async def start_gate(stack: Stack, *, debounce: float | None = None, match_conditions: bool = True) -> None:
    """Start the webhook (HTTPS, port 0), register it, and start the controller."""
    from ganggate.certs import files as certfiles
    from ganggate.controller.loop import Controller, ControllerConfig
    from ganggate.admission.server import WebhookConfig, start_webhook

    stack.workdir = tempfile.TemporaryDirectory(prefix="ganggate-demo-")
    out = Path(stack.workdir.name)
    certfiles.generate(out, "ganggate-webhook", "ganggate-system", ips=("127.0.0.1",))
    stack.webhook = await start_webhook(
        WebhookConfig(
            cert_file=str(out / certfiles.TLS_CERT),
            key_file=str(out / certfiles.TLS_KEY),
            host="127.0.0.1",
            port=0,
            cert_reload_seconds=0,
        )
    )
    ca_pem = (out / certfiles.CA_CERT).read_bytes()
    await register_webhook(stack.api, webhook_configuration(stack.webhook.url, ca_pem,
                                                            match_conditions=match_conditions))
    config = ControllerConfig(policy=POLICY[stack.mode], leader_election=False, metrics_port=None,
                              **({} if debounce is None else {"debounce_seconds": debounce}))

    stack.controller = Controller(stack.api, config)
    stack.controller_task = asyncio.create_task(stack.controller.run(), name=f"ganggate-controller-{stack.mode}")


async def register_webhook(api: Any, configuration: dict[str, Any]) -> None:
    """Create the MutatingWebhookConfiguration through the API server."""
    from kubernetes_asyncio import client

    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(configuration)
