"""The `ganggate` command: one entry point, one subcommand per component.

Each component module exposes `register(subparsers)`, which adds its subcommands and sets
`func` (a callable taking the parsed args and returning an exit code) on each. Modules keep
heavy imports inside their command functions so that `ganggate --help` stays fast.

A command group may be filled by more than one package: `register` may return a mapping of group
name to that group's subparsers (`{"sim": ...}`), and an entry `(module, group)` in
`COMMAND_MODULES` registers into that group instead of the top level. So `ganggate sim up`, which
composes the simulator with the webhook and the controller, lives outside `ganggate.sim`, and the
simulator keeps importing nothing of the product it tests.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import re
import sys
from typing import Any, NoReturn

from ganggate import __version__

COMMAND_MODULES: tuple[str | tuple[str, str], ...] = (
    "ganggate.admission.cli",  # ganggate webhook
    "ganggate.certs.cli",  # ganggate certs generate|inject
    "ganggate.controller.cli",  # ganggate controller, ganggate status
    "ganggate.controller.status.plan",  # ganggate plan --snapshot
    "ganggate.sim.cli",  # ganggate sim serve
    ("ganggate.local.cli", "sim"),  # ganggate sim up
    "ganggate.replay.cli",  # ganggate demo, ganggate replay
)


class Parser(argparse.ArgumentParser):
    """Every parser of the `ganggate` command (subparsers inherit the class): no abbreviated
    flags, so `--node 2` is an error instead of `--nodes 2`, and a mistyped choice is answered
    with the nearest one ("did you mean 'status'?")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found:
            message += did_you_mean(found.group(1), re.findall(r"'([^']*)'", found.group(2)))
        super().error(message)


def did_you_mean(word: str, choices: list[str]) -> str:
    """' (did you mean --nodes?)' for the choice nearest a mistyped word, or ''."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def parser_at(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    """The parser of a sub-command path (['sim', 'up']), for its own usage and flags."""
    for name in path:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = subparsers[0].choices[name]
    return parser


def unrecognized(parser: argparse.ArgumentParser, path: list[str], extra: list[str]) -> NoReturn:
    """Arguments no parser took: the error in the sub-command's own usage, with the flag of
    that sub-command nearest the first unknown one."""
    command = parser_at(parser, path)
    flags = [option for action in command._actions for option in action.option_strings]
    first = next((token.split("=", 1)[0] for token in extra if token.startswith("-")), None)
    hint = did_you_mean(first, flags) if first else ""
    command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def refused_text(exc: OSError) -> str | None:
    """A refused connection to the API (aiohttp's ClientConnectorError) in words, else None."""
    from ganggate.kube.calls import no_cluster_message

    host, port = getattr(exc, "host", None), getattr(exc, "port", None)
    if host is None or not isinstance(getattr(exc, "os_error", None), ConnectionRefusedError):
        return None
    return no_cluster_message(f"{host}:{port}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ganggate",
        description="All-or-nothing (gang) admission of GPU jobs on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"ganggate {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging verbosity (default: INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, Any] = {}
    for entry in COMMAND_MODULES:
        module_name, group = (entry, None) if isinstance(entry, str) else entry
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only a component that is not installed is skipped; a broken import is an error.
            if exc.name != module_name:
                raise
            continue
        added = module.register(groups[group] if group else subparsers)
        if isinstance(added, dict):
            groups.update(added)
    return parser


def command_path(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The subcommand names in argv, e.g. ['sim', 'serve'], found by walking the parser tree."""
    path: list[str] = []
    for token in argv:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subparsers and token in subparsers[0].choices:
            path.append(token)
            parser = subparsers[0].choices[token]
    return path


def main(argv: list[str] | None = None) -> int:
    from ganggate import extras

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse would answer with the top-level usage: answer with the sub-command's
        unrecognized(parser, command_path(parser, argv), extra)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    path = command_path(parser, argv)
    command = " ".join(["ganggate", *path])
    missing = extras.missing_for(path)
    if missing is not None:
        print(extras.hint(command, *missing), file=sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except OSError as exc:  # a refused connection anywhere in a command: say what it means
        text = refused_text(exc)
        if text is None:
            raise
        print(f"error: {text}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        wanted = extras.extra_of(exc)
        if wanted is None:
            raise
        print(extras.hint(command, wanted, (exc.name or "").partition(".")[0]), file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
