"""CEL for admission: webhook matchConditions, and expressions of ValidatingAdmissionPolicies.

Each expression is compiled once per text (kubesim/apiserver/admission/cel_fast.py: closures over the request's plain
JSON values; cel-python for the rest) and never per request.

Semantics follow k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions/matcher.go:
any condition that is false skips the webhook (even when others failed to evaluate); otherwise
evaluation errors are reported, and the caller applies the webhook's failurePolicy. Error texts
follow k8s.io/apiserver/pkg/admission/plugin/cel/filter.go ("expression '<e>' resulted in
error: ...", "compilation error: ...").

Variables: `object`, `oldObject` (null on CREATE), `request` (the AdmissionRequest as a map)
and `namespaceObject`, which is null for webhook conditions as in the real matcher (it passes no
namespace to the filter). `authorizer` is not provided: kubesim has no authorizer, so an
expression using it fails to evaluate and the failurePolicy decides.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from ganggate.sim.apiserver.admission import cel_fast

_ENV = cel_fast.ENVIRONMENT  # one parser: building celpy's LALR tables costs a second or more


@dataclass(frozen=True)
class Compiled:
    """A compiled expression, or the compilation error."""

    program: Any | None
    error: str | None
    fast: Any | None = None


@dataclass(frozen=True)
class ConditionsResult:
    """matches: call the webhook; error: evaluation failed (failurePolicy decides); failed: which condition was false."""

    matches: bool
    error: str | None = None
    failed_condition: str | None = None


def _short(exc: BaseException) -> str:
    """cel-python's messages can embed the whole activation; keep the useful head."""
    text = str(exc.args[0]) if exc.args else str(exc)
    return text.split(" (in activation", 1)[0]


_NUMBERS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _category(value: Any) -> type | None:
    """The CEL type a value is compared as (BoolType subclasses int in cel-python: check it first)."""
    if value is None:
        return None
    if isinstance(value, celtypes.BoolType):
        return celtypes.BoolType
    if isinstance(value, _NUMBERS):
        return celtypes.DoubleType
    return type(value)


def heterogeneous_eq(a: Any, b: Any) -> Any:
    """CEL equality across types, as cel-go (and so kube-apiserver) evaluates it.

    cel-python has only same-type equality: `oldObject != null` on an object, or `1 == 1.0`,
    is a "no matching overload" error there, whereas the CEL spec (heterogeneous equality,
    cel-go since v0.10) makes values of different types unequal and compares numbers by value.
    `==`, `!=` and `in` are overridden with these functions in every compiled program.
    """
    for operand in (a, b):
        if isinstance(operand, celpy.CELEvalError):
            return operand
    if _category(a) is not _category(b):
        return celtypes.BoolType(False)
    if a is None:
        return celtypes.BoolType(True)
    if isinstance(a, _NUMBERS):
        return celtypes.BoolType(_plain_number(a) == _plain_number(b))
    if isinstance(a, celtypes.ListType):
        return celtypes.BoolType(len(a) == len(b) and all(_is_true(heterogeneous_eq(x, y)) for x, y in zip(a, b, strict=True)))
    if isinstance(a, celtypes.MapType):
        if len(a) != len(b) or set(a.keys()) != set(b.keys()):
            return celtypes.BoolType(False)
        return celtypes.BoolType(all(_is_true(heterogeneous_eq(a[k], b[k])) for k in a.keys()))
    try:
        return celtypes.BoolType(bool(a == b))
    except TypeError:
        return celtypes.BoolType(False)


def _plain_number(value: Any) -> int | float:
    return float(value) if isinstance(value, celtypes.DoubleType) else int(value)


def _is_true(value: Any) -> bool:
    return isinstance(value, celtypes.BoolType) and bool(value)


def heterogeneous_ne(a: Any, b: Any) -> Any:
    equal = heterogeneous_eq(a, b)
    return equal if isinstance(equal, celpy.CELEvalError) else celtypes.BoolType(not equal)


def heterogeneous_in(item: Any, container: Any) -> Any:
    """`in` with heterogeneous equality: `1 in ['a']` is false and `1 in [1.0]` true, as in cel-go."""
    for operand in (item, container):
        if isinstance(operand, celpy.CELEvalError):
            return operand
    if isinstance(container, celtypes.MapType) and isinstance(item, celtypes.StringType):
        return celtypes.BoolType(item in container)  # the common case: a key lookup
    if isinstance(container, (celtypes.ListType, celtypes.MapType)):
        return celtypes.BoolType(any(_is_true(heterogeneous_eq(item, member)) for member in container))
    detail = f"no such overload: {type(item).__name__} in {type(container).__name__}"
    return celpy.CELEvalError("no such overload", TypeError, (detail,))


