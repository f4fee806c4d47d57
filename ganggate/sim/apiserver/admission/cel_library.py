"""CEL's values, operators and functions over plain JSON values, for kubesim/apiserver/admission/cel_fast.py.

Semantics follow the CEL spec (github.com/google/cel-spec/doc/langdef.md) as cel-go implements it,
and Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library) for the extension functions: see
cel_fast.py's docstring for what is covered.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_ABSENT = object()


class CelError(Exception):
    """An evaluation error (cel-go's types.Err): the expression has no value for this input."""


class Unsupported(Exception):
    """The expression uses CEL this compiler does not implement; evaluate it with celpy instead."""


_TYPE_NAMES = {type(None): "null_type", bool: "bool", int: "int", float: "double", str: "string", bytes: "bytes",
               list: "list", dict: "map"}


def _type_name(value: Any) -> str:
    name = _TYPE_NAMES.get(type(value))  # the common case; isinstance on Mapping (an ABC) is slow
    if name is not None:
        return name
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "map"
    return type(value).__name__


def _overload(op: str, *values: Any) -> CelError:
    return CelError(f"no such overload: {op}({', '.join(_type_name(v) for v in values)})")


def _kind(value: Any) -> str:
    """The equality class of a value: int and double compare as numbers."""
    name = _type_name(value)
    return "number" if name in ("int", "double") else name


def equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality (cel-go since v0.10)."""
    if type(a) is str and type(b) is str:
        return a == b
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            if key not in b or not equal(value, b[key]):
                return False
        return True
    return a == b


def _int(value: int) -> int:
    if not _INT_MIN <= value <= _INT_MAX:
        raise CelError("integer overflow")
    return value


def _bool(value: Any, op: str) -> bool:
    if not isinstance(value, bool):
        raise _overload(op, value)
    return value


# ---- operators -------------------------------------------------------------------------------------
def _add(a: Any, b: Any) -> Any:
    ka, kb = _type_name(a), _type_name(b)
    if ka != kb or ka not in ("int", "double", "string", "list", "bytes"):
        raise _overload("_+_", a, b)
    return _int(a + b) if ka == "int" else a + b


def _sub(a: Any, b: Any) -> Any:
    ka = _type_name(a)
    if ka != _type_name(b) or ka not in ("int", "double"):
        raise _overload("_-_", a, b)
    return _int(a - b) if ka == "int" else a - b


def _mul(a: Any, b: Any) -> Any:
    ka = _type_name(a)
    if ka != _type_name(b) or ka not in ("int", "double"):
        raise _overload("_*_", a, b)
    return _int(a * b) if ka == "int" else a * b


def _div(a: Any, b: Any) -> Any:
    ka = _type_name(a)
    if ka != _type_name(b) or ka not in ("int", "double"):
        raise _overload("_/_", a, b)
    if ka == "double":
        return a / b if b else (float("nan") if not a else float("inf") * (1 if a > 0 else -1))
    if b == 0:
        raise CelError("division by zero")
    quotient = abs(a) // abs(b)  # truncated toward zero, as Go's integer division
    return _int(quotient if (a >= 0) == (b >= 0) else -quotient)


def _mod(a: Any, b: Any) -> Any:
    if _type_name(a) != "int" or _type_name(b) != "int":
        raise _overload("_%_", a, b)
    if b == 0:
        raise CelError("modulus by zero")
    rest = abs(a) % abs(b)  # the sign of the dividend, as Go's %
    return rest if a >= 0 else -rest


def _ordered(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    ka, kb = _kind(a), _kind(b)
    if ka != kb or ka not in ("number", "string", "bool", "bytes"):
        raise _overload(op, a, b)
    return a, b


def _in(item: Any, container: Any) -> bool:
    if type(container) is dict and type(item) is str:
        return item in container
    if isinstance(container, list):
        return any(equal(item, member) for member in container)
    if isinstance(container, Mapping):
        if isinstance(item, str):
            return item in container
        return any(equal(item, key) for key in container)
    raise _overload("@in", item, container)


_RELATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "relation_eq": equal,
    "relation_ne": lambda a, b: not equal(a, b),
    "relation_lt": lambda a, b: (lambda x, y: x < y)(*_ordered("_<_", a, b)),
    "relation_le": lambda a, b: (lambda x, y: x <= y)(*_ordered("_<=_", a, b)),
    "relation_gt": lambda a, b: (lambda x, y: x > y)(*_ordered("_>_", a, b)),
    "relation_ge": lambda a, b: (lambda x, y: x >= y)(*_ordered("_>=_", a, b)),
    "relation_in": _in,
}
_ARITHMETIC = {"addition_add": _add, "addition_sub": _sub, "multiplication_mul": _mul,
               "multiplication_div": _div, "multiplication_mod": _mod}


def select(value: Any, field: str) -> Any:
    """`value.field`: a key of a map (an object), an error when it is absent."""
    if type(value) is dict:  # the common case, in one lookup
        if (found := value.get(field, _ABSENT)) is not _ABSENT:
            return found
    elif isinstance(value, Mapping) and field in value:
        return value[field]
    if isinstance(value, Mapping):
        raise CelError(f"no such key: {field}")
    raise CelError(f"type '{_type_name(value)}' does not support field selection")


def _index(value: Any, key: Any) -> Any:
    if isinstance(value, list):
        if _type_name(key) != "int" and not (isinstance(key, float) and key.is_integer()):
            raise _overload("_[_]", value, key)
        position = int(key)
        if not 0 <= position < len(value):
            raise CelError(f"index out of bounds: {position}")
        return value[position]
    if isinstance(value, Mapping):
        if isinstance(key, str) or key is None:
            if key in value:
                return value[key]
        else:
            for candidate in value:
                if equal(candidate, key):
                    return value[candidate]
        raise CelError(f"no such key: {key}")
    raise _overload("_[_]", value, key)


# ---- functions -------------------------------------------------------------------------------------
def _size(value: Any) -> int:
    if isinstance(value, (str, bytes, list, Mapping)):
        return len(value)
    raise _overload("size", value)


def _go_float(value: float) -> str:
    """Go's %g (strconv 'g', shortest), as cel-go's string(double): 1e+06, 123456, 1.5e-05."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # the decimal point's position in the digits
    exp = point - 1
    if exp < -4 or exp >= 6:  # shortest formatting decides with precision 6 (strconv/ftoa.go)
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        body = f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    elif point <= 0:
        body = "0." + "0" * -point + text
    elif point >= len(text):
        body = text + "0" * (point - len(text))
    else:
        body = text[:point] + "." + text[point:]
    return ("-" if sign else "") + body


def _to_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise CelError("invalid UTF-8 in bytes, cannot convert to string") from None
    raise _overload("string", value)


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _overload("int", value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or not -(2.0**63) <= value < 2.0**63:
            raise CelError("integer overflow")
        return int(value)
    if isinstance(value, str):
        if not re.fullmatch(r"[+-]?[0-9]+", value):
            raise CelError(f"cannot convert '{value}' to int")  # strconv.ParseInt(s, 10, 64)
        return _int(int(value))
    raise _overload("int", value)


def _to_uint(value: Any) -> int:
    result = _to_int(value)
    if result < 0:
        raise CelError("unsigned integer overflow")
    return result


def _to_double(value: Any) -> float:
    if isinstance(value, bool):
        raise _overload("double", value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise CelError(f"cannot convert '{value}' to double") from None
    raise _overload("double", value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        # strconv.ParseBool
        if value in ("1", "t", "T", "TRUE", "true", "True"):
            return True
        if value in ("0", "f", "F", "FALSE", "false", "False"):
            return False
        raise CelError(f"cannot convert '{value}' to bool")
    raise _overload("bool", value)


def _re2_dollars(pattern: str) -> str:
    """RE2's `$` (without the m flag) matches at the end of the text only; Python's also before a
    final newline, which would let 'ddp\\n' pass '^[a-z0-9]+$'. Each such `$` becomes `\\Z`."""
    if "(?m" in pattern or "$" not in pattern:
        return pattern
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            char = "\\Z"
        out.append(char)
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(_re2_dollars(pattern))
    except re.error as exc:
        raise CelError(f"invalid regular expression '{pattern}': {exc}") from None


def _strings(op: str, *values: Any) -> None:
    for value in values:
        if not isinstance(value, str):
            raise _overload(op, *values)


def _matches(text: Any, pattern: Any) -> bool:
    """RE2 semantics: a match anywhere in the string (cel-go's matches)."""
    _strings("matches", text, pattern)
    return _regex(pattern).search(text) is not None


def _join(items: Any, separator: Any = "") -> str:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items) or not isinstance(separator, str):
        raise _overload("join", items, separator)
    return separator.join(items)


def _split(text: Any, separator: Any, limit: Any = -1) -> list[str]:
    _strings("split", text, separator)
    if limit == 0:
        return []
    if separator == "":
        parts = list(text)
        return parts if limit < 0 or len(parts) <= limit else parts[: limit - 1] + ["".join(parts[limit - 1:])]
    return text.split(separator, limit - 1 if limit > 0 else -1)


def _substring(text: Any, start: Any, end: Any = None) -> str:
    stop = len(text) if end is None else end
    if not isinstance(text, str) or _type_name(start) != "int" or _type_name(stop) != "int":
        raise _overload("substring", text, start)
    if not 0 <= start <= stop <= len(text):
        raise CelError(f"index out of range: {start if start < 0 or start > len(text) else stop}")
    return text[start:stop]


def _index_of(text: Any, part: Any) -> int:
    if isinstance(text, list):
        return next((i for i, item in enumerate(text) if equal(item, part)), -1)
    _strings("indexOf", text, part)
    return text.find(part)


def _last_index_of(text: Any, part: Any) -> int:
    _strings("lastIndexOf", text, part)
    return text.rfind(part)


def _string_method(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(target: Any, *args: Any) -> Any:
        _strings(op, target, *args)
        return fn(target, *args)
    return call


_GLOBALS: dict[str, Callable[..., Any]] = {
    "size": _size, "int": _to_int, "uint": _to_uint, "double": _to_double, "string": _to_string,
    "bool": _to_bool, "dyn": lambda value: value, "matches": _matches,
}
_METHODS: dict[str, Callable[..., Any]] = {
    "size": _size,
    "matches": _matches,
    "startsWith": _string_method("startsWith", str.startswith),
    "endsWith": _string_method("endsWith", str.endswith),
    "contains": _string_method("contains", lambda s, part: part in s),
    "lowerAscii": _string_method("lowerAscii", lambda s: "".join(c.lower() if c.isascii() else c for c in s)),
    "upperAscii": _string_method("upperAscii", lambda s: "".join(c.upper() if c.isascii() else c for c in s)),
    "trim": _string_method("trim", lambda s: s.strip(" \t\n\v\f\r\x85\xa0")),
    "replace": _string_method("replace", lambda s, old, new: s.replace(old, new)),
    "split": _split,
    "join": _join,
    "substring": _substring,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
}
_MACROS = ("all", "exists", "exists_one", "map", "filter")
