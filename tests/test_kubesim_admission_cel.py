"""CEL equality in kubesim's matchConditions behaves as cel-go's heterogeneous equality.

kube-apiserver evaluates matchConditions with cel-go, where values of different types are
unequal (never an error), numbers compare by value across int/double, and lists and maps
compare element by element. The oracle below states that rule over plain JSON values; the
property checks CEL expressions evaluated by kubesim against it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.sim.apiserver.admission.cel import build_activation, evaluate_conditions

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=8,
)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "map"


def cel_go_equal(a: Any, b: Any) -> bool:
    """The CEL spec's equality over JSON values (bool is not a number, 1 == 1.0)."""
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(cel_go_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(cel_go_equal(a[k], b[k]) for k in a)
    return a == b


def evaluate(expression: str, obj: dict) -> bool | None:
    """True/False as the condition evaluates, None for an evaluation error."""
    result = evaluate_conditions([{"name": "c", "expression": expression}], build_activation(obj, None, {}))
    return None if result.error else result.matches


@settings(max_examples=150, deadline=None)
@given(json_values, json_values)
def test_equality_never_errors_and_follows_cel_go(a, b):
    obj = {"a": a, "b": b}
    expected = cel_go_equal(a, b)
    assert evaluate("object.a == object.b", obj) is expected
    assert evaluate("object.a != object.b", obj) is (not expected)
    assert evaluate("object.b == object.a", obj) is expected


@settings(max_examples=50, deadline=None)
@given(json_values)
def test_every_value_equals_itself_and_differs_from_null_unless_null(value):
    obj = {"v": value}
    assert evaluate("object.v == object.v", obj) is True
    assert evaluate("object.v != null", obj) is (value is not None)


@settings(max_examples=100, deadline=None)
@given(json_values, st.lists(json_values, max_size=3), st.dictionaries(st.text(max_size=3), st.none(), max_size=3))
def test_membership_uses_the_same_equality(item, items, mapping):
    obj = {"item": item, "items": items, "map": mapping}
    assert evaluate("object.item in object.items", obj) is any(cel_go_equal(item, x) for x in items)
    assert evaluate("object.item in object.map", obj) is any(cel_go_equal(item, k) for k in mapping)
