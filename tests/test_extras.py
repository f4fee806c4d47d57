"""A command that needs an extra which is not installed says what to install, on one line."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ganggate import extras

REPO = Path(__file__).resolve().parent.parent
RUNTIME_MODULES = [
    "ganggate.cli", "ganggate.contract", "ganggate.extras", "ganggate.admission.cli", "ganggate.admission.server",
    "ganggate.admission.review", "ganggate.certs.cli", "ganggate.certs.files", "ganggate.certs.inject",
    "ganggate.controller.cli", "ganggate.controller.round.loop", "ganggate.controller.status.tables",
    "ganggate.controller.status.plan", "ganggate.controller.reporting.metrics", "ganggate.kube.client",
    "ganggate.kube.leader", "ganggate.core.planner",
]


def distribution(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def optional_dependencies() -> dict[str, set[str]]:
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {extra: {distribution(r) for r in reqs} for extra, reqs in table.items() if extra != "test"}


def test_the_table_is_pyprojects_optional_dependencies():
    declared = optional_dependencies()
    tabled: dict[str, set[str]] = {}
    for dist, extra in extras.OPTIONAL_MODULES.values():
        tabled.setdefault(extra, set()).add(distribution(dist))
    assert tabled == declared
    assert set(extras.COMMAND_EXTRAS.values()) <= set(declared)


def test_each_import_name_belongs_to_its_distribution():
    installed = importlib.metadata.packages_distributions()
    missing = []
    for module, (dist, _) in extras.OPTIONAL_MODULES.items():
        if module not in installed:
            missing.append(dist)  # checked after the others, which still are
            continue
        assert distribution(dist) in {distribution(d) for d in installed[module]}, module
    if missing:
        pytest.skip(f"not installed here, so not checked: {', '.join(sorted(missing))}")


def run(code: str, *, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def block(*modules: str) -> str:
    """Python source that makes the modules unimportable, as if their distributions were absent."""
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


ALL_OPTIONAL = tuple(extras.OPTIONAL_MODULES)


def test_runtime_needs_no_optional_dependency():
    code = block(*ALL_OPTIONAL) + "".join(f"import {m}\n" for m in RUNTIME_MODULES) + (
        "from ganggate.cli import main\n"
        "for argv in (['--help'], ['webhook', '--help'], ['controller', '--help'], ['certs', 'generate', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, (argv, exc.code)\n")
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert "usage: ganggate controller" in result.stdout


@pytest.mark.parametrize("argv, missing", [
    (["demo"], "numpy"),
    (["sim", "serve", "--port", "0"], "numpy"),
    (["replay", "--synth"], "matplotlib"),
])
def test_a_command_without_its_extra_says_what_to_install(argv, missing, tmp_path):
    result = run(block(missing) + f"from ganggate.cli import main\nraise SystemExit(main({argv!r}))")
    command = " ".join(["ganggate", *(a for a in argv if a in ("demo", "sim", "serve", "replay"))])
    assert result.returncode == 2
    assert result.stderr == (f"{command} needs the 'sim' extra ({missing} is not installed): "
                             "pip install 'ganggate[sim]'\n")


def test_a_replay_without_matplotlib_fails_before_it_starts(tmp_path):
    out = tmp_path / "out"
    argv = ["replay", "--synth", "--jobs", "2", "--out", str(out)]
    result = run(block("matplotlib") + f"from ganggate.cli import main\nraise SystemExit(main({argv!r}))")
    assert result.returncode == 2 and "pip install 'ganggate[sim]'" in result.stderr
    assert not out.exists()


def test_an_import_failure_deep_in_a_command_is_explained_too():
    # Not in COMMAND_EXTRAS (as a command added later might not be): the central catch still answers.
    code = (block("numpy") + "from ganggate import extras\nextras.COMMAND_EXTRAS.clear()\n"
            "from ganggate.cli import main\nraise SystemExit(main(['demo', '--quiet']))")
    result = run(code)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1:] == [
        "ganggate demo needs the 'sim' extra (numpy is not installed): pip install 'ganggate[sim]'"]
    assert "Traceback" not in result.stderr


def test_a_missing_module_that_is_not_optional_is_a_bug_not_a_hint():
    assert extras.extra_of(ModuleNotFoundError("x", name="numpy.linalg")) == "sim"
    assert extras.extra_of(ModuleNotFoundError("x", name="ganggate.nope")) is None
    code = ("import sys\nfrom ganggate import cli\n"
            "def broken(args):\n    import ganggate_does_not_exist\n"
            "parser = cli.build_parser\n"
            "def build():\n    p = parser()\n    p.set_defaults(func=broken)\n    return p\n"
            "cli.build_parser = build\nraise SystemExit(cli.main(['--log-level', 'INFO']))")
    result = run(code)
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'ganggate_does_not_exist'" in result.stderr
