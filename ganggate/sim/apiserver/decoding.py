"""What kube-apiserver's JSON decoder refuses before anything else looks at a body: a value that is
not a string in a map of strings (annotations, labels, nodeSelector, ConfigMap data, ...).

The typed decoder (sigs.k8s.io/json, a fork of encoding/json) fails with an UnmarshalTypeError,
`json: cannot unmarshal number into Go struct field ObjectMeta.spec.template.metadata.annotations
of type string`: the value's JSON kind (number, bool, object, array), the Go struct that holds the
field and the path of JSON field names down to it (map keys and list indexes are not part of the
path). On create and update the handler wraps it as transformDecodeError does (handlers/create.go,
update.go): 400 BadRequest `Job in version "v1" cannot be handled as a Job: json: ...`. A null
value decodes to "" and is not refused. Other type mismatches are not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver import openapi

_KINDS = ((bool, "bool"), (int, "number"), (float, "number"), (dict, "object"), (list, "array"))


_RESOLVED: dict[int, tuple[dict[str, Any], dict[str, Any], str | None]] = {}  # id(schema) -> (schema, resolved, name)


def _resolve(schema: dict[str, Any], name: str) -> tuple[dict[str, Any], str]:
    """Follow $ref and single-element allOf; the definition name of the schema reached (memoized:
    the schemas are fixed)."""
    entry = _RESOLVED.get(id(schema))
    if entry is None or entry[0] is not schema:
        every = openapi.schemas()
        resolved, found = schema, None
        for _ in range(16):
            ref = resolved.get("$ref")
            if ref is None and len(resolved.get("allOf") or []) == 1:
                ref = resolved["allOf"][0].get("$ref")
            if ref is None:
                break
            found = ref.rsplit("/", 1)[-1]
            resolved = every.get(found, {})
        entry = _RESOLVED[id(schema)] = (schema, resolved, found)
    return entry[1], entry[2] or name


def _json_kind(value: Any) -> str:
    return next(word for kind, word in _KINDS if isinstance(value, kind))


def _plain_string_map(schema: dict[str, Any]) -> bool:
    """A map of plain Go strings (a $ref, e.g. Quantity or IntOrString, has a decoder of its own)."""
    extra = schema.get("additionalProperties")
    return (schema.get("type") == "object" and "properties" not in schema and isinstance(extra, dict)
            and extra.get("type") == "string" and "$ref" not in extra and "allOf" not in extra)


@dataclass
class _Plan:
    """Where the string maps are under one struct: its Go name, its string-map fields, and the
    fields (a struct, a list or a map of structs) that hold some below them."""

    go_name: str
    string_maps: list[str] = field(default_factory=list)
    nested: list[tuple[str, str, _Plan]] = field(default_factory=list)  # (field, object|list|map, plan)


_PLANS: dict[str, _Plan | None] = {}


def _plan(schema: dict[str, Any], name: str) -> _Plan | None:
    """The plan of a struct schema (memoized by definition name; a recursive schema stops itself)."""
    resolved, found = _resolve(schema, "")
    # A named definition is memoized by its name, an inline struct (CRDs) by identity; an inline
    # struct is an anonymous Go struct field of the named one around it, whose name errors carry.
    key = found or f"{name}#{id(schema)}"
    if key in _PLANS:
        return _PLANS[key]
    _PLANS[key] = None  # while it is built: a schema that contains itself adds nothing
    name = found or name
    plan = _Plan(name.rsplit(".", 1)[-1])
    for prop, below in (resolved.get("properties") or {}).items():
        if _plain_string_map(below):
            plan.string_maps.append(prop)
            continue
        element, _ = _resolve(below, name)
        shape, item = "object", below
        if element.get("type") == "array" and isinstance(element.get("items"), dict):
            shape, item = "list", element["items"]
        elif "properties" not in element and isinstance(element.get("additionalProperties"), dict):
            shape, item = "map", element["additionalProperties"]
        if shape == "object" and "properties" not in element:
            continue
        inner = _plan(item, name) if ("$ref" in item or "allOf" in item or "properties" in item) else None
        if inner is not None:
            plan.nested.append((prop, shape, inner))
    _PLANS[key] = plan if plan.string_maps or plan.nested else None
    return _PLANS[key]


def _apply(value: Any, plan: _Plan, path: list[str]) -> str | None:
    """The decode error of the first non-string value in a string map under `value`, or None."""
    if not isinstance(value, dict):
        return None
    for key in plan.string_maps:
        found = value.get(key)
        if isinstance(found, dict):
            for item in found.values():
                if item is not None and not isinstance(item, str):
                    where = ".".join(path + [key])
                    return f"json: cannot unmarshal {_json_kind(item)} into Go struct field {plan.go_name}.{where} of type string"
    for key, shape, inner in plan.nested:
        found = value.get(key)
        if found is None:
            continue
        items = [found] if shape == "object" else found if shape == "list" and isinstance(found, list) else \
            found.values() if shape == "map" and isinstance(found, dict) else []
        for item in items:
            error = _apply(item, inner, path + [key])
            if error:
                return error
    return None


def decode_error(group: str, version: str, kind: str, obj: Any) -> str | None:
    """The decoder's error for `obj` as the kind, or None when it decodes."""
    name = openapi.schema_name(group, version, kind)
    if name is None or not isinstance(obj, dict):
        return None
    plan = _PLANS[name] if name in _PLANS else _plan(openapi.schemas()[name], name)
    return _apply(obj, plan, []) if plan is not None else None


def check(group: str, version: str, kind: str, obj: Any, patch: bool = False) -> None:
    """400 BadRequest for a body the decoder refuses (worded as transformDecodeError, but for a patch)."""
    error = decode_error(group, version, kind, obj)
    if error is None:
        return
    if not patch:
        error = f'{kind} in version "{version}" cannot be handled as a {kind}: {error}'
    raise errors.bad_request(error)
