"""kubesim's quantity parser against the cases of Kubernetes' own quantity_test.go.

Cases come from staging/src/k8s.io/apimachinery/pkg/api/resource/quantity_test.go
(TestQuantityParse, TestParseQuantityString, TestInterpretExponentInt32Bounds); the expected
values are the test's decQuantity(value, scale) written out in nano-units.
"""

from __future__ import annotations

import pytest

from ganggate.sim.apimachinery.quantity import QuantityError, milli_value, parse_milli, parse_nanos, value
from ganggate.sim.apiserver import validation

N = 10**9  # nano-units per unit
MAX_INT64 = 2**63 - 1

PARSED = [
    # zeroes, every suffix
    ("0", 0), ("0n", 0), ("0u", 0), ("0m", 0), ("0Ki", 0), ("0k", 0), ("0Mi", 0), ("0M", 0),
    ("0Gi", 0), ("0G", 0), ("0Ti", 0), ("0T", 0),
    # binary suffixes
    ("1Ki", 1024 * N), ("8Ki", 8 * 1024 * N), ("7Mi", 7 * 2**20 * N), ("6Gi", 6 * 2**30 * N),
    ("5Ti", 5 * 2**40 * N), ("4Pi", 4 * 2**50 * N), ("3Ei", 3 * 2**60 * N), ("100Ti", 100 * 2**40 * N),
    # decimal suffixes
    ("5n", 5), ("4u", 4000), ("3m", 3 * 10**6), ("9", 9 * N), ("8k", 8000 * N), ("50k", 50000 * N),
    ("7M", 7 * 10**6 * N), ("6G", 6 * 10**9 * N), ("2P", 2 * 10**15 * N), ("1E", 10**18 * N),
    # decimal exponents
    ("1E-3", 10**6), ("1e3", 1000 * N), ("1E6", 10**6 * N), ("1e9", 10**9 * N), ("1E18", 10**18 * N),
    ("100.035k", 100035 * N),
    # things that look like floating point
    ("0.001", 10**6), ("0.0005k", N // 2), ("0.5", N // 2), ("0.00050k", N // 2), ("0.5e0", N // 2),
    ("0.5e-2", 5 * 10**6), ("10.035M", 10035000 * N), ("1.2e3", 1200 * N), ("1.3E+6", 1300000 * N),
    ("1.40e9", 14 * 10**8 * N), ("9.01", 9010000000), ("8.1k", 8100 * N), ("6.987654321G", 6987654321 * N),
    ("2.5P", 25 * 10**14 * N), ("1.01E", 101 * 10**16 * N),
    # things that saturate or round up to the nano
    ("3.001n", 4), ("1.1E-9", 2), ("0.0000000001", 1), ("0.0000000005", 1), ("0.5e-9", 1), ("0.9n", 1),
    ("0.00000012345", 124), ("0.00000012354", 124), ("9Ei", MAX_INT64 * N), ("9223372036854775807Ki", MAX_INT64 * N),
    ("12E", 12 * 10**18 * N),
    # fractional binary amounts
    ("100.035Ki", 10243584 * N // 100), ("0.5Mi", 2**19 * N), ("0.05Gi", 53687091200000000),
    ("0.025Ti", 27487790694400000000),
    # "things written by trolls"
    ("0.000000000001Ki", 2), (".001", 10**6), (".0001k", N // 10), ("1.", N), ("1.G", 10**9 * N),
    # what the scanner lets through with an empty number (TestParseQuantityString)
    (".", 0), ("-.", 0), ("+", 0), ("k", 0),
    # signs
    ("-1.025Ti", -(1025 * 2**40 * N // 1000)), ("+3m", 3 * 10**6),
    # JSON numbers are read as their text; strings are trimmed (UnmarshalJSON)
    (2, 2 * N), (0.5, N // 2), (1e-05, 10**4), (" 100m ", 10**8),
]


@pytest.mark.parametrize(("text", "nanos"), PARSED, ids=[repr(t) for t, _ in PARSED])
def test_parses_like_quantity_test_go(text, nanos):
    assert parse_nanos(text) == nanos


@pytest.mark.parametrize(
    "text",
    ["", "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", "1e4294967297",
     "E2147483648", "1e", "1K", "1ki", "0x10", "1m3", "1 m", True, None, [1]],
)
def test_refuses_what_parse_quantity_refuses(text):
    with pytest.raises(QuantityError):
        parse_nanos(text)


def test_exponent_bounds_follow_int32():
    """TestInterpretExponentInt32Bounds: +-MaxInt32 are accepted, one past is refused."""
    assert parse_nanos("0e2147483647") == 0
    assert parse_nanos("1e-2147483647") == 1  # a positive amount below a nano rounds up to one
    with pytest.raises(QuantityError):
        parse_nanos("1e2147483648")
    with pytest.raises(QuantityError):
        parse_nanos("1E-2147483648")


def test_milli_value_and_value_round_up():
    """MilliValue() is ceil(q*1000), Value() is ceil(q) (quantity.go ScaledValue)."""
    assert milli_value(parse_nanos("100m")) == 100
    assert milli_value(parse_nanos("0.1m")) == 1
    assert milli_value(parse_nanos("1n")) == 1
    assert value(parse_nanos("100m")) == 1  # the "memory: 100m" gotcha: one byte, not a tenth
    assert value(parse_nanos("1.5Gi")) == 1610612736
    assert parse_milli("1.5") == 1500
    assert milli_value(parse_nanos("-1.5m")) == -1


def test_validation_refuses_a_negative_quantity_that_rounds_to_zero():
    """ValidateNonnegativeQuantity compares the exact value: -0.5m is negative, not 0."""
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"restartPolicy": "Always",
           "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "-0.5m"}}}]}}
    messages = [c.message for c in validation.validate_pod(pod)]
    assert any("must be greater than or equal to 0" in m for m in messages), messages


def test_validation_compares_request_and_limit_exactly():
    """validateResourceRequirements uses Quantity.Cmp: 1.0005m is more than 1.0001m."""
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"restartPolicy": "Always",
           "containers": [{"name": "c", "image": "x", "resources": {
               "requests": {"cpu": "1.0005m"}, "limits": {"cpu": "1.0001m"}}}]}}
    messages = [c.message for c in validation.validate_pod(pod)]
    assert any("must be less than or equal to cpu limit" in m for m in messages), messages
