"""RFC 6902 JSON Patch applied to a decoded JSON document, in place.

kube-apiserver applies JSON patches with gopkg.in/evanphx/json-patch: the body of a PATCH with
application/json-patch+json (k8s.io/apiserver/pkg/endpoints/handlers/patch.go, jsonPatcher.applyJSPatch)
and a mutating webhook's answer (k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go,
callAttrMutatingHook: jsonpatch.DecodePatch, then Apply). kubesim's checks, their order and its
error texts (which users see as a 422's cause or in a webhook's internal error) are those of the
Python `jsonpatch` library 1.48, word for word: tests/test_kubesim_rfc6902.py compares the two on
random documents and patches, failing ones included. evanphx/json-patch words its errors
differently (not modelled). Each pointer is parsed once, and nothing is deep-copied but the values
an operation inserts.

Documents, patches and values are JSON values as json.loads gives them (dict, list, str, int,
float, bool, None).
"""

from __future__ import annotations

import re
from typing import Any

from ganggate.sim.apiserver.watch import clone

_INDEX = re.compile("0|[1-9][0-9]*")  # an array index (jsonpointer's _RE_ARRAY_INDEX)
_BAD_ESCAPE = re.compile("(~[^01]|~$)")
_OPS = ("remove", "add", "replace", "move", "test", "copy")
_END_OF_LIST_TYPE = "<class 'jsonpointer.EndOfList'>"  # the library's name for the type of "-" resolved


class PatchError(Exception):
    """The patch is malformed or does not apply; str() is the message users see."""


class TestFailed(PatchError):
    """A `test` operation failed."""

    __test__ = False  # not a pytest class


class _EndOfList:
    """What "-" of an array resolves to when it is walked (jsonpointer's EndOfList)."""

    __slots__ = ("list_",)

    def __init__(self, list_: list[Any]) -> None:
        self.list_ = list_

    def __repr__(self) -> str:
        return f"EndOfList({self.list_!r})"


def _parse(pointer: Any, invalid: str) -> list[str]:
    """The unescaped parts of a JSON pointer (RFC 6901)."""
    if not isinstance(pointer, str):
        raise PatchError(invalid)
    if "~" not in pointer:  # nothing escaped (most paths)
        if not pointer:
            return []
        if pointer[0] != "/":
            raise PatchError("Location must start with /")
        return pointer[1:].split("/")
    bad = _BAD_ESCAPE.search(pointer)
    if bad:
        raise PatchError(f"Found invalid escape {bad.group()}")
    parts = pointer.split("/")
    if parts.pop(0) != "":
        raise PatchError("Location must start with /")
    return [p.replace("~1", "/").replace("~0", "~") if "~" in p else p for p in parts]


def _get_part(doc: Any, part: Any) -> Any:
    """The next step in the type the container needs (jsonpointer get_part)."""
    if isinstance(doc, dict):
        return part
    if isinstance(doc, str):
        raise PatchError(f"Cannot apply token '{part}' to non-container type {type(doc)}")
    if isinstance(doc, list):
        if part == "-":
            return part
        if not _INDEX.fullmatch(str(part)):
            raise PatchError(f"'{part}' is not a valid sequence index")
        return int(part)
    kind = _END_OF_LIST_TYPE if isinstance(doc, _EndOfList) else type(doc)
    raise PatchError(f"Document '{kind}' does not support indexing, must be mapping/sequence or support __getitem__")


def _walk(doc: Any, part: str) -> Any:
    step = _get_part(doc, part)
    if isinstance(doc, list):
        if step == "-":
            return _EndOfList(doc)
        try:
            return doc[step]
        except IndexError:
            raise PatchError(f"index '{step}' is out of bounds") from None
    if step not in doc:
        raise PatchError(f"member '{step}' not found in {doc}")
    return doc[step]


def _to_last(doc: Any, parts: list[str]) -> tuple[Any, Any]:
    """The container of the target and the target's key or index; (doc, None) for the root."""
    if not parts:
        return doc, None
    for part in parts[:-1]:
        doc = doc[part] if type(doc) is dict and part in doc else _walk(doc, part)  # (a member: the common step)
    return doc, parts[-1] if type(doc) is dict else _get_part(doc, parts[-1])


def _value(operation: dict[str, Any]) -> Any:
    if "value" not in operation:
        raise PatchError("The operation does not contain a 'value' member")
    return operation["value"]


def _from(operation: dict[str, Any]) -> list[str]:
    if "from" not in operation:
        raise PatchError("The operation does not contain a 'from' member")
    return _parse(operation["from"], "Invalid 'from'")


