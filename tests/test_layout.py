"""The source layout holds: no import cycles among ganggate's modules, long modules say why they
are long, the wheel ships one top-level package, the core's module map is its dependency order,
the controller is grouped by concern without mixins, and kubesim borrows nothing from ganggate.
Read from the source with `ast` and `tomllib`; nothing is imported or built."""

from __future__ import annotations

import ast
import tomllib
from collections import deque
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "ganggate"

#: Product modules longer than this must say why at the top of their docstring.
MAX_LINES = 400
#: The marker: a docstring line starting with this, followed by the reason.
LONG_MARKER = "Why this module is long:"

#: Top-level directories with an __init__.py that are not shipped, and why they have one.
NOT_SHIPPED = {
    "bench": "the benchmark scripts share bench/webhook_process.py; run from the checkout only",
}


# ---- reading the tree --------------------------------------------------------------------


def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package is its __init__)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that `name` imports anywhere in its file: at module level, inside functions,
    under `if TYPE_CHECKING:`, and by `importlib.import_module` of a module named in a string."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    dynamic = False
    strings: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(_resolve(alias.name, modules) or "")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"  # `from pkg import module`
                found.add(submodule if submodule in modules else _resolve(source, modules) or "")
        elif isinstance(node, ast.Attribute) and node.attr == "import_module":
            dynamic = True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
    if dynamic:  # e.g. the CLI's COMMAND_MODULES: strings that name our modules
        found.update(s for s in strings if s in modules)
    found.discard("")
    found.discard(name)
    return found


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, as a path that
    starts and ends at the same module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in graph:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node] & component):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if succ not in parent:
                parent[succ] = node
                queue.append(succ)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")  # pragma: no cover


