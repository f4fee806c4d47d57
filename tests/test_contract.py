"""The annotation contract (gate/contract.py): examples plus properties against an independent oracle."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.contract import (
    DEFAULT_MAX_POD_NUM,
    GANG_ANNOTATIONS,
    GATE_NAME,
    GROUP_MIN_AVAILABLE,
    GROUP_NAME,
    GROUP_POD_NUM,
    IMMUTABLE_ANNOTATIONS,
    ContractError,
    GangSpec,
    gang_annotations,
    has_gang_annotations,
    has_gate,
    parse_gang,
)


def test_names_of_the_contract():
    assert GROUP_NAME == "scheduling.k8s.io/group-name"
    assert GROUP_POD_NUM == "scheduling.k8s.io/group-pod-num"
    assert GROUP_MIN_AVAILABLE == "scheduling.k8s.io/group-min-available"
    assert GATE_NAME == "scheduling.k8s.io/group-gate"
    assert DEFAULT_MAX_POD_NUM == 10000


def test_not_in_a_gang():
    assert parse_gang(None) is None
    assert parse_gang({}) is None
    assert parse_gang({"team": "vision"}) is None
    assert not has_gang_annotations({"team": "vision"})


def test_valid_gang_defaults_min_available_to_pod_num():
    assert parse_gang({GROUP_NAME: "ddp", GROUP_POD_NUM: "8"}) == GangSpec("ddp", 8, 8)
    spec = parse_gang({GROUP_NAME: "ddp", GROUP_POD_NUM: "8", GROUP_MIN_AVAILABLE: "6"})
    assert spec == GangSpec("ddp", 8, 6) and spec.is_partial
    assert not GangSpec("ddp", 8, 8).is_partial


@pytest.mark.parametrize(
    "annotations, field",
    [
        ({GROUP_NAME: "ddp"}, GROUP_POD_NUM),
        ({GROUP_POD_NUM: "2"}, GROUP_NAME),
        ({GROUP_MIN_AVAILABLE: "2"}, GROUP_NAME),
        ({GROUP_NAME: "Ddp", GROUP_POD_NUM: "2"}, GROUP_NAME),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "10001"}, GROUP_POD_NUM),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "2", GROUP_MIN_AVAILABLE: "3"}, GROUP_MIN_AVAILABLE),
    ],
)
def test_errors_name_the_annotation(annotations, field):
    error = parse_gang(annotations)
    assert isinstance(error, ContractError) and error.annotation == field
    assert error.message().startswith(f"annotation {field}=")


@pytest.mark.parametrize(
    "annotations, field",
    [
        ({GROUP_NAME: "ddp\n", GROUP_POD_NUM: "2"}, GROUP_NAME),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "2\n"}, GROUP_POD_NUM),
        ({GROUP_NAME: "ddp", GROUP_POD_NUM: "2", GROUP_MIN_AVAILABLE: "1\n"}, GROUP_MIN_AVAILABLE),
    ],
)
def test_a_trailing_newline_is_not_a_valid_value(annotations, field):
    # A regex "$" matches before a final newline; the contract must not.
    error = parse_gang(annotations)
    assert isinstance(error, ContractError) and error.annotation == field


def test_error_message_shows_value_and_rule():
    error = parse_gang({GROUP_NAME: "ddp", GROUP_POD_NUM: "0"}, max_pod_num=64)
    assert error.message() == f"annotation {GROUP_POD_NUM}='0': must be a plain decimal integer from 1 to 64"
    missing = parse_gang({GROUP_NAME: "ddp"})
    assert missing.message() == f"annotation {GROUP_POD_NUM}=<absent>: is required when {GROUP_NAME} is set"


def test_gate_and_gang_annotation_helpers():
    assert has_gate({"schedulingGates": [{"name": "x"}, {"name": GATE_NAME}]})
    assert not has_gate({"schedulingGates": [{"name": "x"}]})
    assert not has_gate(None) and not has_gate({"schedulingGates": None})
    assert gang_annotations({GROUP_NAME: "a", "team": "b"}) == {GROUP_NAME: "a"}
    assert gang_annotations(None) == {}


# An independent oracle, written from the words rather than from the implementation.
def oracle_label(value: str) -> bool:
    allowed = set(string.ascii_lowercase + string.digits + "-")
    return (0 < len(value) <= 63 and set(value) <= allowed
            and value[0] != "-" and value[-1] != "-")


def oracle_count(value: str, maximum: int) -> int | None:
    if not value or not all(c in "0123456789" for c in value) or value[0] == "0":
        return None
    number = int(value)
    return number if 1 <= number <= maximum else None


def with_suffix(strategy):
    """Also draw the value with a trailing newline or space appended."""
    return st.one_of(strategy, st.tuples(strategy, st.sampled_from(["\n", " ", "\t"])).map("".join))


labels = with_suffix(st.one_of(st.from_regex(r"[a-z0-9-]{1,65}", fullmatch=True), st.text(max_size=70)))
counts = with_suffix(st.one_of(st.integers(-5, 200).map(str), st.text(alphabet="0123456789 +-e.x", max_size=6),
                               st.text(max_size=4)))


@settings(max_examples=500, deadline=None)
@given(
    name=st.none() | labels,
    num=st.none() | counts,
    min_av=st.none() | counts,
    maximum=st.integers(1, 150),
)
def test_parse_gang_agrees_with_the_oracle(name, num, min_av, maximum):
    annotations = {k: v for k, v in ((GROUP_NAME, name), (GROUP_POD_NUM, num), (GROUP_MIN_AVAILABLE, min_av)) if v is not None}
    result = parse_gang(annotations, maximum)
    if not annotations:
        assert result is None
        return
    pod_num = oracle_count(num, maximum) if num is not None else None
    valid = name is not None and oracle_label(name) and pod_num is not None
    min_available = pod_num
    if valid and min_av is not None:
        min_available = oracle_count(min_av, pod_num)
        valid = min_available is not None
    if valid:
        assert result == GangSpec(name, pod_num, min_available)
    else:
        assert isinstance(result, ContractError)
        assert result.annotation in GANG_ANNOTATIONS
        assert result.annotation in result.message()


@given(st.dictionaries(st.text(max_size=40), st.text(max_size=5)))
def test_gang_annotations_is_the_contract_subset(annotations):
    subset = gang_annotations(annotations)
    assert set(subset) <= set(IMMUTABLE_ANNOTATIONS)
    assert all(annotations[k] == v for k, v in subset.items())
    assert has_gang_annotations(annotations) == bool(subset)
