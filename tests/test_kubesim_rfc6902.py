"""kubesim's RFC 6902 applier (ganggate/sim/apiserver/rfc6902.py) against the `jsonpatch` library it
replaced: on random documents and patches, failing ones included, the same patched document (same
values, same key order) or the same error message, which users see as a PATCH's 422 cause or a
webhook's internal error."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver import rfc6902
from ganggate.sim.apiserver.patch import JSON_PATCH, apply_patch

# What kubesim's callers catch from the library (apiserver/patch.py); anything else would be a 500.
CAUGHT = (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError)

KEYS = st.sampled_from(["a", "b", "spec", "0", "1", "01", "-", "~", "/", "a/b", "~1", "~0x", ""])
SCALARS = (st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, 1.0, 2.5])
           | st.sampled_from(["", "a", "-", "0", "x/y"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=14)
OPS = ["add", "remove", "replace", "move", "copy", "test"]


def pointers(doc: Any, prefix: str = "") -> list[str]:
    """Every location in doc, as a JSON pointer."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += pointers(value, f"{prefix}/{key.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += pointers(value, f"{prefix}/{index}")
    return found


@st.composite
def a_path(draw: st.DrawFn, doc: Any) -> Any:
    """Mostly a location in doc, or one step beside or beyond it; sometimes a malformed pointer."""
    base = draw(st.sampled_from(pointers(doc)))
    how = draw(st.integers(0, 19))
    if how <= 9:
        return base
    if how <= 15:
        step = draw(st.sampled_from(["-", "0", "1", "2", "9", "01", "a", "b", "x", "~1", "~0", "", "-1", "1e0"]))
        return f"{base}/{step}"
    if how <= 18:
        return base.rsplit("/", 1)[0] + "/" + draw(st.sampled_from(["-", "3", "a", "zz"])) if base else "/-"
    return draw(st.sampled_from(["a", "~2", "/a~", "/~", None, 3, ["/a"], "/a/~01", "//", "/-/a", "/0/-"]))


@st.composite
def an_operation(draw: st.DrawFn, doc: Any) -> Any:
    if draw(st.integers(0, 80)) == 40:  # (a middle value: hypothesis favours the ends)
        return draw(st.sampled_from(["add", 7, None, ["op"], {}]))
    operation: dict[str, Any] = {}
    if draw(st.integers(0, 60)) != 30:
        operation["op"] = draw(st.sampled_from(OPS)) if draw(st.integers(0, 60)) != 30 else draw(
            st.sampled_from(["bogus", "ADD", 1, None, "append"]))
    if draw(st.integers(0, 60)) != 30:
        operation["path"] = draw(a_path(doc))
    if operation.get("op") in ("move", "copy") and draw(st.integers(0, 30)) != 15 or draw(st.integers(0, 5)) == 3:
        operation["from"] = draw(a_path(doc))
    if draw(st.integers(0, 30)) != 15:
        if draw(st.booleans()) and pointers(doc):
            # A value from the document itself, so that `test` often holds.
            try:
                operation["value"] = copy.deepcopy(jsonpatch.JsonPointer(draw(st.sampled_from(pointers(doc)))).resolve(doc))
            except jsonpatch.JsonPointerException:
                operation["value"] = None
        else:
            operation["value"] = draw(VALUES)
    return operation


@st.composite
def a_case(draw: st.DrawFn) -> tuple[Any, list[Any]]:
    doc = draw(VALUES | st.dictionaries(KEYS, VALUES, max_size=4))
    operations = []
    current = doc
    for _ in range(draw(st.integers(0, 4))):
        operation = draw(an_operation(current))
        operations.append(operation)
        try:  # the next operation's paths are drawn from the document as patched so far
            current = jsonpatch.JsonPatch([operation]).apply(current)
        except Exception:  # any failure: the next paths come from the last good document
            pass
    return doc, operations


def outcome_of_library(doc: Any, operations: list[Any]) -> tuple[str, str]:
    try:
        result = jsonpatch.JsonPatch(operations).apply(copy.deepcopy(doc), in_place=True)
    except CAUGHT as exc:
        return "error", str(exc)
    return "ok", json.dumps(result)


def outcome_of_ours(doc: Any, operations: list[Any]) -> tuple[str, str]:
    try:
        result = rfc6902.apply(copy.deepcopy(doc), operations)
    except rfc6902.PatchError as exc:
        return "error", str(exc)
    return "ok", json.dumps(result)


HAND_PICKED = [
    ({"a": [1, 2]}, [{"op": "test", "path": "/a/-", "value": 1}]),  # "-" resolved for a test
    ({"a": [1, 2]}, [{"op": "add", "path": "/a/-/b", "value": 1}]),  # "-" walked through
    ({"a": [1, 2]}, [{"op": "remove", "path": "/a/-"}]),
    ({"a": [1, 2]}, [{"op": "replace", "path": "/a/-", "value": 0}]),
    ({"a": [1, 2]}, [{"op": "move", "from": "/a/-", "path": "/b"}]),
    ({"a": [1, 2]}, [{"op": "copy", "from": "/a/5", "path": "/b"}]),
    ({"a": {"b": 1}}, [{"op": "copy", "from": "/a/c", "path": "/b"}]),
    ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}]),
    ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a"}]),
    ({"a": {"b": 1}}, [{"op": "move", "from": "", "path": ""}]),
    ({"a": 1}, [{"op": "test", "path": "/a", "value": True}]),
    ({"a": "s"}, [{"op": "add", "path": "/a/0", "value": 1}]),
    ({"a": 1}, [{"op": "add", "path": "/a/0", "value": 1}]),
    ({"a": None}, [{"op": "test", "path": "/a/x", "value": 1}]),
    ({"a": [0]}, [{"op": "add", "path": "/a/2", "value": 1}]),
    ({"a": [0]}, [{"op": "add", "path": "/a/01", "value": 1}]),
    ({"a": 1}, [{"op": "remove", "path": "/b"}, {"op": "bogus", "path": "/a"}]),  # checked before applied
    ({"a": 1}, [{"op": "add", "path": "", "value": [1]}]),
    ({"a": 1}, [{"op": "remove", "path": ""}]),
    ({"a": 1}, ["add"]),
    ({"a": 1}, [{"op": "add", "path": "/b"}]),
    ({"a": 1}, [{"op": "move", "path": "/b"}]),
    ({"a": 1}, [{"op": "copy", "from": 5, "path": "/b"}]),
    ({"a": 1}, [{"op": "copy", "from": "a", "path": "/b"}]),
    ({"a~b": {"c/d": 1}}, [{"op": "copy", "from": "/a~0b/c~1d", "path": "/e~1f"}]),
]


