"""`ganggate sim up --topology`: the flags checked, and the controller given the cluster's levels."""

from __future__ import annotations

import argparse

from ganggate.local.cli import check, register
from ganggate.local.up import UpOptions, _topology_settings
from ganggate.sim.topology import parse_shape


def parse(*argv: str) -> argparse.Namespace:
    """`ganggate sim up ARGV` as the real parser reads it."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["up", "--kubeconfig-out", "/nonexistent-dir-for-test/kubeconfig", *argv])


def test_a_bad_topology_is_refused_before_anything_starts():
    assert "BLOCKSxRACKSxNODES" in check(parse("--topology", "4x4"))
    assert "distinct" in check(parse("--topology", "1x1x1", "--rack-label", "ganggate.io/block"))
    assert check(parse("--topology", "2x2x2")) is None


def test_the_controller_gets_the_levels_of_the_cluster():
    assert _topology_settings(UpOptions()) == {}
    shape = parse_shape("2x2x2", rack_label="example.com/rack")
    assert _topology_settings(UpOptions(topology=shape)) == {
        "topology_levels": ("topology.kubernetes.io/zone", "ganggate.io/block", "example.com/rack",
                            "kubernetes.io/hostname")}
