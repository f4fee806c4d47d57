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
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import celpy
import lark

from ganggate.sim.apiserver.admission.cel_library import (
    _ARITHMETIC,
    _GLOBALS,
    _MACROS,
    _METHODS,
    _RELATIONS,
    CelError,
    Unsupported,
    _bool,
    _index,
    _int,
    _overload,
    _type_name,
    select,
)

Env = Mapping[str, Any]
Fn = Callable[[Env], Any]

ENVIRONMENT = celpy.Environment()  # its parser: shared with admission/cel.py's cel-python fallback
__all__ = ["CelError", "Unsupported", "compile_cel", "evaluate", "select"]


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


# The value of each compiled constant (literals, and lists of literals), by its closure.
_CONSTANTS: weakref.WeakKeyDictionary[Fn, Any] = weakref.WeakKeyDictionary()


def _const(value: Any) -> Fn:
    def constant(env: Env) -> Any:
        return value
    _CONSTANTS[constant] = value
    return constant


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
        token = tree.children[0]
        assert isinstance(token, lark.Token)  # the grammar's literal rules hold one terminal
        return _const(_literal(token))

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
        if all(item in _CONSTANTS for item in items):
            # A list of literals (['a', 'b'].exists(...), `x in ['default-scheduler']`) is built once,
            # as cel-go's constant folding does: nothing evaluated mutates a value in place.
            return _const([_CONSTANTS[item] for item in items])
        return lambda env: [item(env) for item in items]

    def _map_lit(self, tree: lark.Tree) -> Fn:
        flat = [self.compile(c) for c in self._exprs(tree.children[0] if tree.children else None)]
        pairs = list(zip(flat[0::2], flat[1::2], strict=True))
        if not pairs:
            return _const({})  # `{}`, built once likewise

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
        name, args = str(tree.children[0]), self._exprs(tree.children[1] if len(tree.children) > 1 else None)
        if name == "has":
            return self._has(args)
        fn = _GLOBALS.get(name)
        if fn is None:
            raise Unsupported(f"function {name}")
        compiled = [self.compile(a) for a in args]
        return self._call(name, fn, compiled)

    def _member_dot_arg(self, tree: lark.Tree) -> Fn:
        target_tree, name = tree.children[0], str(tree.children[1])
        args = self._exprs(tree.children[2] if len(tree.children) > 2 else None)
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
            if type(value) is dict or isinstance(value, Mapping):
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
    tree = ENVIRONMENT.compile(text)
    try:
        return _Compiler().compile(tree)
    except (IndexError, AttributeError, KeyError, TypeError) as exc:  # a tree shape not foreseen here
        raise Unsupported(f"parse tree: {exc}") from None


def evaluate(fn: Fn, env: Env) -> Any:
    """Run a compiled expression; CelError for an evaluation error (RecursionError included)."""
    try:
        return fn(env)
    except RecursionError:
        raise CelError("expression too deeply nested") from None
