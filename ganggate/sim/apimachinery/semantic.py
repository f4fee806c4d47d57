"""Semantic equality of API objects, as apiequality.Semantic.DeepEqual (pure).

k8s.io/apimachinery/pkg/api/equality: the real server compares typed structs, where an empty
map, list or string, a false and a zero are the same as an absent field. `normal` maps a JSON
value to a form where plain `==` gives that answer. Used by the pod update rules, the pod
strategy (does a spec change bump the generation?) and the API server (did a webhook
configuration's hooks change?).
"""

from __future__ import annotations

from typing import Any

_EMPTY: tuple[Any, ...] = (None, {}, [], "", False, 0)
_KEPT = ("status", "value")  # keys kept even when empty


def normal(value: Any) -> Any:
    """Semantic equality as apiequality.Semantic.DeepEqual: empty and absent are the same."""
    if isinstance(value, dict):
        out = {k: normal(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in _EMPTY or k in _KEPT}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


def equal(a: Any, b: Any) -> bool:
    """normal(a) == normal(b), normalizing only the entries of two maps that differ: a spec
    that changed in one field costs that field, not the whole object."""
    if a == b:
        return True
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return normal(a) == normal(b)
    for key in a.keys() | b.keys():
        in_a, in_b = key in a, key in b
        if in_a and in_b and a[key] == b[key]:
            continue  # the same value normalizes alike, and is kept or dropped alike
        left = normal(a[key]) if in_a else None
        right = normal(b[key]) if in_b else None
        kept_left = in_a and (left not in _EMPTY or key in _KEPT)
        kept_right = in_b and (right not in _EMPTY or key in _KEPT)
        if kept_left != kept_right or (kept_left and left != right):
            return False
    return True
