"""Server-side field validation: the `fieldValidation` query parameter of create, update and patch.

As k8s.io/apiserver/pkg/endpoints/handlers (create.go, update.go, patch.go) with KEP-2885: the
directive is `Ignore`, `Warn` (the default when the parameter is absent) or `Strict`; an unknown
field in the body (for a patch, in the patched object) is a 400 BadRequest under Strict
(`<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding error: unknown field
"spec.foo"` on create and update, as transformDecodeError words it; `strict decoding error: ...`
on patch) and a `Warning: 299 - "unknown field \"spec.foo\""` header under Warn. Fields are
checked against the OpenAPI schemas kubesim serves (ganggate.sim.apiserver.openapi); duplicate fields are not
detected (the JSON decoder keeps the last).
"""

from __future__ import annotations

from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.errors import Cause, not_supported
from ganggate.sim.apiserver import openapi

DIRECTIVES = ["Ignore", "Strict", "Warn"]


def directive(query: dict[str, str], options_kind: str = "CreateOptions") -> str:
    """The request's directive; 422 for a value that is not one (ValidateFieldValidation)."""
    value = query.get("fieldValidation", "")
    if value == "":
        return "Warn"
    if value not in DIRECTIVES:
        cause: Cause = not_supported("fieldValidation", value, ["", *DIRECTIVES])
        raise errors.invalid(options_kind, "", [cause], "meta.k8s.io")
    return value


_RESOLVED: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}  # id(schema) -> (schema, resolved)


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref and single-element allOf to the schema they name (memoized: the schemas are fixed)."""
    entry = _RESOLVED.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    every = openapi.schemas()
    resolved = schema
    for _ in range(16):
        ref = resolved.get("$ref")
        if ref is None and len(resolved.get("allOf") or []) == 1:
            ref = resolved["allOf"][0].get("$ref")
        if ref is None:
            break
        resolved = every.get(ref.rsplit("/", 1)[-1], {})
    _RESOLVED[id(schema)] = (schema, resolved)
    return resolved


def _walk(value: Any, schema: dict[str, Any], trail: list[str], out: list[str]) -> None:
    """Append to `out` the paths of the unknown fields under `value` (at the path `trail` spells);
    only containers are descended into, and a path is only spelled out for an unknown field."""
    schema = _resolve(schema)
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                below = properties[key]
            elif isinstance(extra, dict):
                below = extra
            else:
                if properties is not None:
                    out.append("".join(trail) + (f".{key}" if trail else key))
                continue
            if isinstance(item, (dict, list)):
                trail.append(f".{key}" if trail else key)
                _walk(item, below, trail, out)
                trail.pop()
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        for index, item in enumerate(value):
            if isinstance(item, (dict, list)):
                trail.append(f"[{index}]")
                _walk(item, items, trail, out)
                trail.pop()


def unknown_fields(group: str, version: str, kind: str, obj: Any) -> list[str]:
    """The paths of the fields of `obj` that the kind's schema does not have, in document order."""
    name = openapi.schema_name(group, version, kind)
    if name is None or not isinstance(obj, dict):
        return []
    out: list[str] = []
    _walk(obj, openapi.schemas()[name], [], out)
    return out


def check(group: str, version: str, kind: str, obj: Any, mode: str, patch: bool = False) -> list[str]:
    """Apply the directive: raise 400 under Strict, return the warnings to send under Warn."""
    if mode == "Ignore":
        return []
    unknown = unknown_fields(group, version, kind, obj)
    if not unknown:
        return []
    messages = [f'unknown field "{path}"' for path in unknown]
    if mode == "Strict":
        detail = "strict decoding error: " + ", ".join(messages)
        if not patch:
            detail = f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}'
        raise errors.bad_request(detail)
    return messages


def warning_header(messages: list[str]) -> str:
    """The Warning header value (RFC 7234 warn-code 299, as k8s.io/apiserver/pkg/warning)."""
    return ", ".join('299 - "' + m.replace("\\", "\\\\").replace('"', '\\"') + '"' for m in messages)
