"""CEL device selectors as k8s.io/dynamic-resource-allocation/cel evaluates them (v1.35), with cel-python.

The variable `device` has `driver`, `attributes` and `capacity` (maps of domain -> name -> value:
an unqualified name belongs to the driver's domain, `dom.ain/name` to `dom.ain`) and
`allowMultipleAllocations`. Attribute values are the string, int, bool or version (as a string);
capacities are quantities, held as integers of milli-units so that comparisons and the quantity
library's `quantity()`, `compareTo`, `isGreaterThan`, `isLessThan`, `asInteger` and
`asApproximateFloat` work; `semver()` and its comparisons work on version strings. A selector that
does not evaluate to a bool, or fails (a missing attribute), is an error, as in the real allocator.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import celpy
from celpy import celtypes

from ganggate.sim.apimachinery.quantity import QuantityError, parse_milli

MILLI = 1000  # CEL ints are 64-bit: quantities in milli-units (8 PiB at most)
_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


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
        return celtypes.IntType(parse_milli(str(text)))
    except QuantityError as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "semver": lambda text: celtypes.StringType(str(text)),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "asInteger": lambda q: celtypes.IntType(int(q) // MILLI),
    "asApproximateFloat": lambda q: celtypes.DoubleType(int(q) / MILLI),
}


@functools.lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Any:
    """The compiled program, or the compilation error as a string."""
    env = _environment()
    try:
        return env.program(env.compile(expression), functions=FUNCTIONS)
    except Exception as exc:  # celpy's parse errors
        return f"compilation error: {exc}"


def _attribute_value(attribute: Mapping[str, Any]) -> Any:
    for kind in ("string", "int", "bool", "version"):
        if attribute.get(kind) is not None:
            return attribute[kind]
    return None


def device_variable(driver: str, device: Mapping[str, Any]) -> Any:
    """The CEL `device` of one slice device, as celtypes."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in (device.get("attributes") or {}).items():
        domain, _, ident = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[ident] = _attribute_value(attribute or {})
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, ident = name.rpartition("/")
        try:
            capacity.setdefault(domain or driver, {})[ident] = parse_milli(str((value or {}).get("value", "0")))
        except QuantityError:
            continue
    return celpy.json_to_cel({"driver": driver, "attributes": attributes, "capacity": capacity,
                              "allowMultipleAllocations": bool(device.get("allowMultipleAllocations"))})


def matches(expression: str, device: Any) -> bool | str:
    """Whether the selector matches the device (a device_variable), or the error as a string."""
    program = compile_selector(expression)
    if isinstance(program, str):
        return program
    try:
        result = program.evaluate({"device": device})
    except Exception as exc:  # CELEvalError and what the evaluator lets through
        return f"CEL runtime error: {exc.args[0] if exc.args else exc}"
    if isinstance(result, celpy.CELEvalError):
        return f"CEL runtime error: {result.args[0] if result.args else result}"
    if not isinstance(result, celtypes.BoolType):
        return f"CEL result of type {type(result).__name__} is not a bool"
    return bool(result)
