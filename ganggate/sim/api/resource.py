"""resource.k8s.io/v1 (Dynamic Resource Allocation) names and the small readings of its objects
that kubesim's API server, resourceclaim controller, scheduler and kubelet share
(staging/src/k8s.io/api/resource/v1/types.go at v1.35; pkg/apis/resource/v1/defaults.go).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
DEVICE_CLASSES = "deviceclasses.resource.k8s.io"
RESOURCE_SLICES = "resourceslices.resource.k8s.io"
RESOURCE_CLAIMS = "resourceclaims.resource.k8s.io"
RESOURCE_CLAIM_TEMPLATES = "resourceclaimtemplates.resource.k8s.io"

EXACT_COUNT = "ExactCount"  # types.go DeviceAllocationMode
ALL = "All"
ALLOCATION_MODES = (ALL, EXACT_COUNT)
# types.go: ResourceClaimReservedForMaxSize, DeviceRequestsMaxSize, DeviceSelectorsMaxSize,
# ResourceSliceMaxDevices, AllocationResultsMaxSize, AllocationResultsMaxSize
RESERVED_FOR_MAX = 256
REQUESTS_MAX = 32
SELECTORS_MAX = 32
SLICE_DEVICES_MAX = 128
ALLOCATION_RESULTS_MAX = 32
# pkg/controller/resourceclaim: the annotation a claim made from a template carries
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: resourceapi.Finalizer (staging/src/k8s.io/api/resource/v1/types.go): the scheduler adds it before
#: it writes an allocation; the resourceclaim controller deallocates only claims that carry it.
FINALIZER = "resource.kubernetes.io/delete-protection"


def exact(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """A request's `exactly` (the only form kubesim allocates; firstAvailable is validated, not tried)."""
    return request.get("exactly") or {}


def request_count(request: Mapping[str, Any]) -> int:
    """How many devices an ExactCount request asks (count defaults to 1: defaults.go)."""
    return int(exact(request).get("count") or 1)


def pod_claims(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's spec.resourceClaims entries."""
    return list((pod.get("spec") or {}).get("resourceClaims") or [])


def claim_name_of(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """The ResourceClaim a pod's claim entry names (k8s.io/dynamic-resource-allocation/resourceclaim
    Name): resourceClaimName, or for a template the name in status.resourceClaimStatuses
    (None: not created yet)."""
    if entry.get("resourceClaimName"):
        return str(entry["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == entry.get("name"):
            return status.get("resourceClaimName")
    return None


def reserved_for_pod(pod: Mapping[str, Any]) -> dict[str, str]:
    """The ResourceClaimConsumerReference of a pod (types.go: resource "pods", apiGroup "")."""
    meta = pod.get("metadata") or {}
    return {"resource": "pods", "name": meta.get("name", ""), "uid": meta.get("uid", "")}


def is_reserved_for(claim: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (claim.get("status") or {}).get("reservedFor") or [])


def allocation_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocated claim is bound to (the nodeSelector's metadata.name / hostname field), if any."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for req in list(term.get("matchFields") or []) + list(term.get("matchExpressions") or []):
            if req.get("key") in ("metadata.name", "kubernetes.io/hostname") and req.get("operator") == "In":
                values = req.get("values") or []
                if values:
                    return str(values[0])
    return None


def allocated_devices(claim: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(driver, pool, device) of each device an allocated claim holds."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for result in (allocation.get("devices") or {}).get("results") or []:
        yield (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))


def node_selector_for(node: str) -> dict[str, Any]:
    """The allocation's nodeSelector for a node-local device (structured allocator: matchFields metadata.name)."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
