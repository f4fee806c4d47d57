"""Semantic equality of API objects, as apiequality.Semantic.DeepEqual (pure).

k8s.io/apimachinery/pkg/api/equality: the real server compares typed structs, where an empty
map, list or string, a false and a zero are the same as an absent field. `normal` maps a JSON
value to a form where plain `==` gives that answer. Used by the pod update rules, the pod
strategy (does a spec change bump the generation?) and the API server (did a webhook
configuration's hooks change?).
"""

from __future__ import annotations

from typing import Any


def normal(value: Any) -> Any:
    """Semantic equality as apiequality.Semantic.DeepEqual: empty and absent are the same."""
    if isinstance(value, dict):
        out = {k: normal(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [], "", False, 0) or k in ("status", "value")}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value
