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


# ---- mistakes: no abbreviations, the sub-command's own usage, the nearest flag ------------------


def ganggate(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ganggate", *argv], capture_output=True, text=True, timeout=60)


def test_no_parser_takes_an_abbreviated_flag() -> None:
    for command, parser in leaf_commands(build_parser()).items():
        assert parser.allow_abbrev is False, command
    result = ganggate("sim", "up", "--node", "2")  # not --nodes 2
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith("usage: ganggate sim up")
    assert result.stderr.splitlines()[-1] == (
        "ganggate sim up: error: unrecognized arguments: --node 2 (did you mean --nodes?)")


def test_a_typo_in_a_flag_gets_the_sub_commands_usage_and_the_nearest_flag() -> None:
    result = ganggate("status", "--kubeconfg", "x")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: ganggate status")
    assert result.stderr.splitlines()[-1] == (
        "ganggate status: error: unrecognized arguments: --kubeconfg x (did you mean --kubeconfig?)")
    assert result.stdout == ""


def test_a_typo_in_a_command_gets_the_nearest_command() -> None:
    result = ganggate("stauts")
    assert result.returncode == 2 and result.stderr.rstrip().endswith("(did you mean status?)")
    assert ganggate("sim", "serv").stderr.rstrip().endswith("(did you mean serve?)")


def test_every_argument_parser_in_the_repository_refuses_abbreviations() -> None:
    """Scripts outside the `ganggate` command (benchmarks, kubesim's components) too."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = [str(path.relative_to(root)) for folder in ("ganggate", "bench") for path in (root / folder).rglob("*.py")
                 if "ArgumentParser(" in (text := path.read_text(encoding="utf-8"))
                 and text.count("ArgumentParser(") > text.count("allow_abbrev=False")
                 and "class Parser(argparse.ArgumentParser)" not in text]
    assert offenders == []


def test_the_license_is_an_spdx_string_setuptools_does_not_warn_about() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in pyproject["build-system"]["requires"]  # PEP 639 strings: setuptools 77 on
