"""kubesim stands in for Kubernetes, so it may not share code with the product it tests.

Every module under ganggate/sim/ is read with `ast` and every import in it (at module level or
inside a function, absolute or relative) must stay inside ganggate.sim: otherwise a bug in
ganggate's own arithmetic would be made by both the thing under test and the thing testing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parent.parent / "ganggate" / "sim"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import statement anywhere in the file."""
    try:  # the package the file is in: ganggate.sim, or one of its sub-packages
        package = ".".join(["ganggate", "sim", *path.parent.relative_to(SIM).parts])
    except ValueError:
        package = "ganggate.sim"
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's own package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


def foreign_ganggate_imports(path: Path) -> list[str]:
    return [
        f"{path.name}:{line} imports {module}"
        for line, module in imported_modules(path)
        if (module == "ganggate" or module.startswith("ganggate.")) and not (
            module == "ganggate.sim" or module.startswith("ganggate.sim.")
        )
    ]


SIM_MODULES = sorted(SIM.rglob("*.py"))


def test_the_walk_sees_every_sim_module():
    names = {p.name for p in SIM_MODULES}
    assert {"scheduler.py", "cache.py", "validation.py", "quantity.py", "podrequests.py"} <= names
    assert {p.parent.name for p in SIM_MODULES} >= {"apiserver", "scheduler", "controllers", "kubelet", "client"}


@pytest.mark.parametrize("path", SIM_MODULES, ids=lambda p: str(p.relative_to(SIM)))
def test_sim_module_imports_nothing_from_ganggate_outside_sim(path):
    assert foreign_ganggate_imports(path) == []


def test_the_check_catches_imports_at_any_depth(tmp_path):
    """The walk must see function-level and relative imports, or the test above proves nothing."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import ganggate.sim.clock\n"
        "from ganggate.sim import quantity\n"
        "def f():\n"
        "    from ganggate.core.fit.resources import pod_requests\n"
        "    import ganggate.contract\n"
        "class C:\n"
        "    def g(self):\n"
        "        from ..core import nodematch\n"
        "        from . import store\n"
    )
    assert foreign_ganggate_imports(sample) == [
        "sample.py:4 imports ganggate.core.fit.resources",
        "sample.py:5 imports ganggate.contract",
        "sample.py:8 imports ganggate.core",
    ]
