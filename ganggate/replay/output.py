"""Where `ganggate demo` and `ganggate replay` send what they print: the story or the results on
stdout, the embedded components' log lines (controller, webhook, kubesim) nowhere unless asked
(`--verbose`: stderr; `--log-file FILE`: that file, named at the end), and a replay's progress as
a bar on a terminal.

Why: the controller and kubesim log for operators (a waiting gang, a release, an HTTP request);
inside a demo's story or a replay's results those lines drown what a person came to read. An
ERROR is never lost silently: how many were logged unseen is said at the end.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Loggers that speak per HTTP request: kept at WARNING even when the log is shown, unless DEBUG.
CHATTY = ("aiohttp.access",)


class _Count(logging.Handler):
    """Counts the ERROR records no shown handler took (nothing is written)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.errors += 1


class ComponentLog:
    """While entered, the root logger writes the components' lines to stderr (`verbose`) and/or
    `path`, at `level`, or nowhere (only counting errors); on exit the handlers it replaced come
    back (a test calling the command in-process keeps its own logging)."""

    def __init__(self, *, verbose: bool = False, path: Path | None = None, level: str = "INFO") -> None:
        self.verbose = verbose
        self.path = path
        self.level = getattr(logging, level, logging.INFO)
        self.count = _Count()
        self._saved: tuple[list[logging.Handler], int] | None = None
        self._chatty: dict[str, int] = {}

    def __enter__(self) -> ComponentLog:
        root = logging.getLogger()
        self._saved = (root.handlers[:], root.level)
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        formatter = logging.Formatter(FORMAT)
        shown: list[logging.Handler] = []
        if self.verbose:
            shown.append(logging.StreamHandler(sys.stderr))
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            shown.append(logging.FileHandler(self.path, mode="w", encoding="utf-8"))
        for handler in shown:
            handler.setLevel(self.level)
            handler.setFormatter(formatter)
            root.addHandler(handler)
        if not shown:
            root.addHandler(self.count)
        root.setLevel(self.level if shown else logging.ERROR)
        if self.level > logging.DEBUG:
            for name in CHATTY:
                self._chatty[name] = logging.getLogger(name).level
                logging.getLogger(name).setLevel(logging.WARNING)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        root = logging.getLogger()
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            if handler is not self.count:
                handler.close()
        if self._saved is not None:
            handlers, level = self._saved
            for handler in handlers:
                root.addHandler(handler)
            root.setLevel(level)
        for name, level in self._chatty.items():
            logging.getLogger(name).setLevel(level)

    def note(self) -> str | None:
        """The line to end with: where the log went, or how many errors went unseen; None if neither."""
        if self.path is not None:
            return f"the components' log (controller, webhook, kubesim): {self.path}"
        if self.count.errors and not self.verbose:
            errors = "1 error was" if self.count.errors == 1 else f"{self.count.errors} errors were"
            return f"{errors} logged and not shown: --verbose shows the components' log, --log-file FILE keeps it"
        return None


def add_output_arguments(parser: Any) -> None:
    """--verbose and --log-file, as demo and replay take them."""
    parser.add_argument("--verbose", action="store_true",
                        help="also print the components' log (controller, webhook, kubesim) on stderr")
    parser.add_argument("--log-file", type=Path, metavar="FILE",
                        help="write the components' log to FILE (named at the end)")


class ProgressBar:
    """The step callback that moves a tqdm bar (jobs finished, simulated time), and `close`."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def __call__(self, view: Any) -> None:
        done = view.sample.jobs_finished
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)
        self._bar.set_postfix_str(f"t={view.time:.0f}s", refresh=False)

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, mode: str, stream: TextIO | None = None) -> ProgressBar | None:
    """A progress bar (tqdm) for one mode of a replay, on a terminal only: returns the step
    callback that moves it (jobs finished of `total`, simulated time), with `.close`; None when
    the stream is not a terminal or tqdm is missing (the replay then shows no bar)."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return ProgressBar(tqdm(total=total, desc=f"  {mode}", unit="job", file=stream, leave=False, dynamic_ncols=True))
