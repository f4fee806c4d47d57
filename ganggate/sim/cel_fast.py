"""CEL compiled once into Python closures over plain JSON values: kubesim's fast CEL evaluator.

Why: cel-python (celpy) interprets its parse tree on every evaluation and needs its input converted
into celtypes first; a matchCondition on a pod cost about 10 ms per request that way, paid on every
pod write that an admission policy or webhook matches. kube-apiserver compiles each expression once
with cel-go and evaluates the program per request
(k8s.io/apiserver/pkg/admission/plugin/cel/compile.go, filter.go); this does the same in Python:
`compile_cel(text)` parses with celpy's CEL grammar and turns the tree into nested closures, once
per text; evaluating one is a few function calls over the request's dicts, with no conversion.

Semantics follow the CEL spec (github.com/google/cel-spec/doc/langdef.md) as cel-go implements it:
heterogeneous equality (values of different types are unequal; int and double compare by value),
commutative `&&`/`||` that absorb an error when the other side decides, errors for a missing key or
field, a wrong-typed operand, integer overflow and division by zero; the macros `has`, `all`,
`exists`, `exists_one`, `map`, `filter`; the standard functions on strings, lists and maps, and
Kubernetes' string and list extension functions most used in policies
(k8s.io/apiserver/pkg/cel/library: lowerAscii, upperAscii, trim, split, join, replace, indexOf,
substring). Anything else (timestamps, durations, type(), optional `?.`, protobuf messages) raises
`Unsupported` at compile time and the caller falls back to celpy, which evaluates it slowly.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from collections.abc import Mapping
from typing import Any, Callable

import celpy
import lark

Env = Mapping[str, Any]
Fn = Callable[[Env], Any]

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_ENV = celpy.Environment()


class CelError(Exception):
    """An evaluation error (cel-go's types.Err): the expression has no value for this input."""


class Unsupported(Exception):
    """The expression uses CEL this compiler does not implement; evaluate it with celpy instead."""


def _type_name(value: Any) -> str:
    if value is None:
        return "null_type"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
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
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
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
    if isinstance(value, Mapping):
        if field in value:
            return value[field]
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


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
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


# ---- the compiler ----------------------------------------------------------------------------------
def _children(tree: lark.Tree) -> list[Any]:
    return [c for c in tree.children if c is not None]


def _literal(token: lark.Token) -> Any:
    kind = token.type
    if kind == "BOOL_LIT":
        return token.value == "true"
    if kind == "NULL_LIT":
        return None
    if kind == "INT_LIT":
        return _int(int(token.value, 16) if "x" in token.value.lower() else int(token.value, 10))
    if kind == "FLOAT_LIT":
        return float(token.value)
    if kind in ("STRING_LIT", "MLSTRING_LIT"):
        return str(celpy.evaluation.celstr(token))
    if kind == "BYTES_LIT":
        return bytes(celpy.evaluation.celbytes(token))
    raise Unsupported(f"literal {kind}")  # uint literals: no uint in JSON objects


def _const(value: Any) -> Fn:
    return lambda env: value


def _or(left: Fn, right: Fn) -> Fn:
    def run(env: Env) -> Any:
        try:
            a = _bool(left(env), "_||_")
        except CelError as exc:
            if _bool(right(env), "_||_"):
                return True
            raise exc
        return True if a else _bool(right(env), "_||_")
    return run


def _and(left: Fn, right: Fn) -> Fn:
    def run(env: Env) -> Any:
        try:
            a = _bool(left(env), "_&&_")
        except CelError as exc:
            if not _bool(right(env), "_&&_"):
                return False
            raise exc
        return _bool(right(env), "_&&_") if a else False
    return run


def _binary(op: Callable[[Any, Any], Any], left: Fn, right: Fn) -> Fn:
    return lambda env: op(left(env), right(env))


class _Compiler:
    """Turns celpy's parse tree (celpy/cel.lark) into closures."""

    def compile(self, tree: lark.Tree) -> Fn:
        handler = getattr(self, "_" + str(tree.data), None)
        if handler is None:
            raise Unsupported(f"CEL construct {tree.data}")
        return handler(tree)

    def _pass_or(self, tree: lark.Tree, combine: Callable[[lark.Tree, Fn], Fn]) -> Fn:
        children = _children(tree)
        if len(children) == 1:
            return self.compile(children[0])
        op, right = children
        return combine(op, self.compile(right))

    def _expr(self, tree: lark.Tree) -> Fn:
        children = _children(tree)
        if len(children) == 1:
            return self.compile(children[0])
        cond, then, otherwise = (self.compile(c) for c in children)

        def run(env: Env) -> Any:
            return then(env) if _bool(cond(env), "_?_:_") else otherwise(env)
        return run

    def _conditionalor(self, tree: lark.Tree) -> Fn:
        children = _children(tree)
        if len(children) == 1:
            return self.compile(children[0])
        return _or(self.compile(children[0]), self.compile(children[1]))

    def _conditionaland(self, tree: lark.Tree) -> Fn:
        children = _children(tree)
        if len(children) == 1:
            return self.compile(children[0])
        return _and(self.compile(children[0]), self.compile(children[1]))

    def _relation(self, tree: lark.Tree) -> Fn:
        return self._pass_or(tree, lambda op, right: _binary(_RELATIONS[str(op.data)], self.compile(op.children[0]), right))

    def _addition(self, tree: lark.Tree) -> Fn:
        return self._pass_or(tree, lambda op, right: _binary(_ARITHMETIC[str(op.data)], self.compile(op.children[0]), right))

    _multiplication = _addition

    def _unary(self, tree: lark.Tree) -> Fn:
        children = _children(tree)
        if len(children) == 1:
            return self.compile(children[0])
        op, operand = str(children[0].data), self.compile(children[1])
        if op == "unary_not":
            return lambda env: not _bool(operand(env), "!_")

        def negate(env: Env) -> Any:
            value = operand(env)
            if _type_name(value) == "int":
                return _int(-value)
            if _type_name(value) == "double":
                return -value
            raise _overload("-_", value)
        return negate

    def _member(self, tree: lark.Tree) -> Fn:
        return self.compile(_children(tree)[0])

    _primary = _member

    def _paren_expr(self, tree: lark.Tree) -> Fn:
        return self.compile(_children(tree)[0])

    def _literal(self, tree: lark.Tree) -> Fn:
        return _const(_literal(tree.children[0]))

    def _ident(self, tree: lark.Tree) -> Fn:
        name = str(tree.children[0])

        def lookup(env: Env) -> Any:
            try:
                return env[name]
            except KeyError:
                raise CelError(f"undeclared reference to '{name}'") from None
        return lookup

    def _member_dot(self, tree: lark.Tree) -> Fn:
        target, field = self.compile(tree.children[0]), str(tree.children[1])
        return lambda env: select(target(env), field)

    def _member_index(self, tree: lark.Tree) -> Fn:
        target, key = self.compile(tree.children[0]), self.compile(tree.children[1])
        return lambda env: _index(target(env), key(env))

    def _exprs(self, node: lark.Tree | None) -> list[Any]:
        return [] if node is None else list(node.children)

    def _list_lit(self, tree: lark.Tree) -> Fn:
        items = [self.compile(c) for c in self._exprs(tree.children[0] if tree.children else None)]
        return lambda env: [item(env) for item in items]

    def _map_lit(self, tree: lark.Tree) -> Fn:
        flat = [self.compile(c) for c in self._exprs(tree.children[0] if tree.children else None)]
        pairs = list(zip(flat[0::2], flat[1::2]))

        def build(env: Env) -> Any:
            out: dict[Any, Any] = {}
            for key_fn, value_fn in pairs:
                key = key_fn(env)
                if _type_name(key) not in ("string", "int", "bool"):
                    raise CelError(f"unsupported map key type: {_type_name(key)}")
                if key in out:
                    raise CelError(f"Failed with repeated key: {key}")
                out[key] = value_fn(env)
            return out
        return build

    def _ident_arg(self, tree: lark.Tree) -> Fn:
        name, args = str(tree.children[0]), self._exprs(tree.children[1])
        if name == "has":
            return self._has(args)
        fn = _GLOBALS.get(name)
        if fn is None:
            raise Unsupported(f"function {name}")
        compiled = [self.compile(a) for a in args]
        return self._call(name, fn, compiled)

    def _member_dot_arg(self, tree: lark.Tree) -> Fn:
        target_tree, name, args = tree.children[0], str(tree.children[1]), self._exprs(tree.children[2])
        target = self.compile(target_tree)
        if name in _MACROS and len(args) in (2, 3):
            return self._macro(name, target, args)
        fn = _METHODS.get(name)
        if fn is None:
            raise Unsupported(f"method {name}")
        compiled = [self.compile(a) for a in args]
        return lambda env: self._apply(name, fn, target(env), [a(env) for a in compiled])

    @staticmethod
    def _apply(name: str, fn: Callable[..., Any], target: Any, args: list[Any]) -> Any:
        try:
            return fn(target, *args)
        except TypeError:
            raise _overload(name, target, *args) from None

    def _call(self, name: str, fn: Callable[..., Any], args: list[Fn]) -> Fn:
        def run(env: Env) -> Any:
            values = [a(env) for a in args]
            try:
                return fn(*values)
            except TypeError:
                raise _overload(name, *values) from None
        return run

    def _has(self, args: list[Any]) -> Fn:
        """has(e.f): whether the map e has the key f (the macro's argument must be a selection)."""
        node = args[0] if len(args) == 1 else None
        while node is not None and node.data in ("expr", "conditionalor", "conditionaland", "relation", "addition",
                                                 "multiplication", "unary", "member") and len(_children(node)) == 1:
            node = _children(node)[0]
        if node is None or node.data != "member_dot":
            raise Unsupported("has() needs a field selection")  # celpy reports the error
        target, field = self.compile(node.children[0]), str(node.children[1])

        def run(env: Env) -> bool:
            value = target(env)
            if isinstance(value, Mapping):
                return field in value
            raise CelError(f"invalid type for field selection: {_type_name(value)}")
        return run

    def _variable(self, node: lark.Tree) -> str:
        while node.data != "ident":
            children = _children(node)
            if len(children) != 1 or not isinstance(children[0], lark.Tree):
                raise Unsupported("a macro's variable must be an identifier")
            node = children[0]
        return str(node.children[0])

    def _macro(self, name: str, target: Fn, args: list[Any]) -> Fn:
        var = self._variable(args[0])
        body = [self.compile(a) for a in args[1:]]
        if len(body) == 2 and name != "map":
            raise Unsupported(f"{name} with three arguments")

        def items(env: Env) -> tuple[list[Any], dict[str, Any]]:
            value = target(env)
            if isinstance(value, list):
                return value, dict(env)
            if isinstance(value, Mapping):
                return list(value.keys()), dict(env)
            raise _overload(name, value)

        if name in ("all", "exists"):
            want = name == "exists"
            predicate = body[0]

            def fold(env: Env) -> bool:
                values, scope = items(env)
                error: CelError | None = None
                for item in values:
                    scope[var] = item
                    try:
                        if _bool(predicate(scope), name) is want:
                            return want
                    except CelError as exc:
                        error = error or exc
                if error is not None:
                    raise error
                return not want
            return fold
        if name == "exists_one":
            predicate = body[0]

            def one(env: Env) -> bool:
                values, scope = items(env)
                count = 0
                for item in values:
                    scope[var] = item
                    count += _bool(predicate(scope), name)
                return count == 1
            return one
        if name == "filter":
            predicate = body[0]

            def keep(env: Env) -> list[Any]:
                values, scope = items(env)
                out = []
                for item in values:
                    scope[var] = item
                    if _bool(predicate(scope), name):
                        out.append(item)
                return out
            return keep
        guard, transform = (body[0], body[1]) if len(body) == 2 else (None, body[0])

        def mapped(env: Env) -> list[Any]:
            values, scope = items(env)
            out = []
            for item in values:
                scope[var] = item
                if guard is None or _bool(guard(scope), name):
                    out.append(transform(scope))
            return out
        return mapped


@functools.lru_cache(maxsize=2048)
def compile_cel(text: str) -> Fn:
    """The closure for a CEL expression, compiled once per text.

    Raises Unsupported for CEL this module does not implement, and celpy's CELParseError (or another
    exception) for text that is not CEL.
    """
    tree = _ENV.compile(text)
    return _Compiler().compile(tree)


def evaluate(fn: Fn, env: Env) -> Any:
    """Run a compiled expression; CelError for an evaluation error (RecursionError included)."""
    try:
        return fn(env)
    except RecursionError:
        raise CelError("expression too deeply nested") from None
