"""The one `ganggate` command: every subcommand is there and answers --help."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from ganggate.cli import build_parser

EXPECTED = {"webhook", "certs generate", "certs inject", "controller", "status", "plan", "sim serve", "sim up", "demo", "replay"}


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every runnable subcommand path, e.g. 'certs generate', with its parser."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(leaf_commands(sub, prefix + (name,)))
            return found
    found[" ".join(prefix)] = parser
    return found


def test_every_component_registers_its_commands() -> None:
    assert EXPECTED <= set(leaf_commands(build_parser()))


@pytest.mark.parametrize("command", sorted(EXPECTED))
def test_every_command_explains_itself(command: str) -> None:
    result = subprocess.run([sys.executable, "-m", "ganggate", *command.split(), "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ganggate " + command)
    assert len(result.stdout.splitlines()) > 3


def test_no_command_prints_the_overview_and_fails() -> None:
    result = subprocess.run([sys.executable, "-m", "ganggate"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "webhook" in result.stdout and "controller" in result.stdout
