"""The two topology annotations: what the contract accepts and what the webhook denies."""

from __future__ import annotations

import pytest

from ganggate.contract import (
    GROUP_NAME,
    GROUP_POD_NUM,
    GROUP_TOPOLOGY_PREFERRED,
    GROUP_TOPOLOGY_REQUIRED,
    ContractError,
    GangSpec,
    parse_gang,
    parse_topology,
)

BASE = {GROUP_NAME: "ddp", GROUP_POD_NUM: "4"}


@pytest.mark.parametrize("level", ["example.com/rack", "topology.kubernetes.io/zone", "kubernetes.io/hostname", "rack"])
def test_a_label_key_is_accepted_as_a_level(level):
    assert parse_gang({**BASE, GROUP_TOPOLOGY_REQUIRED: level}) == GangSpec("ddp", 4, 4, topology_required=level)
    assert parse_gang({**BASE, GROUP_TOPOLOGY_PREFERRED: level}) == GangSpec("ddp", 4, 4, topology_preferred=level)
    assert parse_topology({GROUP_TOPOLOGY_REQUIRED: level, GROUP_TOPOLOGY_PREFERRED: level}) == (level, level)


@pytest.mark.parametrize("level", ["", "rack/", "/rack", "Example.com/rack", "a b", "x" * 64, "example.com/-rack"])
def test_a_value_that_is_no_label_key_is_denied_naming_the_annotation(level):
    for key in (GROUP_TOPOLOGY_REQUIRED, GROUP_TOPOLOGY_PREFERRED):
        error = parse_gang({**BASE, key: level})
        assert isinstance(error, ContractError)
        assert error.annotation == key
        assert "node label key" in error.message()


def test_no_topology_annotations_means_no_requirement():
    assert parse_topology(BASE) == (None, None)
