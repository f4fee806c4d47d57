"""`ganggate status`: what ganggate asked of the cluster autoscaler and what it answered, from the
ProvisioningRequests ganggate made (labelled app.kubernetes.io/managed-by=ganggate)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ganggate.core.policy.provisioning import condition, request_outcome

SELECTOR = "app.kubernetes.io/managed-by=ganggate"


def _answer(request: Mapping[str, Any]) -> str:
    for kind in ("Failed", "BookingExpired", "Provisioned", "Accepted"):
        found = condition(request, kind)
        if found:
            return f"{kind}={found.get('status')} ({found.get('reason')})"
    return "not yet seen by the autoscaler"


def format_requests(requests: Iterable[Mapping[str, Any]], namespace: str | None = None) -> str:
    """A table of the requests, or "" when there are none (pure)."""
    rows = []
    for request in requests:
        meta = request.get("metadata") or {}
        if namespace and meta.get("namespace") != namespace:
            continue
        pods = sum(int(s.get("count") or 0) for s in (request.get("spec") or {}).get("podSets") or [])
        gang = f"{meta.get('namespace')}/{(meta.get('labels') or {}).get('ganggate.io/gang', '?')}"
        rows.append([gang, str(meta.get("name")), str((request.get("spec") or {}).get("provisioningClassName")),
                     str(pods), request_outcome(request), _answer(request)])
    if not rows:
        return ""
    headers = ["GANG", "PROVISIONINGREQUEST", "CLASS", "PODS", "STATE", "AUTOSCALER SAYS"]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines) + "\n"


async def list_requests(api_client: Any) -> list[dict]:
    """ganggate's ProvisioningRequests, or none where the API is not served (no autoscaler's CRD)."""
    from kubernetes_asyncio import client

    from ganggate.kube.calls import ApiCallError, call_json

    try:
        body = await call_json(client.CustomObjectsApi(api_client).list_cluster_custom_object,
                               "autoscaling.x-k8s.io", "v1", "provisioningrequests", label_selector=SELECTOR,
                               verb="list")
    except ApiCallError:
        return []
    return list(body.get("items") or [])
