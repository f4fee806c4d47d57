"""GET /openapi/v2: the Swagger 2.0 document of everything kubesim serves, in JSON or in protobuf.

kubectl needs it: `kubectl apply -f` of a `kind: List` validates the items on the client against
this document (k8s.io/kubectl/pkg/validation/schema.go validateList -> OpenAPISchema), the
fallback query-parameter verifier reads its PATCH operations
(k8s.io/cli-runtime/pkg/resource/query_param_verifier.go), and kubectl before 1.27 explains and
computes patches with it. client-go asks for the protobuf form only
(k8s.io/client-go/discovery/discovery_client.go OpenAPISchema: `Accept:
application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, then proto.Unmarshal into gnostic's
openapi_v2.Document): a JSON answer would not decode, so this module encodes the document as
gnostic's OpenAPIv2.proto messages (github.com/google/gnostic-models openapiv2/OpenAPIv2.proto;
field numbers below) with a small protobuf writer.

The document is built from the same schemas and operations as /openapi/v3 (kubesim/apiserver/openapi.py),
turned back into Swagger 2.0 as kube-openapi's builder writes it (k8s.io/kube-openapi/pkg/builder):
`#/definitions/` references, a `$ref` beside its description instead of v3's allOf wrapper, body
parameters instead of requestBody, `consumes`/`produces` lists. Content negotiation follows
k8s.io/kube-openapi/pkg/handler/handler.go: JSON for application/json (or no preference), protobuf
for either protobuf media type (answered as `...spec.v2.v1.0+protobuf`, which Go's mime parser
accepts), 406 otherwise; an ETag of the document's hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
from typing import Any

from ganggate.sim.apiserver import discovery, openapi

PROTOBUF_TYPES = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                  "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
JSON_TYPE = "application/json"
_V3_REF = "#/components/schemas/"
_V2_REF = "#/definitions/"
_PRODUCES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]


# ---- the Swagger 2.0 document ----------------------------------------------------------------------
def schema_v2(node: Any) -> Any:
    """One OpenAPI v3 schema node as Swagger 2.0 (refs to definitions, allOf [$ref] unwrapped)."""
    if isinstance(node, list):
        return [schema_v2(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace(_V3_REF, _V2_REF)
        elif key == "allOf" and isinstance(value, list) and len(value) == 1 and "$ref" in value[0]:
            out["$ref"] = value[0]["$ref"].replace(_V3_REF, _V2_REF)
        elif key in ("properties", "patternProperties") and isinstance(value, dict):
            out[key] = {name: schema_v2(prop) for name, prop in value.items()}
        elif key in ("nullable", "anyOf", "oneOf"):
            continue  # no Swagger 2.0 counterpart (kube-openapi drops them as well)
        else:
            out[key] = schema_v2(value)
    return out


def _parameter_v2(param: dict[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in param.items() if key != "schema"}
    out.update(param.get("schema") or {})
    return out


def _operation_v2(op: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"description": op.get("description", ""), "consumes": ["*/*"], "produces": list(_PRODUCES),
                           "schemes": ["https"], "tags": op.get("tags", []), "operationId": op["operationId"]}
    params = [_parameter_v2(p) for p in op.get("parameters") or []]
    body = op.get("requestBody")
    if body:
        content = body.get("content") or {}
        if len(content) > 1:
            out["consumes"] = list(content)
        schema = next(iter(content.values()))["schema"]
        params.insert(0, {"name": "body", "in": "body", "required": True, "schema": schema_v2(schema)})
    if params:
        out["parameters"] = params
    responses = {}
    for code, response in (op.get("responses") or {}).items():
        entry: dict[str, Any] = {"description": response.get("description", "")}
        content = response.get("content") or {}
        if content:
            entry["schema"] = schema_v2(next(iter(content.values()))["schema"])
        responses[code] = entry
    out["responses"] = responses
    for key, value in op.items():
        if key.startswith("x-"):
            out[key] = value
    return out


@functools.lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    """The Swagger 2.0 document: every served path and every component schema."""
    paths: dict[str, Any] = {}
    for info in discovery.RESOURCES:
        for path, item in openapi.resource_paths(info).items():
            converted: dict[str, Any] = {}
            for method, value in item.items():
                if method == "parameters":
                    converted[method] = [_parameter_v2(p) for p in value]
                else:
                    converted[method] = _operation_v2(value)
            paths[path] = converted
    definitions = {name: schema_v2(schema) for name, schema in sorted(openapi.schemas().items())}
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": discovery.version_info()["gitVersion"]},
            "paths": dict(sorted(paths.items())), "definitions": definitions}


@functools.lru_cache(maxsize=1)
def json_bytes() -> bytes:
    return json.dumps(document(), separators=(",", ":")).encode()


@functools.lru_cache(maxsize=1)
def etag() -> str:
    """The ETag of the document (handler.go: the hash of its JSON, quoted, uppercase hex)."""
    return '"' + hashlib.sha512(json_bytes()).hexdigest().upper() + '"'


def negotiate(accept: str) -> str | None:
    """The media type to answer with for an Accept header, or None (406)."""
    offered = [part.split(";")[0].strip().lower() for part in (accept or "").split(",") if part.strip()]
    if not offered:
        return JSON_TYPE
    for media in offered:
        if media in PROTOBUF_TYPES:
            # Both are answered with the dotted form: Go's mime parser rejects the `@` of the older one.
            return PROTOBUF_TYPES[1]
        if media in (JSON_TYPE, "*/*", "application/*"):
            return JSON_TYPE
    return None


# ---- protobuf wire format ------------------------------------------------------------------------------
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s are ten-byte two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes_field(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _string(field: int, value: Any) -> bytes:
    return _bytes_field(field, str(value).encode()) if value not in (None, "") else b""


def _strings(field: int, values: Any) -> bytes:
    return b"".join(_bytes_field(field, str(v).encode()) for v in values or [])


def _bool(field: int, value: Any) -> bytes:
    return _key(field, 0) + b"\x01" if value else b""


def _int64(field: int, value: Any) -> bytes:
    return _key(field, 0) + _varint(int(value)) if value is not None else b""


def _double(field: int, value: Any) -> bytes:
    return _key(field, 1) + struct.pack("<d", float(value)) if value is not None else b""


def _message(field: int, data: bytes, always: bool = False) -> bytes:
    return _bytes_field(field, data) if data or always else b""


def _any(value: Any) -> bytes:
    """gnostic Any: the value as YAML text (JSON is YAML) in field 2."""
    return _string(2, json.dumps(value))


def _extensions(field: int, node: dict[str, Any]) -> bytes:
    """repeated NamedAny vendor_extension: every `x-` key."""
    return b"".join(_message(field, _string(1, key) + _message(2, _any(value), True), True)
                    for key, value in node.items() if key.startswith("x-"))


# ---- gnostic messages --------------------------------------------------------------------------------------
def _schema(node: dict[str, Any]) -> bytes:
    """message Schema."""
    out = [_string(1, node.get("$ref")), _string(2, node.get("format")), _string(3, node.get("title")),
           _string(4, node.get("description"))]
    if "default" in node:
        out.append(_message(5, _any(node["default"]), True))
    out += [_double(6, node.get("multipleOf")), _double(7, node.get("maximum")), _bool(8, node.get("exclusiveMaximum")),
            _double(9, node.get("minimum")), _bool(10, node.get("exclusiveMinimum")), _int64(11, node.get("maxLength")),
            _int64(12, node.get("minLength")), _string(13, node.get("pattern")), _int64(14, node.get("maxItems")),
            _int64(15, node.get("minItems")), _bool(16, node.get("uniqueItems")), _int64(17, node.get("maxProperties")),
            _int64(18, node.get("minProperties")), _strings(19, node.get("required"))]
    out += [_message(20, _any(value), True) for value in node.get("enum") or []]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out.append(_message(21, _message(1, _schema(extra), True), True))
    elif isinstance(extra, bool):
        out.append(_message(21, _key(2, 0) + (b"\x01" if extra else b"\x00"), True))
    kind = node.get("type")
    if kind:
        out.append(_message(22, _strings(1, kind if isinstance(kind, list) else [kind]), True))
    items = node.get("items")
    if isinstance(items, dict):
        out.append(_message(23, _message(1, _schema(items), True), True))
    out += [_message(24, _schema(part), True) for part in node.get("allOf") or []]
    properties = node.get("properties")
    if isinstance(properties, dict):
        named = b"".join(_message(1, _string(1, name) + _message(2, _schema(prop), True), True)
                         for name, prop in properties.items())
        out.append(_message(25, named, True))
    out += [_bool(27, node.get("readOnly")), _extensions(31, node)]
    return b"".join(out)


def _parameter(param: dict[str, Any]) -> bytes:
    """message ParametersItem { Parameter parameter = 1 }: a body or a query/path parameter."""
    where = param.get("in")
    if where == "body":
        body = (_string(1, param.get("description")) + _string(2, param.get("name")) + _string(3, "body")
                + _bool(4, param.get("required")) + _message(5, _schema(param.get("schema") or {}), True))
        return _message(1, _message(1, body, True), True)
    if where == "path":  # PathParameterSubSchema
        sub = (_bool(1, param.get("required")) + _string(2, "path") + _string(3, param.get("description"))
               + _string(4, param.get("name")) + _string(5, param.get("type")) + _bool(19, param.get("uniqueItems")))
        oneof = _message(4, sub, True)
    else:  # QueryParameterSubSchema
        sub = (_bool(1, param.get("required")) + _string(2, "query") + _string(3, param.get("description"))
               + _string(4, param.get("name")) + _string(6, param.get("type")) + _bool(20, param.get("uniqueItems")))
        oneof = _message(3, sub, True)
    return _message(1, _message(2, oneof, True), True)


def _operation(op: dict[str, Any]) -> bytes:
    """message Operation."""
    out = [_strings(1, op.get("tags")), _string(3, op.get("description")), _string(5, op.get("operationId")),
           _strings(6, op.get("produces")), _strings(7, op.get("consumes"))]
    out += [_message(8, _parameter(p), True) for p in op.get("parameters") or []]
    codes = b""
    for code, response in (op.get("responses") or {}).items():
        body = _string(1, response.get("description"))
        if "schema" in response:
            body += _message(2, _message(1, _schema(response["schema"]), True), True)  # SchemaItem.schema
        codes += _message(1, _string(1, code) + _message(2, _message(1, body, True), True), True)
    out += [_message(9, codes, True), _strings(10, op.get("schemes")), _extensions(13, op)]
    return b"".join(out)


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _path_item(item: dict[str, Any]) -> bytes:
    out = [_message(number, _operation(item[method]), True) for method, number in _METHODS.items() if method in item]
    out += [_message(9, _parameter(p), True) for p in item.get("parameters") or []]
    return b"".join(out)


@functools.lru_cache(maxsize=1)
def protobuf_bytes() -> bytes:
    """The document as a gnostic openapi_v2.Document message."""
    doc = document()
    info = _string(1, doc["info"]["title"]) + _string(2, doc["info"]["version"])
    paths = b"".join(_message(2, _string(1, path) + _message(2, _path_item(item), True), True)
                     for path, item in doc["paths"].items())
    definitions = b"".join(_message(1, _string(1, name) + _message(2, _schema(schema), True), True)
                           for name, schema in doc["definitions"].items())
    return _string(1, doc["swagger"]) + _message(2, info, True) + _message(8, paths, True) + _message(9, definitions, True)
