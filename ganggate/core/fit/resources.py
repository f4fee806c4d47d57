"""Resource arithmetic as Kubernetes does it: quantities, a pod's effective request, fitting.

Every amount is an integer count of milli-units (1 CPU = 1000, 1 GiB = 1024**3 * 1000,
1 GPU = 1000), so that sums and comparisons are exact. The amounts of pods and nodes are the
ones kube-scheduler counts (pkg/scheduler/framework/types.go Resource.Add): cpu in whole
milli-cores (Quantity.MilliValue), every other resource in whole units (Quantity.Value), so
memory, GPUs, pods and the rest are always multiples of 1000 here.

The effective request of a pod follows k8s.io/component-helpers/resource/helpers.go
PodRequests (KEP-753 sidecars): containers plus restartable init containers, at least the
largest init-container step, plus pod overhead; and a request that is missing defaults to its
limit, as the API server defaults it (pkg/apis/core/v1/defaults.go SetDefaults_Pod).
PodRequests adds and compares exact Quantities; only the total is rounded, by Resource.Add.
So the sums below are kept in exact nano-units (every parsed Quantity is a whole number of
nano-units: ParseQuantity rounds up at the nano) and rounded once, per pod and per node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

Resources = dict[str, int]
"""Resource name -> amount in milli-units (non-cpu amounts in whole units, times 1000)."""

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"

_NANO = 10**9  # nano-units per unit
_MILLI_NANOS = 10**6  # nano-units per milli-unit
_MAX_INT64 = (1 << 63) - 1

# k8s.io/apimachinery/pkg/api/resource/suffix.go newSuffixer: the decimal SI suffixes (base 10,
# "E" is exa, 10^18) and the binary ones (base 2, "Ei" is 2^60), as (base, exponent).
_SUFFIXES: dict[str, tuple[int, int]] = {
    "": (10, 0), "n": (10, -9), "u": (10, -6), "m": (10, -3), "k": (10, 3), "M": (10, 6),
    "G": (10, 9), "T": (10, 12), "P": (10, 15), "E": (10, 18),
    "Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30), "Ti": (2, 40), "Pi": (2, 50), "Ei": (2, 60),
}
# quantity.go parseQuantityString: an optional sign, digits, an optional "." and digits (either
# run may be empty: "." and "-." parse as 0), then a suffix made of the letters "eEinumkKMGTP",
# an optional sign and digits; anything else is ErrFormatWrong.
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_EXPONENT = re.compile(r"[+-]?[0-9]+")

LARGEST_NANOS = 10**40
"""The magnitude every quantity beyond 10^31 units is taken as (in nano-units).

