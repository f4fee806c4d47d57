"""Resource quantities as kube-apiserver parses them, held exactly as integer nano-units.

Written from staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go (ParseQuantity,
parseQuantityString, UnmarshalJSON, ScaledValue) and suffix.go (quantitySuffixer.interpret):

- the text is <sign><digits>[.<digits>]<suffix>, where every part may be empty: "", "+", "k" and
  "." scan fine and mean 0 (only the empty string is refused), as long as ParseQuantity stays on
  its int64 fast path; off it ("Pi", "Ei", "e-10") the number is read as written and a number
  without a digit is ErrNumeric; the suffix is decimal SI
  (n u m "" k M G T P E), binary SI (Ki .. Ei) or a decimal exponent (e3, E-2, e+05);
- a parsed quantity is exact down to the nano (10^-9) and rounded *up* (away from zero) there,
  "so that if you want some resources, you get some"; binary SI amounts are capped at
  2^63-1 units;
- JSON numbers are read as their text, and strings are trimmed (UnmarshalJSON, TrimSpace);
- MilliValue() is ceil(q * 1000) and Value() is ceil(q), as ScaledValue documents.

Amounts beyond int64 overflow in Kubernetes' MilliValue/Value; here they saturate instead.
"""

from __future__ import annotations

import re

NANO_PER_UNIT = 10**9
NANO_PER_MILLI = 10**6
MAX_INT64 = 2**63 - 1
SATURATED_NANOS = MAX_INT64 * NANO_PER_UNIT * 10**9  # far past anything int64 can hold

# parseQuantityString's scanner as one expression: sign, integer digits, optional fraction,
# suffix letters from "eEinumkKMGTP", then an optional sign and digits (the exponent).
_SCAN = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
#: The pattern the API server names when it refuses a quantity
#: (k8s.io/apimachinery/pkg/api/resource/quantity.go ErrFormatWrong's message).
QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

# suffix.go: newSuffixer's decimal and binary tables (base, exponent).
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_GO_INT = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64) syntax


class QuantityError(ValueError):
    """Not a quantity: ParseQuantity returns ErrFormatWrong, ErrSuffix or ErrNumeric."""


def _interpret(suffix: str) -> tuple[int, int, bool] | None:
    """quantitySuffixer.interpret: (base, exponent, binary) or None for an unknown suffix."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], False
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE" and _GO_INT.fullmatch(suffix[1:]):
        parsed = int(suffix[1:])
        # The exponent becomes an int32 scale that is negated later: past +-MaxInt32 it is
        # refused (quantity_test.go TestInterpretExponentInt32Bounds; older releases wrapped it).
        if abs(parsed) <= 2**31 - 1:
            return 10, parsed, False
    return None


def _leaves_fast_path(whole: str, fraction: str, binary: bool, exponent: int) -> bool:
    """Whether ParseQuantity reads the number with inf.Dec.SetString instead of strconv.ParseInt.

    quantity.go: parseQuantityString makes an empty numerator "0"; the fast path needs precision
    >= 0 (decimal: 18 - len(num) - len(denom); binary: 15 - len(num) - int(exponent*3/10) - 1, and
    no fraction) and, for decimals, a scale (exponent - len(denom)) of Nano (-9) or more.
    """
    num = len(whole.lstrip("0") or "0")
    if binary:
        return bool(fraction) or 15 - num - int(exponent * 3 / 10) - 1 < 0
    return 18 - num - len(fraction) < 0 or exponent - len(fraction) < -9


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def _nanos(digits: int, fraction_digits: int, base: int, exponent: int) -> int:
    """ceil(digits / 10^fraction_digits * base^exponent * 10^9) for digits >= 0, saturating."""
    if digits == 0:
        return 0
    if base == 2:
        return _ceil_div(digits * 2**exponent * NANO_PER_UNIT, 10**fraction_digits)
    shift = exponent - fraction_digits + 9  # the power of ten that turns digits into nanos
    if shift >= 0:
        if shift + len(str(digits)) > 60:
            return SATURATED_NANOS
        return digits * 10**shift
    if -shift > len(str(digits)):
        return 1  # a positive amount below one nano rounds up to one nano
    return _ceil_div(digits, 10**-shift)


def parse_nanos(value: str | int | float) -> int:
    """Parse a quantity (a JSON string or number) into nano-units, rounded up away from zero.

    Raises QuantityError where kube-apiserver would refuse the value.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"not a quantity: {value!r}")
    text = value.strip() if isinstance(value, str) else repr(value)
    if not text:
        raise QuantityError("quantities may not be empty")
    match = _SCAN.fullmatch(text)
    if match is None:
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    sign, whole, fraction, suffix = match.groups()
    fraction = fraction or ""
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise QuantityError(f"unable to parse quantity's suffix: {value!r}")
    base, exponent, binary = interpreted
    if not (whole + fraction) and _leaves_fast_path(whole, fraction, binary, exponent):
        # inf.Dec.SetString on "", "+" or "." reads no digit: ErrNumeric.
        raise QuantityError(f"unable to parse numeric part of quantity: {value!r}")
    nanos = _nanos(int((whole + fraction) or "0"), len(fraction), base, exponent)
    if binary and nanos > MAX_INT64 * NANO_PER_UNIT:
        nanos = MAX_INT64 * NANO_PER_UNIT  # "The max is just a simple cap."
    return -nanos if sign == "-" else nanos


def milli_value(nanos: int) -> int:
    """Quantity.MilliValue(): ceil(q * 1000), the unit the scheduler counts cpu in."""
    return _ceil_div(nanos, NANO_PER_MILLI)


def value(nanos: int) -> int:
    """Quantity.Value(): ceil(q), the unit the scheduler counts memory and everything else in."""
    return _ceil_div(nanos, NANO_PER_UNIT)


def parse_milli(quantity: str | int | float) -> int:
    """MilliValue() of a parsed quantity."""
    return milli_value(parse_nanos(quantity))
