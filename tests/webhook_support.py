"""Shared helpers for the webhook tests: AdmissionReviews, pods, patches, a webhook in a thread."""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import jsonpatch

from ganggate.contract import GATE_NAME, GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM

_counter = itertools.count()


def gang_pod(
    name: str | None = None,
    group: str | None = "train",
    pod_num: str | None = "4",
    min_available: str | None = None,
    *,
    scheduler: str | None = None,
    gates: list[dict] | None = None,
    node_name: str | None = None,
    extra_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the API server sends it to a webhook, with the given gang annotations."""
    annotations: dict[str, str] = dict(extra_annotations or {})
    if group is not None:
        annotations[GROUP_NAME] = group
    if pod_num is not None:
        annotations[GROUP_POD_NUM] = pod_num
    if min_available is not None:
        annotations[GROUP_MIN_AVAILABLE] = min_available
    spec: dict[str, Any] = {
        "containers": [{"name": "trainer", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if gates is not None:
        spec["schedulingGates"] = gates
    if node_name is not None:
        spec["nodeName"] = node_name
    metadata: dict[str, Any] = {"name": name or f"pod-{next(_counter)}", "namespace": "ml"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(
    obj: Any,
    operation: str = "CREATE",
    old: Any = None,
    *,
    kind: str = "Pod",
    dry_run: bool = False,
    uid: str | None = None,
    sub_resource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview admission.k8s.io/v1 request as kube-apiserver sends it."""
    resource = {"Pod": "pods"}.get(kind, kind.lower() + "s")
    group = "" if kind in ("Pod", "ConfigMap", "Service") else "apps"
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "requestKind": {"group": group, "version": "v1", "kind": kind},
        "requestResource": {"group": group, "version": "v1", "resource": resource},
        "namespace": "ml",
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) and obj["metadata"].get("name"):
        request["name"] = obj["metadata"]["name"]
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The JSONPatch of an AdmissionReview response, or None when there is none."""
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply_response(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would store it after this response's patch."""
    ops = decode_patch(response)
    return jsonpatch.apply_patch(copy.deepcopy(obj), ops) if ops else copy.deepcopy(obj)


def gate_count(pod: dict[str, Any]) -> int:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return sum(1 for g in gates if isinstance(g, dict) and g.get("name") == GATE_NAME)


def make_certs(out: Path, *, ips: tuple[str, ...] = ("127.0.0.1",)) -> Path:
    """Generate a CA and serving certificate for ganggate-webhook.ganggate-system into `out`."""
    from ganggate.certs.files import generate

    generate(out, "ganggate-webhook", "ganggate-system", ips=ips)
    return out


class WebhookThread:
    """The real HTTPS webhook served by its own event loop in a background thread.

    For synchronous tests (hypothesis) that talk to it with a blocking client.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.running: Any = None

    def __enter__(self) -> WebhookThread:
        from ganggate.admission.server import start_webhook

        self.thread.start()
        future = asyncio.run_coroutine_threadsafe(start_webhook(self.config), self.loop)
        self.running = future.result(timeout=30)
        return self

    @property
    def port(self) -> int:
        return self.running.port

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.running.close(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()