def docstring_says_why_long(source: str) -> bool:
    """The module docstring has a line starting with LONG_MARKER and some reason after it."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return any(line.strip().startswith(LONG_MARKER) and line.strip() != LONG_MARKER.strip() for line in doc.splitlines())


def long_modules(root: Path) -> dict[str, int]:
    """Product modules over MAX_LINES lines, with their line counts."""
    out = {}
    for name, path in module_files(root).items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            out[name] = lines
    return out


# ---- (a) no import cycles ----------------------------------------------------------------


def test_no_import_cycles_among_ganggate_modules() -> None:
    cycles = find_cycles(import_graph(ROOT))
    assert not cycles, "import cycle(s): " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_import_cycles_among_the_benchmarks() -> None:
    """bench/ shares code through modules of its own (gpushare_trace, webhook_process), never by
    two scripts importing each other (bench_gpushare and gpushare_e2e once did)."""
    assert find_cycles(import_graph(ROOT, "bench")) == []


def test_cycle_finder_sees_imports_in_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    """The shape of the old core/cluster.py <-> core/gangs.py cycle, and one made by a
    function-level import, are both found; a plain chain is not a cycle."""
    pkg = tmp_path / "ganggate"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "cluster.py").write_text("from ganggate.core.gangs import Gang\n")
    (pkg / "core" / "gangs.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ganggate.core.cluster import PodInfo\n"
    )
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from ganggate import a\n")
    (pkg / "c.py").write_text("import ganggate.core.cluster\n")
    (pkg / "x.py").write_text("import ganggate.y as y\n")
    (pkg / "y.py").write_text("from ganggate.z import thing\n")
    (pkg / "z.py").write_text("from .x import other\n")
    cycles = find_cycles(import_graph(tmp_path))
    assert sorted(cycles) == [
        ["ganggate.a", "ganggate.b", "ganggate.a"],
        ["ganggate.core.cluster", "ganggate.core.gangs", "ganggate.core.cluster"],
        ["ganggate.x", "ganggate.y", "ganggate.z", "ganggate.x"],
    ]


def test_cycle_finder_counts_modules_loaded_by_name(tmp_path: Path) -> None:
    """A CLI that loads its commands with importlib.import_module depends on them."""
    pkg = tmp_path / "ganggate"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("import importlib\nMODULES = ('ganggate.cmd',)\n")
    (pkg / "cmd.py").write_text("from ganggate.cli import helper\n")
    assert find_cycles(import_graph(tmp_path)) == []  # no import_module call: strings are just strings
    (pkg / "cli.py").write_text("import importlib\nMODULES = ('ganggate.cmd',)\nimportlib.import_module(MODULES[0])\n")
    assert find_cycles(import_graph(tmp_path)) == [["ganggate.cli", "ganggate.cmd", "ganggate.cli"]]


# ---- (b) long modules say why ------------------------------------------------------------

@pytest.mark.parametrize("module", sorted(long_modules(ROOT)))
def test_long_module_says_why_at_the_top_of_its_docstring(module: str) -> None:
    path = module_files(ROOT)[module]
    lines = len(path.read_text(encoding="utf-8").splitlines())
    says_why = docstring_says_why_long(path.read_text(encoding="utf-8"))
    assert says_why, (
        f"{path.relative_to(ROOT)} has {lines} lines (> {MAX_LINES}): split it, or add a docstring "
        f"line starting {LONG_MARKER!r} with the reason"
    )


def test_why_long_marker_needs_a_reason_in_the_docstring() -> None:
    assert docstring_says_why_long(f'"""Parts.\n\n{LONG_MARKER} one state machine, kept whole.\n"""\n')
    assert not docstring_says_why_long(f'"""Parts.\n\n{LONG_MARKER}\n"""\n')  # no reason given
    assert not docstring_says_why_long(f'"""Parts."""\n# {LONG_MARKER} a comment is not the docstring\n')
    assert not docstring_says_why_long("x = 1\n")


# ---- (c) one top-level package -----------------------------------------------------------


def _find_config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_wheel_ships_only_the_ganggate_package() -> None:
    config = _find_config()
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert all(p == PACKAGE or p.startswith(f"{PACKAGE}.") for p in include), include
    shipped = find_packages(where=str(ROOT), include=include)
    assert shipped and {p.split(".")[0] for p in shipped} == {PACKAGE}, shipped


def test_no_other_top_level_package_in_the_tree() -> None:
    config = _find_config()
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    top = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {PACKAGE}
    unexplained = top - set(NOT_SHIPPED)
    assert not unexplained, f"top-level packages besides {PACKAGE}: {sorted(unexplained)}"
    # Those that are there on purpose stay out of the wheel.
    assert not set(find_packages(where=str(ROOT), include=include)) & set(NOT_SHIPPED)


def test_every_directory_of_the_package_ships() -> None:
    """find_packages skips a directory without __init__.py, so its modules would be missing
    from the wheel while the tests, run from the checkout, still pass."""
    config = _find_config()
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(find_packages(where=str(ROOT), include=include))
    with_code = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / PACKAGE).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert with_code - shipped == set(), f"directories with modules but no __init__.py: {sorted(with_code - shipped)}"


def test_console_scripts_point_into_the_package() -> None:
    modules = module_files(ROOT)
    for script, target in _find_config()["project"]["scripts"].items():
        module, _, func = target.partition(":")
        assert module in modules, f"{script} -> {target}: no module {module}"
        tree = ast.parse(modules[module].read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body), f"{script} -> {target}"


# ---- the core's module map stays true ----------------------------------------------------


#: The core's layers, lowest first (ganggate/core/__init__.py says the same); planner and
#: incremental sit on top of them, in the core package itself.
CORE_LAYERS = ["fit", "state", "placement", "policy"]


def _core_layer(module: str) -> int:
    """The layer of a core module: its index in CORE_LAYERS, or the top for planner/incremental."""
    part = module.split(".")[2] if module.count(".") >= 2 else ""
    return CORE_LAYERS.index(part) if part in CORE_LAYERS else len(CORE_LAYERS)


def test_core_layers_are_the_ones_its_docstring_lists() -> None:
    doc = ast.get_docstring(ast.parse((ROOT / PACKAGE / "core" / "__init__.py").read_text(encoding="utf-8"))) or ""
    listed = [line.split()[0] for line in doc.splitlines() if line.startswith("  ") and not line.startswith("    ")]
    packages = sorted(p.name for p in (ROOT / PACKAGE / "core").iterdir() if (p / "__init__.py").exists())
    assert listed[: len(CORE_LAYERS)] == CORE_LAYERS and sorted(CORE_LAYERS) == packages
    top = sorted(p.stem for p in (ROOT / PACKAGE / "core").glob("*.py") if p.stem != "__init__")
    assert sorted(listed[len(CORE_LAYERS):]) == top


def test_core_modules_import_only_their_layer_and_those_below() -> None:
    """fit < state < placement < policy < planner/incremental: no arrow runs back up."""
    graph = import_graph(ROOT)
    upward = {
        name: sorted(t for t in targets if t.startswith(f"{PACKAGE}.core.") and _core_layer(t) > _core_layer(name))
        for name, targets in graph.items()
        if name.startswith(f"{PACKAGE}.core.")
    }
    upward = {name: targets for name, targets in upward.items() if targets}
    assert not upward, f"core modules importing a layer above their own: {upward}"


# ---- the controller, by concern ------------------------------------------------------------


#: The only modules directly under ganggate/controller/, and why they are not in a sub-package.
CONTROLLER_TOP = {
    "__init__": "the package's map of its sub-packages",
    "config": "ControllerConfig: plain settings every part and every driver (local, replay) reads",
    "cli": "the command line of `ganggate controller` and `ganggate status`",
}


def test_controller_modules_live_in_sub_packages() -> None:
    """A module of the controller belongs to the sub-package of its concern; only a documented few
    sit directly under controller/."""
    top = sorted(p.stem for p in (ROOT / PACKAGE / "controller").glob("*.py"))
    assert set(top) <= set(CONTROLLER_TOP), (
        f"modules directly under ganggate/controller/ besides {sorted(CONTROLLER_TOP)}: "
        f"{sorted(set(top) - set(CONTROLLER_TOP))}; move each into the sub-package of its concern"
    )


def test_controller_sub_packages_are_the_ones_its_docstring_lists() -> None:
    """controller/__init__.py lists each sub-package (an indented line starting `name/`), so a
    reader finds the parts from there; a new sub-package is listed, a gone one is not."""
    init = ROOT / PACKAGE / "controller" / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    listed = sorted(line.split()[0].rstrip("/") for line in doc.splitlines()
                    if line.startswith("  ") and line.split()[0].endswith("/"))
    packages = sorted(p.name for p in (ROOT / PACKAGE / "controller").iterdir() if (p / "__init__.py").exists())
    assert listed == packages
    undocumented = [name for name in packages
                    if not ast.get_docstring(ast.parse((ROOT / PACKAGE / "controller" / name / "__init__.py")
                                                       .read_text(encoding="utf-8")))]
    assert not undocumented, f"controller sub-packages whose __init__ does not say what they own: {undocumented}"


def mixins(root: Path, package: str = f"{PACKAGE}.controller") -> list[str]:
    """'module.Class(Base)' for each class of the package whose bases include a class of the package
    itself (defined in the same module, or imported from another of its modules): a part used
    as a mixin instead of held by the object that uses it."""
    modules = {name: path for name, path in module_files(root).items()
               if name == package or name.startswith(f"{package}.")}
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    classes = {name: {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)} for name, tree in trees.items()}
    found = []
    for name, tree in trees.items():
        imported: dict[str, tuple[str, str]] = {}  # local name -> (module, class) for classes of the package
        aliases: dict[str, str] = {}  # local name -> a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    local = alias.asname or alias.name
                    if node.module in classes and alias.name in classes[node.module]:
                        imported[local] = (node.module, alias.name)
                    elif f"{node.module}.{alias.name}" in classes:
                        aliases[local] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in classes and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                ours = False
                if isinstance(base, ast.Name):
                    ours = base.id in imported or (base.id in classes[name] and base.id != node.name)
                elif isinstance(base, ast.Attribute):
                    owner = ast.unparse(base.value)
                    owner = aliases.get(owner, owner)
                    ours = owner in classes and base.attr in classes[owner]
                if ours:
                    found.append(f"{name}.{node.name}({ast.unparse(base)})")
    return sorted(found)


def test_controller_has_no_mixins() -> None:
    """The Controller holds its parts (releases, lifecycle, preemptor, ...), each with one job and
    the dependencies it is given; none is a base class whose methods reach into another's state."""
    assert mixins(ROOT) == []


