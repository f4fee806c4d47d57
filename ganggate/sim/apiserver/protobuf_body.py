"""Request bodies in Kubernetes' protobuf encoding (Content-Type application/vnd.kubernetes.protobuf).

client-go's typed clients send built-in objects as protobuf (kubectl 1.36's `kubectl create namespace`
does: client-go rest.Request.UseProtobufAsDefaultIfPreferred), and kube-apiserver decodes any built-in
kind (k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go Serializer.Decode: the 4-byte
prefix "k8s\\x00", then a runtime.Unknown whose `raw` is the object's message, field numbers from each
group's generated.proto). kubesim decodes the kinds kubectl's typed clients write to it; any other kind,
or a field it does not decode, is refused with 415 rather than dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PROTOBUF = "application/vnd.kubernetes.protobuf"
PREFIX = b"k8s\x00"


class Undecodable(ValueError):
    """A protobuf body kubesim does not decode (its kind or one of its fields)."""


Fields = dict[int, list[Any]]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise Undecodable("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def fields(data: bytes) -> Fields:
    """A message's fields by number: varints as ints, length-delimited ones as bytes (wire types 0 and 2)."""
    out: Fields = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise Undecodable("truncated field")
            value, at = data[at:at + size], at + size
        else:
            raise Undecodable(f"wire type {wire} of field {number}")
        out.setdefault(number, []).append(value)
    return out


def _text(values: list[Any]) -> str:
    return values[-1].decode() if values else ""


def _map(values: list[Any]) -> dict[str, str]:
    """map<string, string>: repeated entries with the key in field 1, the value in field 2."""
    entries = (fields(v) for v in values)
    return {_text(e.get(1, [])): _text(e.get(2, [])) for e in entries}


def _refuse_unknown(message: Fields, known: set[int], what: str) -> None:
    """gogo writes every non-pointer field, empty ones too: only a field with content is refused."""
    for number, values in message.items():
        if number not in known and any(v not in (0, b"") and fields_nonempty(v) for v in values):
            raise Undecodable(f"field {number} of {what}")


def fields_nonempty(value: Any) -> bool:
    """An empty nested message (a zero metav1.Time, an empty struct) holds nothing but empty fields."""
    if isinstance(value, int):
        return value != 0
    try:
        nested = fields(value)
    except Undecodable:
        return bool(value)
    return bool(value) and (not nested or any(fields_nonempty(v) for vs in nested.values() for v in vs))


# k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto message ObjectMeta.
_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}


def object_meta(data: bytes) -> dict[str, Any]:
    message = fields(data)
    # selfLink (4), creationTimestamp (8), deletionTimestamp (9) and managedFields (17) the server sets.
    _refuse_unknown(message, set(_META_STRINGS) | {4, 7, 8, 9, 11, 12, 14, 17}, "ObjectMeta")
    meta: dict[str, Any] = {key: _text(message[n]) for n, key in _META_STRINGS.items() if _text(message.get(n, []))}
    if message.get(7, [0])[-1]:
        meta["generation"] = message[7][-1]
    for number, key in ((11, "labels"), (12, "annotations")):
        if message.get(number):
            meta[key] = _map(message[number])
    if message.get(14):
        meta["finalizers"] = [v.decode() for v in message[14]]
    return meta


def namespace(data: bytes) -> dict[str, Any]:
    """k8s.io/api/core/v1/generated.proto message Namespace {metadata = 1, spec = 2, status = 3}."""
    message = fields(data)
    _refuse_unknown(message, {1, 2, 3}, "Namespace")
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": object_meta(b"".join(message.get(1, [])))}
    spec = fields(b"".join(message.get(2, [])))
    _refuse_unknown(spec, {1}, "NamespaceSpec")
    if spec.get(1):
        obj["spec"] = {"finalizers": [v.decode() for v in spec[1]]}
    # status (phase, conditions) is the server's to set on create.
    return obj


DECODERS: dict[tuple[str, str], Callable[[bytes], dict[str, Any]]] = {
    ("v1", "Namespace"): namespace,
}


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body holds, as the JSON a client would have sent; Undecodable if not one of DECODERS."""
    if not body.startswith(PREFIX):
        raise Undecodable("no k8s protobuf prefix")
    # k8s.io/apimachinery/pkg/runtime/generated.proto: Unknown {typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2}.
    unknown = fields(body[len(PREFIX):])
    type_meta = fields(b"".join(unknown.get(1, [])))
    api_version, kind = _text(type_meta.get(1, [])), _text(type_meta.get(2, []))
    decoder = DECODERS.get((api_version, kind))
    if decoder is None:
        raise Undecodable(f"kind {api_version}/{kind}")
    return decoder(b"".join(unknown.get(2, [])))
