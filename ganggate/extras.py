"""Optional dependencies, the extras that bring them, and the one-line hint when one is missing.

The runtime commands (webhook, controller, status, certs, plan) need only the base dependencies;
the simulator, the demo and the trace replay need the `sim` extra. tests/test_extras.py checks
these tables against pyproject.toml's [project.optional-dependencies].
"""

from __future__ import annotations

import importlib.util

# Top-level import name -> (distribution on PyPI, the extra that installs it).
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "numpy": ("numpy", "sim"),
    "matplotlib": ("matplotlib", "sim"),
    "tqdm": ("tqdm", "sim"),
}

# Top-level command -> the extra it needs, checked before the command starts so that a long run
# (a replay plots only at its end) does not fail at the last step.
COMMAND_EXTRAS: dict[str, str] = {"demo": "sim", "replay": "sim", "sim": "sim"}


def hint(command: str, extra: str, missing: str) -> str:
    """The one line that says what to install."""
    return f"{command} needs the {extra!r} extra ({missing} is not installed): pip install 'ganggate[{extra}]'"


def extra_of(exc: ModuleNotFoundError) -> str | None:
    """The extra that provides the module an import failed to find, or None if it is not optional."""
    top = (exc.name or "").partition(".")[0]
    entry = OPTIONAL_MODULES.get(top)
    return entry[1] if entry else None


def missing_for(command_path: list[str]) -> tuple[str, str] | None:
    """(extra, missing module) when the command needs an extra that is not fully installed."""
    extra = COMMAND_EXTRAS.get(command_path[0]) if command_path else None
    if extra is None:
        return None
    for module, (_, owner) in OPTIONAL_MODULES.items():
        if owner == extra and _absent(module):
            return extra, module
    return None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a broken or half-initialised module counts as missing
        return True