_FUNCTIONS = {"_==_": heterogeneous_eq, "_!=_": heterogeneous_ne, "_in_": heterogeneous_in}


@functools.lru_cache(maxsize=1024)
def compile_expression(expression: str) -> Compiled:
    """Compile a CEL expression once; the cache is keyed by its text.

    apiserver/admission/cel_fast.py compiles it into closures over plain JSON values (fast, no conversion per
    request); CEL it does not implement is compiled by cel-python instead (slow, but complete).
    """
    try:
        return Compiled(None, None, cel_fast.compile_cel(expression))
    except cel_fast.Unsupported:
        pass
    except Exception as exc:  # celpy raises CELParseError and friends
        return Compiled(None, f"compilation error: {_short(exc)}")
    try:
        return Compiled(_ENV.program(_ENV.compile(expression), functions=_FUNCTIONS), None)
    except Exception as exc:  # celpy raises CELParseError and friends
        return Compiled(None, f"compilation error: {_short(exc)}")


def build_activation(
    obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None, request: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The CEL variables for one evaluation, as plain JSON values (never copied or converted)."""
    return {"object": obj, "oldObject": old_obj, "request": request, "namespaceObject": None}


class EvaluationError(Exception):
    """An expression failed to compile or to evaluate; the message is kube-apiserver's wording."""


def _celpy_activation(activation: Mapping[str, Any]) -> dict[str, Any]:
    """The activation converted to celtypes, for expressions only cel-python evaluates."""
    out = {}
    for name, value in activation.items():
        if isinstance(value, Mapping) and not isinstance(value, dict):  # lazily evaluated variables
            converted = {}
            for key in value:
                try:
                    converted[key] = value[key]
                except (EvaluationError, cel_fast.CelError):
                    continue  # a variable that fails is absent: an expression using it fails too
            value = converted
        out[name] = celpy.json_to_cel(value)
    return out


def evaluate_value(expression: str, activation: Mapping[str, Any]) -> Any:
    """The value of an expression (plain JSON-like Python values); EvaluationError when it has none."""
    compiled = compile_expression(expression)
    if compiled.fast is not None:
        try:
            return cel_fast.evaluate(compiled.fast, activation)
        except cel_fast.CelError as exc:
            raise EvaluationError(f"expression '{expression}' resulted in error: {exc}") from None
    if compiled.program is None:
        raise EvaluationError(compiled.error or "compilation error")
    try:
        result = compiled.program.evaluate(_celpy_activation(activation))
    except Exception as exc:  # CELEvalError and anything the evaluator lets through
        raise EvaluationError(f"expression '{expression}' resulted in error: {_short(exc)}") from None
    if isinstance(result, celpy.CELEvalError):
        raise EvaluationError(f"expression '{expression}' resulted in error: {_short(result)}")
    return _plain(result)


def _plain(value: Any) -> Any:
    """A celtypes value as plain Python (BoolType before IntType: it subclasses int)."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.ListType):
        return [_plain(v) for v in value]
    if isinstance(value, celtypes.MapType):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _evaluate_one(expression: str, activation: Mapping[str, Any]) -> bool | str:
    """True/False, or an error message."""
    try:
        result = evaluate_value(expression, activation)
    except EvaluationError as exc:
        return str(exc)
    if not isinstance(result, bool):
        # The real server rejects a non-bool expression when the configuration is written.
        return f"expression '{expression}' resulted in error: must evaluate to bool, got {type(result).__name__}"
    return result


def evaluate_conditions(conditions: list[Mapping[str, Any]], activation: Mapping[str, Any]) -> ConditionsResult:
    """All conditions true → call; any false → skip; otherwise the errors (aggregated as utilerrors does)."""
    errors: list[str] = []
    for condition in conditions:
        outcome = _evaluate_one(str(condition.get("expression", "")), activation)
        if outcome is False:
            return ConditionsResult(False, None, str(condition.get("name", "")))
        if isinstance(outcome, str):
            errors.append(outcome)
    if errors:
        return ConditionsResult(False, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return ConditionsResult(True)