The API server accepts such amounts ("1e99999999"), but kube-scheduler's int64 counters
cannot hold them. Saturating keeps the arithmetic cheap, keeps the order of amounts (it is
above every amount kept exactly), and means such a request never fits and such a node never
runs out."""
LARGEST_MILLI = LARGEST_NANOS // _MILLI_NANOS


class QuantityError(ValueError):
    """A string that is not a Kubernetes resource quantity."""


def _int(digits: str) -> int:
    """int() of a run of ASCII digits of any length (int() refuses more than 4300 digits)."""
    if len(digits) <= 4000:
        return int(digits or "0")
    out = 0
    for i in range(0, len(digits), 4000):
        chunk = digits[i:i + 4000]
        out = out * 10 ** len(chunk) + int(chunk)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _suffix(text: str) -> tuple[int, int] | None:
    """suffix.go suffixHandler.interpret: the tables first, then an exponent "e<int>"/"E<int>"."""
    found = _SUFFIXES.get(text)
    if found is not None:
        return found
    if len(text) > 1 and text[0] in "eE" and _EXPONENT.fullmatch(text[1:]):
        # strconv.ParseInt(s[1:], 10, 64), then int32(parsed): out of int64 is an error, and
        # int32() wraps what does not fit.
        parsed = int(text[1:])
        if not -(1 << 63) <= parsed <= _MAX_INT64:
            return None
        return 10, (parsed + (1 << 31)) % (1 << 32) - (1 << 31)
    return None


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> int:
    """A quantity string -> its amount in nano-units, exactly as ParseQuantity holds it."""
    match = _QUANTITY.fullmatch(text)
    if not match or not text:
        raise QuantityError(f"not a quantity: {text!r}")
    sign, whole, fraction, suffix_text = match.groups()
    fraction = fraction or ""
    found = _suffix(suffix_text)
    if found is None:  # ErrSuffix
        raise QuantityError(f"not a quantity: {text!r}")
    base, exponent = found
    digits = (whole + fraction).lstrip("0")
    if not whole and not fraction:
        # No digit at all ("+", ".", "-.", "k", "Mi"): parseQuantityString makes the numerator "0",
        # and ParseQuantity's int64 fast path returns 0, but only when it takes that path
        # (decimal: scale = exponent >= Nano; binary: precision 15 - 1 - exponent*3/10 - 1 >= 0).
        # Otherwise it hands the empty number to inf.Dec.SetString, which reads no digit:
        # ErrNumeric ("Pi", "Ei", "e-10").
        if (base == 10 and exponent >= -9) or (base == 2 and exponent * 3 // 10 <= 13):
            return 0
        raise QuantityError(f"not a quantity: {text!r}")
    if not digits:
        return 0
    # value = digits * 10^-len(fraction) * base^exponent; in nano-units, times 10^9.
    # ParseQuantity rounds the magnitude up to a whole nano (inf.RoundUp), then caps BinarySI
    # amounts at max int64 units ("The max is just a simple cap"); DecimalSI and
    # DecimalExponent amounts are not capped.
    if base == 10:
        shift = exponent - len(fraction) + 9
        if len(digits) + shift > 41:  # >= 10^40 nano-units
            nanos = LARGEST_NANOS
        elif shift >= 0:
            nanos = _int(digits) * 10**shift
        else:
            keep = len(digits) + shift  # digits at or above the nano
            if keep <= 0:
                nanos = 1  # a non-zero amount below a nano rounds up to one
            else:
                nanos = _int(digits[:keep]) + (1 if digits[keep:].strip("0") else 0)
        nanos = min(nanos, LARGEST_NANOS)
    else:
        shift = 9 - len(fraction)
        if len(digits) + shift > 41:  # > 10^31 units: far beyond the cap
            nanos = _MAX_INT64 * _NANO
        elif shift >= 0:
            nanos = min(_int(digits) * 10**shift << exponent, _MAX_INT64 * _NANO)
        else:
            nanos = min(_ceil_div(_int(digits) << exponent, 10**-shift), _MAX_INT64 * _NANO)
    return -nanos if sign == "-" else nanos


def parse_nanos(value: str | int | float) -> int:
    """Parse a Kubernetes quantity into exact nano-units (as resource.ParseQuantity holds it).

    Strings are trimmed (Quantity.UnmarshalJSON: strings.TrimSpace); a JSON number is parsed
    from its text, as UnmarshalJSON does.
    """
    if isinstance(value, str):
        return _parse_text(value.strip())
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return _parse_text(str(value))
    if isinstance(value, float):
        return _parse_text(repr(value))  # "inf" and "nan" are refused
    raise QuantityError(f"not a quantity: {value!r}")


def milli_value(nanos: int) -> int:
    """Quantity.MilliValue of an exact amount: milli-units, rounded up."""
    return _ceil_div(nanos, _MILLI_NANOS)


def unit_value(nanos: int) -> int:
    """Quantity.Value of an exact amount: whole units, rounded up."""
    return _ceil_div(nanos, _NANO)


def parse_quantity(value: str | int | float) -> int:
    """Parse a Kubernetes quantity into milli-units, rounding up as MilliValue does."""
    return milli_value(parse_nanos(value))


def scheduler_amount(resource: str, nanos: int) -> int:
    """An exact amount as kube-scheduler counts it, in milli-units.

    pkg/scheduler/framework/types.go Resource.Add: MilliCPU += MilliValue() for cpu; Memory,
    EphemeralStorage, AllowedPodNumber and the scalar resources += Value(), whole units rounded
    up ("memory: 100m" is 1 byte, not 0.1). Negative amounts, which validation refuses before a
    scheduler sees them, are rounded up too.
    """
    if resource == CPU:
        return _ceil_div(nanos, _MILLI_NANOS)
    return _ceil_div(nanos, _NANO) * 1000


def _nanos_list(raw: Mapping[str, str | int | float] | None) -> dict[str, int]:
    return {name: parse_nanos(q) for name, q in (raw or {}).items()}


def _counted(nanos: Mapping[str, int]) -> Resources:
    return {name: scheduler_amount(name, amount) for name, amount in nanos.items()}


def parse_resource_list(raw: Mapping[str, str | int | float] | None) -> Resources:
    """Parse one ResourceList (requests, limits, allocatable) into the amounts the scheduler counts."""
    return _counted(_nanos_list(raw))


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


def copies_fitting(request: Mapping[str, int], free: Mapping[str, int], at_most: int = LARGEST_MILLI) -> int:
    """How many copies of the request fit in free, all at once (at most `at_most`; 0 or less:
    none fits). fits(request, free) is copies_fitting(request, free) > 0."""
    copies = at_most
    for name, amount in request.items():
        if amount > 0 and (fit := free.get(name, 0) // amount) < copies:
            copies = fit
    return copies


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


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """One container's requests in exact nano-units."""
    resources = container.get("resources") or {}
    requests = _nanos_list(resources.get("requests"))
    # A missing request defaults to the limit (SetDefaults_Pod), so GPU limits count.
    for name, amount in _nanos_list(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """A pod's effective request, with `pods: 1` for the node's pod-count limit.

    Mirrors PodRequests in k8s.io/component-helpers/resource/helpers.go: sum of the
    containers, plus restartable (sidecar) init containers, at least the largest
    init-container step (which runs alongside the sidecars started before it); pod-level
    requests instead where set; plus spec.overhead. PodRequests adds (addResourceList,
    Quantity.Add) and compares (maxResourceList, Quantity.Cmp) exact Quantities, so the sums
    here are in exact nano-units; the scheduler rounds the pod's total once, per resource
    (framework/types.go Resource.Add): three containers of 0.5m cpu are 2m, not 3m.
    """
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        add_into(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
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
    pod_level = _nanos_list((spec.get("resources") or {}).get("requests"))
    for name, amount in pod_level.items():
        if name in (CPU, MEMORY) or name.startswith("hugepages-"):
            total[name] = amount
    add_into(total, _nanos_list(spec.get("overhead")))
    total[PODS] = total.get(PODS, 0) + _NANO
    counted = _counted(total)
    return {name: amount for name, amount in counted.items() if amount}


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    """A node's allocatable resources, as the scheduler counts them.

    pkg/scheduler/framework/types.go NodeInfo.SetNode: Allocatable = NewResource(
    node.Status.Allocatable), rounded as Resource.Add rounds. Capacity stands in only where
    allocatable is unset: pkg/apis/core/v1/defaults.go SetDefaults_NodeStatus copies capacity
    when `obj.Allocatable == nil`. An empty allocatable ({}) decodes to an empty, non-nil map
    and stays empty: such a node has nothing to give.
    """
    status = node.get("status") or {}
    allocatable = status.get("allocatable")
    if allocatable is None:
        allocatable = status.get("capacity")
    return parse_resource_list(allocatable)


def total(requests: Iterable[Mapping[str, int]]) -> Resources:
    """The per-resource sum of many requests."""
    out: Resources = {}
    for request in requests:
        add_into(out, request)
    return out
