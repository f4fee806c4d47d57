"""Resource arithmetic as Kubernetes does it: quantities, a pod's effective request, fitting.

Every amount is an integer count of milli-units (1 CPU = 1000, 1 GiB = 1024**3 * 1000,
1 GPU = 1000), so that sums and comparisons are exact. The effective request of a pod
follows k8s.io/component-helpers/resource/helpers.go PodRequests (KEP-753 sidecars):
containers plus restartable init containers, at least the largest init-container step,
plus pod overhead; and a request that is missing defaults to its limit, as the API server
defaults it (pkg/apis/core/v1/defaults.go SetDefaults_Pod).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, Overflow
from typing import Iterable, Mapping

Resources = dict[str, int]
"""Resource name -> amount in milli-units."""

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
# k8s.io/apimachinery/pkg/api/resource/quantity.go: <signedNumber><suffix>, suffix binary,
# decimal SI or a decimal exponent (e/E).
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


_MAX_MILLI = ((1 << 63) - 1) * 1000


class QuantityError(ValueError):
    """A string that is not a Kubernetes resource quantity."""


def parse_quantity(value: str | int | float) -> int:
    """Parse a Kubernetes quantity into milli-units, rounding up as MilliValue does."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return math.ceil(Decimal(repr(value)) * 1000)
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if not match:
        raise QuantityError(f"not a quantity: {value!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number)
        if suffix[:1] in ("e", "E"):
            multiplier = Decimal(10) ** int(suffix[1:])
        else:
            multiplier = _SUFFIXES[suffix]
        return math.ceil(amount * multiplier * 1000)
    except Overflow:
        # An exponent beyond Decimal's range ("1e99999999"), which ParseQuantity accepts: take
        # the largest amount a Quantity holds (apimachinery pkg/api/resource/math.go maxAllowed,
        # max int64), so such a request never fits and such a node never runs out.
        return _MAX_MILLI if amount >= 0 else -_MAX_MILLI
    except (InvalidOperation, KeyError, ValueError) as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc


def parse_resource_list(raw: Mapping[str, str | int | float] | None) -> Resources:
    """Parse a ResourceList (requests, limits, allocatable) into milli-units."""
    return {name: parse_quantity(q) for name, q in (raw or {}).items()}


def format_amount(resource: str, milli: int) -> str:
    """Render an amount for people: cores and GPUs as numbers, memory in Gi/Mi."""
    if resource == MEMORY or resource.endswith("memory") or resource.endswith("-mem"):
        value = milli / 1000
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                return f"{value / size:g}{unit}"
        return f"{value:g}"
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m" if resource == CPU else f"{milli / 1000:g}"


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """a + b, per resource."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """a - b, per resource (results may be negative: an over-committed node)."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) - amount
    return out


def add_into(target: Resources, b: Mapping[str, int], sign: int = 1) -> None:
    """target += sign * b, in place (the incremental bookkeeping of a node)."""
    for name, amount in b.items():
        target[name] = target.get(name, 0) + sign * amount


def maximum(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """The per-resource maximum of a and b."""
    out = dict(a)
    for name, amount in b.items():
        if amount > out.get(name, 0):
            out[name] = amount
    return out


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every requested amount (> 0) is at most what is free."""
    for name, amount in request.items():
        if amount > 0 and amount > free.get(name, 0):
            return False
    return True


def insufficient(request: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """Names of the resources whose request exceeds what is free, sorted."""
    return sorted(n for n, a in request.items() if a > 0 and a > free.get(n, 0))


def gpus(resources: Mapping[str, int]) -> int:
    """GPU amount (milli) of a request or a free-capacity map: every resource named */gpu."""
    out = 0
    for name, amount in resources.items():
        if name == GPU or name.endswith("/gpu"):
            out += amount
    return out


def _container_requests(container: Mapping) -> Resources:
    resources = container.get("resources") or {}
    limits = parse_resource_list(resources.get("limits"))
    requests = parse_resource_list(resources.get("requests"))
    # A missing request defaults to the limit (SetDefaults_Pod), so GPU limits count.
    for name, amount in limits.items():
        requests.setdefault(name, amount)
    return requests


def pod_requests(pod: Mapping) -> Resources:
    """A pod's effective request, with `pods: 1` for the node's pod-count limit.

    Mirrors PodRequests in k8s.io/component-helpers/resource/helpers.go: sum of the
    containers, plus restartable (sidecar) init containers, at least the largest
    init-container step (which runs alongside the sidecars started before it); pod-level
    requests instead where set; plus spec.overhead.
    """
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        add_into(total, _container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        step = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            add_into(total, step)
            add_into(sidecars, step)
            step = dict(sidecars)
        else:
            step = add(step, sidecars)
        init_peak = maximum(init_peak, step)
    total = maximum(total, init_peak)
    # Pod-level requests (KEP-2837, PodLevelResources) replace the containers' sum for the
    # resources they cover: cpu, memory, hugepages-* (helpers.go IsSupportedPodLevelResource).
    pod_level = parse_resource_list(((spec.get("resources") or {}).get("requests")))
    for name, amount in pod_level.items():
        if name in (CPU, MEMORY) or name.startswith("hugepages-"):
            total[name] = amount
    add_into(total, parse_resource_list(spec.get("overhead")))
    total[PODS] = total.get(PODS, 0) + 1000
    return {name: amount for name, amount in total.items() if amount}


def node_allocatable(node: Mapping) -> Resources:
    """A node's allocatable resources (status.allocatable, else status.capacity)."""
    status = node.get("status") or {}
    return parse_resource_list(status.get("allocatable") or status.get("capacity"))


def total(requests: Iterable[Mapping[str, int]]) -> Resources:
    """The per-resource sum of many requests."""
    out: Resources = {}
    for request in requests:
        add_into(out, request)
    return out