def _remove(doc: Any, parts: list[str]) -> Any:
    container, part = _to_last(doc, parts)
    if part is None:
        raise PatchError("can't remove the whole document")
    if isinstance(container, list) and not isinstance(part, int):
        raise PatchError(f"invalid array index '{part}'")
    try:
        del container[part]
    except (KeyError, IndexError):
        raise PatchError(f"can't remove a non-existent object '{part}'") from None
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    container, part = _to_last(doc, parts)
    if part is None:
        return value  # the whole document replaced, whatever its type
    if isinstance(container, list):
        if part == "-":
            container.append(value)
        elif part > len(container):
            raise PatchError("can't insert outside of list")
        else:
            container.insert(part, value)
    else:
        container[part] = value
    return doc


def _replace(doc: Any, parts: list[str], value: Any) -> Any:
    container, part = _to_last(doc, parts)
    if part is None:
        return value
    if isinstance(container, list):
        if part == "-":
            raise PatchError("'path' with '-' can't be applied to 'replace' operation")
        if part >= len(container):
            raise PatchError("can't replace outside of list")
    elif part not in container:
        raise PatchError(f"can't replace a non-existent object '{part}'")
    container[part] = value
    return doc


def _source(doc: Any, from_parts: list[str]) -> tuple[Any, Any]:
    """The container and key of a `from` that has to exist ("-" of an array does not)."""
    container, part = _to_last(doc, from_parts)
    if part == "-" and isinstance(container, list):
        raise PatchError("invalid array index '-'")
    return container, part


def _move(doc: Any, operation: dict[str, Any], parts: list[str]) -> Any:
    from_parts = _from(operation)
    if parts != from_parts and parts[:len(from_parts)] == from_parts:
        raise PatchError("Cannot move values into their own children")
    container, part = _source(doc, from_parts)
    if part is None:
        return doc  # the whole document onto itself
    try:
        value = container[part]
    except (KeyError, IndexError) as exc:
        raise PatchError(str(exc)) from None
    if parts == from_parts:
        return doc
    return _add(_remove(doc, from_parts), parts, value)  # detached: no copy needed


def _copy(doc: Any, operation: dict[str, Any], parts: list[str]) -> Any:
    container, part = _source(doc, _from(operation))
    try:
        value = clone(container if part is None else container[part])
    except (KeyError, IndexError) as exc:
        raise PatchError(str(exc)) from None
    return _add(doc, parts, value)


def _test(doc: Any, operation: dict[str, Any], parts: list[str]) -> Any:
    try:
        container, part = _to_last(doc, parts)
        found = container if part is None else _walk(container, parts[-1])
    except PatchError as exc:
        raise TestFailed(str(exc)) from None
    value = _value(operation)
    if not json_equal(found, value):
        kind = _END_OF_LIST_TYPE if isinstance(found, _EndOfList) else type(found)
        raise TestFailed(f"{found} ({kind}) is not equal to tested value {value} ({type(value)})")
    return doc


def json_equal(first: Any, second: Any) -> bool:
    """Equality as RFC 6902 section 4.6 has it: numbers by value, true and false only equal
    themselves (Python's True == 1 is not), arrays and objects member by member."""
    if isinstance(first, bool) or isinstance(second, bool):
        return isinstance(first, bool) and isinstance(second, bool) and first == second
    if isinstance(first, dict) and isinstance(second, dict):
        return len(first) == len(second) and all(key in second and json_equal(first[key], second[key]) for key in first)
    if isinstance(first, list) and isinstance(second, list):
        return len(first) == len(second) and all(json_equal(a, b) for a, b in zip(first, second, strict=True))
    return bool(first == second)


def check(operations: list[Any]) -> list[list[str]]:
    """Every operation's parsed `path`, or the first malformed operation's error (the whole patch is
    checked before anything applies)."""
    paths = []
    for operation in operations:
        if isinstance(operation, (str, bytes)):
            raise PatchError("Document is expected to be sequence of operations, got a sequence of strings.")
        if not isinstance(operation, dict):
            raise PatchError("Operation must be an object")
        if "op" not in operation:
            raise PatchError("Operation does not contain 'op' member")
        op = operation["op"]
        if not isinstance(op, (str, bytes)):
            raise PatchError("Operation's op must be a string")
        if op not in _OPS:
            raise PatchError(f"Unknown operation {op!r}")
        if "path" not in operation:
            raise PatchError("Operation must have a 'path' member")
        paths.append(_parse(operation["path"], "Invalid 'path'"))
    return paths


def apply(doc: Any, operations: list[Any]) -> Any:
    """The patched document: `doc` changed in place (the caller copies it first if it must stay),
    or a new value when an operation replaces the whole document. Raises PatchError; `doc` may
    then be half patched."""
    for operation, parts in zip(operations, check(operations), strict=True):
        op = operation["op"]
        if op == "add":
            doc = _add(doc, parts, clone(_value(operation)))
        elif op == "remove":
            doc = _remove(doc, parts)
        elif op == "replace":
            doc = _replace(doc, parts, clone(_value(operation)))
        elif op == "test":
            doc = _test(doc, operation, parts)
        elif op == "move":
            doc = _move(doc, operation, parts)
        else:
            doc = _copy(doc, operation, parts)
    return doc