def test_mixin_finder_sees_imported_same_module_and_attribute_bases(tmp_path: Path) -> None:
    pkg = tmp_path / "ganggate" / "controller"
    (pkg / "release").mkdir(parents=True)
    (pkg / "round").mkdir()
    for init in (tmp_path / "ganggate", pkg, pkg / "release", pkg / "round"):
        (init / "__init__.py").write_text("")
    (pkg / "release" / "releases.py").write_text("class Releasing:\n    pass\nclass Gone(Exception):\n    pass\n")
    (pkg / "round" / "loop.py").write_text(
        "from collections import OrderedDict\n"
        "from ganggate.controller.release.releases import Releasing, Gone\n"
        "from ganggate.controller.release import releases as r\n"
        "class Base:\n    pass\n"
        "class Controller(Releasing):\n    pass\n"
        "class Other(Base):\n    pass\n"
        "class Third(r.Releasing):\n    pass\n"
        "class Seen(OrderedDict):\n    pass\n"
        "class Fine:\n    releases = Releasing()\n"
    )
    assert mixins(tmp_path) == [
        "ganggate.controller.round.loop.Controller(Releasing)",
        "ganggate.controller.round.loop.Other(Base)",
        "ganggate.controller.round.loop.Third(r.Releasing)",
    ]


