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

from typing import Any

from ganggate.sim.apiserver import openapi
from ganggate.sim.apimachinery import errors

_KINDS = ((bool, "bool"), (int, "number"), (float, "number"), (dict, "object"), (list, "array"))


def _resolve(schema: dict[str, Any], name: str) -> tuple[dict[str, Any], str]:
    """Follow $ref and single-element allOf; the definition name of the schema reached."""
    every = openapi.schemas()
    for _ in range(16):
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf") or []) == 1:
            ref = schema["allOf"][0].get("$ref")
        if ref is None:
            break
        name = ref.rsplit("/", 1)[-1]
        schema = every.get(name, {})
    return schema, name


def _json_kind(value: Any) -> str:
    return next(word for kind, word in _KINDS if isinstance(value, kind))


def _walk(value: Any, schema: dict[str, Any], name: str, struct: str, path: list[str]) -> str | None:
    """The decode error of the first non-string value in a string map under `value`, or None."""
    schema, name = _resolve(schema, name)
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if properties is not None:
            go_name = name.rsplit(".", 1)[-1]
            for key, item in value.items():
                if key in properties and isinstance(item, (dict, list)):
                    found = _walk(item, properties[key], name, go_name, path + [key])
                    if found:
                        return found
        elif isinstance(extra, dict):
            # A plain Go string only: a $ref (Quantity, IntOrString, ...) has a decoder of its own.
            plain = extra.get("type") == "string" and "$ref" not in extra and "allOf" not in extra
            for item in value.values():
                if plain and item is not None and not isinstance(item, str):
                    where = ".".join(path)
                    return f"json: cannot unmarshal {_json_kind(item)} into Go struct field {struct}.{where} of type string"
                if isinstance(item, (dict, list)):
                    found = _walk(item, extra, name, struct, path)
                    if found:
                        return found
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            if isinstance(item, (dict, list)):
                found = _walk(item, schema["items"], name, struct, path)
                if found:
                    return found
    return None


def decode_error(group: str, version: str, kind: str, obj: Any) -> str | None:
    """The decoder's error for `obj` as the kind, or None when it decodes."""
    name = openapi.schema_name(group, version, kind)
    if name is None or not isinstance(obj, dict):
        return None
    return _walk(obj, openapi.schemas()[name], name, kind, [])


def check(group: str, version: str, kind: str, obj: Any, patch: bool = False) -> None:
    """400 BadRequest for a body the decoder refuses (worded as transformDecodeError, but for a patch)."""
    error = decode_error(group, version, kind, obj)
    if error is None:
        return
    if not patch:
        error = f'{kind} in version "{version}" cannot be handled as a {kind}: {error}'
    raise errors.bad_request(error)