@pytest.mark.parametrize(("doc", "operations"), HAND_PICKED)
def test_hand_picked_cases_match_the_library(doc, operations):
    assert outcome_of_ours(doc, operations) == outcome_of_library(doc, operations)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(a_case())
@example(({"spec": {"schedulingGates": [{"name": "g"}]}},
          [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": "g"},
           {"op": "remove", "path": "/spec/schedulingGates/0"}]))
def test_random_patches_match_the_library(case):
    doc, operations = case
    sent = json.dumps(operations)
    ours = outcome_of_ours(doc, operations)
    assert ours == outcome_of_library(doc, operations)
    assert json.dumps(operations) == sent  # the patch itself is never changed


def test_a_patch_that_does_not_apply_is_a_422_with_the_same_cause():
    operations = [{"op": "test", "path": "/metadata/uid", "value": "u2"}]
    with pytest.raises(errors.ApiError) as info:
        apply_patch(JSON_PATCH, {"metadata": {"uid": "u1"}}, operations, in_place=True)
    assert info.value.code == 422
    assert info.value.status()["details"]["causes"][0]["message"] == (
        "u1 (<class 'str'>) is not equal to tested value u2 (<class 'str'>)")


def test_the_original_is_kept_unless_patched_in_place():
    original = {"metadata": {"labels": {"a": "1"}}}
    patched = apply_patch(JSON_PATCH, original, [{"op": "add", "path": "/metadata/labels/b", "value": "2"}])
    assert original == {"metadata": {"labels": {"a": "1"}}}
    assert patched == {"metadata": {"labels": {"a": "1", "b": "2"}}}
