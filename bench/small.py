"""`--small` for every bench: a run of seconds with the same code path, which the test suite runs
(tests/test_benches.py) so a bench that breaks fails the suite; `make bench` runs the full sizes."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "a run of seconds at small sizes (what the test suite runs); options after it override its sizes"


def small(**sizes: Any) -> type[argparse.Action]:
    """An argparse action for `--small` that sets these option values (by dest) where it stands."""

    class Small(argparse.Action):
        def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
            kwargs.setdefault("default", False)
            kwargs.setdefault("help", HELP)
            super().__init__(option_strings, dest, nargs=0, **kwargs)

        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            setattr(namespace, self.dest, True)
            for dest, value in sizes.items():
                setattr(namespace, dest, value)

    return Small
