"""CEL for MutatingAdmissionPolicy mutations: `Object{...}` and `JSONPatch{...}` literals.

The mutating environment adds two kinds of object construction to the admission CEL of
apiserver/admission/cel_fast.py:
- `Object{spec: Object.spec{...}}`: an apply configuration whose type names must follow the field
  path from the root (k8s.io/apiserver/pkg/cel/mutation/dynamic/objects.go ObjectVal,
  CheckTypeNamesMatchFieldPathNames);
- `JSONPatch{op: ..., path: ..., from: ..., value: ...}` (k8s.io/apiserver/pkg/cel/mutation/
  unstructured JSONPatchVal) and the function `jsonpatch.escapeKey(key)` (library/jsonpatch.go).

Values are plain dicts tagged with their type name (ObjectValue); the rest of an expression is
compiled by cel_fast's compiler, once per text. Expressions this compiler cannot handle fall back to
cel.py (cel-python), which has no object construction: using one there fails to evaluate.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lark

from ganggate.sim.apiserver.admission import cel_fast
from ganggate.sim.apiserver.admission.cel import EvaluationError, evaluate_value
from ganggate.sim.apiserver.admission.cel_library import CelError, Unsupported

JSON_PATCH_TYPE = "JSONPatch"
OBJECT_TYPE = "Object"
_JSON_PATCH_FIELDS = ("op", "path", "from", "value")


class ObjectValue(dict):
    """An object built by a CEL literal: its fields, and its CEL type name."""

    def __init__(self, type_name: str, fields: Mapping[str, Any]) -> None:
        super().__init__(fields)
        self.type_name = type_name


def _dotted(tree: Any) -> str | None:
    """`Object.spec.x` as written before `{`, or None when it is not a plain dotted name."""
    if isinstance(tree, lark.Token):
        return str(tree)
    if not isinstance(tree, lark.Tree):
        return None
    children = [c for c in tree.children if c is not None]
    if tree.data in ("member", "primary") and len(children) == 1:
        return _dotted(children[0])
    if tree.data == "ident" and len(children) == 1:
        return str(children[0])
    if tree.data == "member_dot" and len(children) == 2:
        head = _dotted(children[0])
        return None if head is None else f"{head}.{children[1]}"
    return None


def escape_key(key: Any) -> str:
    """jsonpatch.escapeKey: a map key as one JSON Pointer segment (RFC 6901: ~ -> ~0, / -> ~1)."""
    if not isinstance(key, str):
        raise CelError(f"no such overload: jsonpatch.escapeKey({type(key).__name__})")
    return key.replace("~", "~0").replace("/", "~1")


class _MutationCompiler(cel_fast._Compiler):
    """cel_fast's compiler plus the object literals and functions of the mutating environment."""

    def _member_object(self, tree: lark.Tree) -> cel_fast.Fn:
        children = [c for c in tree.children if c is not None]
        type_name = _dotted(children[0])
        if type_name is None or not (type_name == JSON_PATCH_TYPE or type_name == OBJECT_TYPE
                                     or type_name.startswith(OBJECT_TYPE + ".")):
            raise CompileError(f"undeclared reference to '{type_name or 'object type'}'")
        inits = [c for c in children[1].children if c is not None] if len(children) > 1 else []
        names = [str(token) for token in inits[0::2]]
        values = [self.compile(expr) for expr in inits[1::2]]
        if type_name == JSON_PATCH_TYPE:
            unknown = [n for n in names if n not in _JSON_PATCH_FIELDS]
            if unknown:
                raise CompileError(f"undefined field '{unknown[0]}'")
        if len(set(names)) != len(names):
            raise CompileError("duplicate field in object initializer")
        pairs = list(zip(names, values, strict=True))

        def build(env: cel_fast.Env) -> ObjectValue:
            return ObjectValue(type_name, {name: value(env) for name, value in pairs})
        return build

    def _member_dot_arg(self, tree: lark.Tree) -> cel_fast.Fn:
        target, name = tree.children[0], str(tree.children[1])
        if _dotted(target) == "jsonpatch" and name == "escapeKey":
            args = self._exprs(tree.children[2] if len(tree.children) > 2 else None)
            if len(args) != 1:
                raise CompileError("found no matching overload for 'jsonpatch.escapeKey'")
            key = self.compile(args[0])
            return lambda env: escape_key(key(env))
        return super()._member_dot_arg(tree)


class CompileError(Exception):
    """A mutation expression the mutating CEL environment refuses at compile time."""


@dataclass(frozen=True)
class Compiled:
    fast: Any | None
    error: str | None


@functools.lru_cache(maxsize=512)
def compile_mutation(expression: str) -> Compiled:
    """Compile a mutation expression once per text (error: "compilation error: ...")."""
    try:
        tree = cel_fast.ENVIRONMENT.compile(expression)
    except Exception as exc:  # celpy's CELParseError
        return Compiled(None, f"compilation error: {str(exc).splitlines()[0] if str(exc) else exc!r}")
    try:
        return Compiled(_MutationCompiler().compile(tree), None)
    except CompileError as exc:
        return Compiled(None, f"compilation error: {exc}")
    except (Unsupported, IndexError, AttributeError, KeyError, TypeError):
        return Compiled(None, None)  # evaluated by cel.py instead


def evaluate_mutation(expression: str, activation: Mapping[str, Any]) -> Any:
    """The value of a mutation expression; EvaluationError in kube-apiserver's wording when it has none."""
    compiled = compile_mutation(expression)
    if compiled.error is not None:
        raise EvaluationError(compiled.error)
    if compiled.fast is None:
        return evaluate_value(expression, activation)
    try:
        return cel_fast.evaluate(compiled.fast, activation)
    except CelError as exc:
        raise EvaluationError(f"expression '{expression}' resulted in error: {exc}") from None


def type_name_errors(value: Any, path: list[str] | None = None) -> list[str]:
    """CheckTypeNamesMatchFieldPathNames: each nested Object literal named after its field path."""
    if path is None:
        path = [value.type_name] if isinstance(value, ObjectValue) else []
    errors: list[str] = []
    if isinstance(value, ObjectValue):
        expected = ".".join(path)
        if value.type_name != expected:
            errors.append(f"unexpected type name {value.type_name!r}, expected {expected!r}, which matches "
                          "field name path from root Object type".replace("'", '"'))
        for name, field in value.items():
            errors += type_name_errors(field, path + [name])
    elif isinstance(value, list):
        for item in value:
            errors += type_name_errors(item, path)
    elif isinstance(value, dict):
        for item in value.values():
            errors += type_name_errors(item, path)
    return errors


def plain(value: Any) -> Any:
    """An evaluated value as plain JSON data (object literals become dicts)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
