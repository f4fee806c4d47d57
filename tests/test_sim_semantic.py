"""kubesim's semantic equality (apiequality.Semantic.DeepEqual): `equal`, which normalizes only
the entries that differ, answers as comparing the whole normal forms does."""

from __future__ import annotations

import random

from ganggate.sim.apimachinery.semantic import equal, normal

ATOMS = [None, 0, 1, "", "a", False, True, 0.0, [], {}]


def _value(rnd: random.Random, depth: int = 0):
    roll = rnd.random()
    if depth > 3 or roll < 0.4:
        return rnd.choice(ATOMS)
    if roll < 0.7:
        keys = "abc" if rnd.random() < 0.8 else ("status", "value", "a")
        return {rnd.choice(keys): _value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))}
    return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 2))]


def test_equal_agrees_with_comparing_normal_forms_on_random_json():
    rnd = random.Random(11)
    outcomes = set()
    for _ in range(20000):
        a = _value(rnd)
        b = _value(rnd)
        if isinstance(a, dict) and rnd.random() < 0.5:
            b = dict(a)  # a near copy: one entry changed
            for key in list(b)[:1]:
                b[key] = _value(rnd, 2)
        expected = normal(a) == normal(b)
        assert equal(a, b) == expected, (a, b)
        outcomes.add(expected)
    assert outcomes == {True, False}


def test_empty_and_absent_are_equal_but_kept_keys_are_not_dropped():
    assert equal({"nodeSelector": {}, "image": "x"}, {"image": "x"})
    assert equal({"tolerations": None}, {})
    assert not equal({"status": None}, {})  # normal keeps `status` and `value` even when empty
    assert not equal({"a": {"b": 1}}, {"a": {"b": 2}})