def test_kubesim_imports_nothing_of_the_product_it_stands_in_for() -> None:
    """ganggate/sim is a stand-in for Kubernetes: if it borrowed ganggate's own arithmetic
    (resources, nodematch), a bug there would be in both and no test would see it."""
    graph = import_graph(ROOT)
    borrowed = {
        name: sorted(t for t in targets if not t.startswith(f"{PACKAGE}.sim"))
        for name, targets in sorted(graph.items())
        if name == f"{PACKAGE}.sim" or name.startswith(f"{PACKAGE}.sim.")
    }
    borrowed = {name: targets for name, targets in borrowed.items() if targets}
    assert not borrowed, f"kubesim modules importing ganggate outside ganggate/sim: {borrowed}"


#: kubesim's shared libraries (k8s.io/apimachinery, k8s.io/api, component-helpers, client-go) and its
#: clock: what every component may import. The components themselves (the API server, the
#: scheduler, the controllers, the kubelet) import none of each other: they talk over HTTP.
SIM_LIBRARIES = {"apimachinery", "api", "helpers", "client", "clock", "componentbase"}
SIM_COMPONENTS = {"apiserver", "scheduler", "controllers", "kubelet", "autoscaler"}


def _sim_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == [PACKAGE, "sim"] else None


def test_kubesim_components_talk_only_through_the_client() -> None:
    """The scheduler, the controllers and the kubelet reach the API server only as its clients, as
    the real ones do; the API server imports none of them; the libraries import no component."""
    graph = import_graph(ROOT)
    crossing = {}
    for name, targets in graph.items():
        part = _sim_part(name)
        if part is None or part not in SIM_COMPONENTS | SIM_LIBRARIES:
            continue
        allowed = SIM_LIBRARIES | {part}
        bad = sorted(t for t in targets if _sim_part(t) is not None and _sim_part(t) not in allowed)
        if part in SIM_LIBRARIES:
            bad = [t for t in bad if _sim_part(t) not in SIM_LIBRARIES]
        if bad:
            crossing[name] = bad
    assert not crossing, f"kubesim parts importing another component instead of using the API: {crossing}"


def test_kubesim_sub_packages_name_the_kubernetes_code_they_follow() -> None:
    """Each sub-package's docstring names the Kubernetes package it mirrors (k8s.io/... or pkg/...)."""
    unnamed = []
    for init in sorted((ROOT / PACKAGE / "sim").rglob("__init__.py")):
        if init.parent.name == "sim":
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if "k8s.io/" not in doc and "pkg/" not in doc:
            unnamed.append(str(init.relative_to(ROOT)))
    assert not unnamed, f"sub-packages whose docstring names no Kubernetes package: {unnamed}"
