"""The kubelet's DRA manager, as far as starting a pod goes (pkg/kubelet/cm/dra/manager.go
PrepareResources at v1.35): before its containers start, each ResourceClaim the pod uses (its
spec.resourceClaims, by name or through status.resourceClaimStatuses, and the DRAExtendedResource
claim in status.extendedResourceClaimStatus) is read from the API server and must be allocated and
reserved for the pod ("pod ... not reserved in claim"); until then the pod stays Pending and the
kubelet tries again, as its pod workers do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from ganggate.sim.api import resource as api


def claim_names(pod: Mapping[str, Any]) -> list[str] | None:
    """The names of the claims the pod uses; None while a template's claim is not recorded yet."""
    names = []
    for entry in api.pod_claims(pod):
        name = api.claim_name_of(pod, entry)
        if name is None:
            return None
        names.append(name)
    extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.append(extended)
    return names


async def prepared(session: aiohttp.ClientSession, base_url: str, pod: Mapping[str, Any]) -> bool:
    """Whether every claim of the pod is allocated and reserved for it."""
    names = claim_names(pod)
    if names is None:
        return False
    namespace = pod["metadata"].get("namespace", "default")
    uid = pod["metadata"].get("uid", "")
    for name in names:
        async with session.get(f"{base_url}/apis/{api.API_VERSION}/namespaces/{namespace}/resourceclaims/{name}") as response:
            if response.status != 200:
                return False
            claim = await response.json()
        if not (claim.get("status") or {}).get("allocation") or not api.is_reserved_for(claim, uid):
            return False
    return True


async def wait_prepared(session: aiohttp.ClientSession, base_url: str,
                        latest: Callable[[], Mapping[str, Any] | None], sleep: Callable[[float], Awaitable[Any]]) -> bool:
    """Retry until the pod's claims are prepared (True) or the pod is gone or no longer Pending (False)."""
    delay = 0.1
    while True:
        pod = latest()
        if pod is None or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return False
        if not claim_names(pod) and not api.pod_claims(pod):
            return True
        try:
            if await prepared(session, base_url, pod):
                return True
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass
        await sleep(delay)
        delay = min(delay * 2, 2.0)
