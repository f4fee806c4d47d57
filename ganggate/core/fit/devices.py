"""DRA devices as the controller counts them: which devices a DeviceClass and a request's CEL
selectors pick, and the resource names under which they are counted. Pure.

A device is counted under its class's resource: the class's `extendedResourceName` (KEP-5004:
`nvidia.com/gpu` for NVIDIA's chart), `nvidia.com/gpu` for a class the controller is told holds
GPUs (`gpu.nvidia.com` by default), else `deviceclass.resource.k8s.io/<class>`. A request with
selectors of its own is also counted under `<class resource>[<selectors>]`, the devices of the
class that match them, so a gang asking a product no node has can never fit, and says which.

Selectors are CEL (k8s.io/dynamic-resource-allocation/cel), evaluated with cel-python: `device`
has `driver`, `attributes` and `capacity` (domain -> name -> value; an unqualified name is in the
driver's domain); capacities are integers of milli-units with the quantity library's
`quantity()`, `compareTo`, `isGreaterThan`, `isLessThan`; `semver()` compares version strings. A
selector that fails to evaluate for a device does not match it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import adapter, celtypes

from ganggate.core.fit.resources import GPU, QuantityError, parse_quantity

CLASS_PREFIX = "deviceclass.resource.k8s.io/"
DEFAULT_GPU_CLASSES = ("gpu.nvidia.com",)
_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


@dataclass(frozen=True)
class DeviceRequest:
    """One `exactly` request of a claim: its class, its own selectors, how many (0: All)."""

    class_name: str
    selectors: tuple[str, ...]
    count: int
    all: bool = False


class Device:
    """One published device: its id (driver, pool, name), its attribute and capacity values, and
    (made when first needed) its CEL variable."""

    __slots__ = ("id", "raw", "values", "_variable")

    def __init__(self, device_id: tuple[str, str, str], raw: Mapping[str, Any]) -> None:
        self.id = device_id
        self.raw = raw
        self.values = tuple(sorted((str(k), str(_value(v or {}))) for k, v in (raw.get("attributes") or {}).items())) + \
            tuple(sorted((str(k), str((v or {}).get("value"))) for k, v in (raw.get("capacity") or {}).items()))
        self._variable: Any = None

    @property
    def variable(self) -> Any:
        if self._variable is None:
            self._variable = device_variable(self.id[0], self.raw)
        return self._variable


def class_resource(class_name: str, device_class: Mapping[str, Any] | None,
                   gpu_classes: tuple[str, ...] = DEFAULT_GPU_CLASSES) -> str:
    """The resource name a class's devices are counted under."""
    extended = ((device_class or {}).get("spec") or {}).get("extendedResourceName")
    if extended:
        return str(extended)
    if class_name in gpu_classes:
        return GPU
    return CLASS_PREFIX + class_name


def selector_resource(class_key: str, selectors: tuple[str, ...]) -> str:
    """The resource name of a class's devices that also match a request's selectors."""
    return f"{class_key}[{' && '.join(selectors)}]" if selectors else class_key


def cel_expressions(selectors: Any) -> tuple[str, ...]:
    """The CEL expressions of a DeviceClass's or a device request's `selectors` (entries without
    `cel` are skipped)."""
    return tuple(str((s.get("cel") or {}).get("expression", "")) for s in selectors or ()
                 if isinstance(s, Mapping) and s.get("cel"))


def requests_of(claim_spec: Mapping[str, Any]) -> list[DeviceRequest]:
    """The requests of a claim spec (ResourceClaimSpec); firstAvailable counts its first choice."""
    out = []
    for request in ((claim_spec or {}).get("devices") or {}).get("requests") or []:
        exact = request.get("exactly") or next(iter(request.get("firstAvailable") or []), None) or {}
        selectors = cel_expressions(exact.get("selectors"))
        mode_all = exact.get("allocationMode") == "All"
        out.append(DeviceRequest(str(exact.get("deviceClassName", "")), selectors,
                                 0 if mode_all else int(exact.get("count") or 1), mode_all))
    return out


# ---- CEL ------------------------------------------------------------------------------------


def _ordered(value: Any) -> Any:
    if isinstance(value, (celtypes.StringType, str)):
        match = _SEMVER.match(str(value))
        if match:
            return tuple(int(g or 0) for g in match.groups())
    return value


def _compare(a: Any, b: Any) -> celtypes.IntType:
    x, y = _ordered(a), _ordered(b)
    return celtypes.IntType((x > y) - (x < y))


def _quantity(text: Any) -> celtypes.IntType:
    try:
        return celtypes.IntType(parse_quantity(str(text)))
    except QuantityError as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "semver": lambda text: celtypes.StringType(str(text)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "asInteger": lambda q: celtypes.IntType(int(q) // 1000),
}


@functools.lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.lru_cache(maxsize=4096)
def _program(expression: str) -> Any:
    env = _environment()
    try:
        return env.program(env.compile(expression), functions=_FUNCTIONS)
    except Exception:  # celpy's parse errors: a selector that never matches
        return None


def _value(attribute: Mapping[str, Any]) -> Any:
    for kind in ("string", "int", "bool", "version"):
        if attribute.get(kind) is not None:
            return attribute[kind]
    return None


def device_variable(driver: str, device: Mapping[str, Any]) -> Any:
    """The CEL `device` of one slice device."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in (device.get("attributes") or {}).items():
        domain, _, ident = str(name).rpartition("/")
        attributes.setdefault(domain or driver, {})[ident] = _value(attribute or {})
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, ident = str(name).rpartition("/")
        try:
            capacity.setdefault(domain or driver, {})[ident] = parse_quantity(str((value or {}).get("value", "0")))
        except QuantityError:
            continue
    return adapter.json_to_cel({"driver": driver, "attributes": attributes, "capacity": capacity,
                                "allowMultipleAllocations": bool(device.get("allowMultipleAllocations"))})


# An expression that may read attributes it does not name (iterating a map) is evaluated per device.
_ITERATES = re.compile(r"\b(exists|exists_one|all|map|filter)\s*\(|\bsize\s*\(|\bin\b")
_VERDICTS: dict[tuple[Any, ...], bool] = {}


def _signature(expression: str, device: Device) -> tuple[Any, ...] | None:
    """What of the device the expression can read: the values it names (None: it may read any)."""
    if _ITERATES.search(expression):
        return None
    named = tuple(item for item in device.values if item[0].rpartition("/")[2] in expression)
    return (expression, device.id[0], named)


def matches(expression: str, device: Device) -> bool:
    """Whether the selector is true for the device (an error or a non-bool is no match). Devices
    alike in every value the expression names share one evaluation."""
    signature = _signature(expression, device)
    if signature is not None:
        verdict = _VERDICTS.get(signature)
        if verdict is None:
            if len(_VERDICTS) > 100_000:
                _VERDICTS.clear()
            verdict = _VERDICTS[signature] = _evaluate(expression, device)
        return verdict
    return _evaluate(expression, device)


def _evaluate(expression: str, device: Device) -> bool:
    program = _program(expression)
    if program is None:
        return False
    try:
        result = program.evaluate({"device": device.variable})
    except Exception:  # CELEvalError and what the evaluator lets through
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)
