"""GPU sharing at admission: which pods ask a shared GPU resource, whether they ask it right,
and the annotations that make a pod without gang annotations a gang of one.

A pod asking `aliyun.com/gpu-mem` (docs/gpu-sharing.md) must be placed by ganggate, which picks
its card, so the webhook gates it even without gang annotations. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ganggate.contract import GROUP_NAME, GROUP_POD_NUM, SOLO_ANNOTATION

#: Whole GPUs: a container asking one of these and a shared resource too is refused.
WHOLE_GPU_RESOURCES = ("nvidia.com/gpu",)
# The gpushare device plugin's amounts are plain decimal integers in its unit (GiB, or MiB):
# podutils.go and the extender's GetGPUMemoryFromPodResource read Quantity.Value().
_WHOLE_NUMBER = re.compile(r"[1-9][0-9]{0,11}")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SOLO_PREFIX = "gpushare-"


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's containers and init containers; entries of the wrong JSON type are skipped (the
    API server's own validation refuses such a pod)."""
    out = []
    for key in ("initContainers", "containers"):
        found = spec.get(key)
        for container in found if isinstance(found, list) else []:
            if isinstance(container, Mapping):
                out.append(container)
    return out


def _asked(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's resource asks: limits, then requests where no limit is set."""
    resources = container.get("resources")
    asked: dict[str, Any] = {}
    for key in ("requests", "limits"):
        section = resources.get(key) if isinstance(resources, Mapping) else None
        if isinstance(section, Mapping):
            asked.update(section)
    return asked


def shares_gpu(spec: Mapping[str, Any] | None, shared: frozenset[str]) -> bool:
    """True when a container of the pod asks one of the shared resources."""
    return any(name in shared for container in _containers(spec or {}) for name in _asked(container))


def sharing_problem(spec: Mapping[str, Any] | None, shared: frozenset[str]) -> str | None:
    """Why the pod's shared-GPU asks are unacceptable (the denial message), or None."""
    for container in _containers(spec or {}):
        name = container.get("name") if isinstance(container.get("name"), str) else "?"
        asked = _asked(container)
        for resource in sorted(shared & asked.keys()):
            value = asked[resource]
            text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
            if text is None or not _WHOLE_NUMBER.fullmatch(text.strip()):
                return (
                    f"container {name!r}: {resource}={value!r} must be a positive whole number of the node's "
                    f"GPU memory unit (GiB, or MiB with the device plugin's --memory-unit=MiB), e.g. \"8\""
                )
            whole = sorted(r for r in WHOLE_GPU_RESOURCES if r in asked)
            if whole:
                return (
                    f"container {name!r} asks both {whole[0]} (whole GPUs) and {resource} (a share of one GPU): "
                    "a container gets one or the other; give the whole-GPU work and the shared-GPU work "
                    "separate containers or pods"
                )
    return None


def solo_gang_name(pod_name: str | None, request_uid: str) -> str:
    """The group-name of a gang of one: gpushare-<pod name> when that is a DNS-1123 label, else
    gpushare-<the admission request's uid> (a generateName pod has no name yet at admission)."""
    candidate = f"{SOLO_PREFIX}{pod_name or ''}"
    if pod_name and len(candidate) <= 63 and _DNS1123_LABEL.fullmatch(candidate):
        return candidate
    return f"{SOLO_PREFIX}{re.sub(r'[^a-z0-9]', '', request_uid.lower())[:40] or 'pod'}"


def solo_annotations(pod_name: str | None, request_uid: str) -> dict[str, str]:
    """The annotations that make a sharing pod a gang of one."""
    return {GROUP_NAME: solo_gang_name(pod_name, request_uid), GROUP_POD_NUM: "1", SOLO_ANNOTATION: "shared-gpu"}
