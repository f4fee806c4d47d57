"""Runs the command blocks of README.md, docs/*.md and deploy/**/README.md, as a user following them would.

The convention (docs/README of it: the module docstring of tests/test_docs_commands.py) lives in
each fence's info string: the first word is the language, the words after it say what the runner
does with the block.

- ```` ```sh run ```` / ```` ```console run ````: run here, in a scratch directory that holds
  the checkout's files (examples/, deploy/, .venv, ...), with the virtualenv's bin first on PATH.
- ```` ```console sim-up ```` / ```` ```sh sim-up ````: run against the cluster an earlier block of
  the same document started (`ganggate sim up` or `ganggate sim serve`, which the runner starts in
  the background, on a free port, and stops when the document ends).
- ```` ```sh no-run: <why> ````: not run here (a real cluster, a container build, a run too long
  for CI); counted and listed with its reason.
- ```` ```text output ````: the expected output of the last command of the block before it.
- `yaml`, `json`, `python`, `csv`, `text` without a tag: not commands (manifests, API sketches,
  synopses, diagrams). A fence with no language is an error: every block says what it is.

In a `console` block, `$ ` starts a command (a trailing `\\` continues it) and the lines up to
the next `$ ` are its expected output. Output is compared line by line after normalising what
changes from run to run (ports, ages, generated name suffixes, the leader's identity); a line
`...` stands for any number of lines. A read-only command (get, status, logs, describe) whose
output does not match yet is retried for up to RETRY_SECONDS, as a person would look again while
the cluster settles. Log records (Python logging's `2026-01-01 00:00:00,000 INFO ...` lines on
stderr) are left out of the comparison. A command must exit 0 unless its trailing comment says `# denied`, `# fails`
or `# exits N`, or its shown output matches (a documented error).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
NOT_COMMANDS = {"yaml", "json", "python", "csv", "text"}
COMMAND_LANGS = {"sh", "console"}
RETRY_SECONDS = 60.0
READY_SECONDS = 120.0
COMMAND_SECONDS = 300.0
READ_ONLY = re.compile(r"\b(get|status|logs|describe|api-resources)\b")
WRITES = re.compile(r"\b(apply|create|patch|delete|replace|cordon|drain)\b")
EXPECT_FAILURE = re.compile(r"#\s*(denied|fails|exits [1-9]\d*)")
# A log record of Python's logging (the controller's and kubesim's, on stderr): not part of what a document shows.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
# What a long-running command prints once it is ready.
READY_LINES = (("sim up", "ganggate sim up: ready"), ("sim serve", "kubesim serving"), ("webhook", "webhook serving on"))


@dataclass
class Block:
    """One fenced block of a document."""

    doc: str
    line: int
    lang: str
    tags: list[str]
    reason: str | None
    body: list[str]

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def kind(self) -> str:
        """run, sim-up, no-run, output, or not-a-command."""
        if self.reason is not None:
            return "no-run"
        for tag in ("run", "sim-up", "output"):
            if tag in self.tags:
                return tag
        return "not-a-command"


@dataclass
class Command:
    """One command of a block and the output the document shows for it (None when it shows none)."""

    text: str
    expected: list[str] | None = None
    block: Block | None = None


def parse(doc: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with their info strings split into language and tags."""
    blocks: list[Block] = []
    current: Block | None = None
    indent = 0
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        if line.lstrip().startswith("```"):  # indented fences (in a list) count too: none is skipped unseen
            if current is None:
                info = line.lstrip()[3:].strip()
                lang, _, rest = info.partition(" ")
                reason = None
                if rest.strip().startswith("no-run"):
                    reason = rest.strip()[len("no-run"):].lstrip(":").strip()
                    rest = ""
                current = Block(str(doc.relative_to(ROOT)), number, lang, rest.split(), reason, [])
                indent = len(line) - len(line.lstrip())
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.body.append(line[indent:] if line[:indent].isspace() else line)
    return blocks


def problems(block: Block) -> list[str]:
    """Why a block's fence breaks the convention (empty when it follows it)."""
    if not block.lang:
        return [f"{block.where}: a fence with no language; say what the block is (docstring of tests/doc_commands.py)"]
    if block.lang in COMMAND_LANGS:
        if block.kind not in ("run", "sim-up", "no-run"):
            return [f"{block.where}: a {block.lang} block must be tagged run, sim-up or no-run: <why>"]
        if block.kind == "no-run" and not block.reason:
            return [f"{block.where}: no-run needs a reason (no-run: <why>)"]
        return []
    if block.lang in NOT_COMMANDS:
        if block.tags and block.tags != ["output"]:
            return [f"{block.where}: unknown tag(s) {block.tags} on a {block.lang} block"]
        return []
    return [f"{block.where}: unknown language {block.lang!r} (one of {sorted(COMMAND_LANGS | NOT_COMMANDS)})"]


def _logical_lines(lines: list[str]) -> list[str]:
    """Lines joined where one ends with a backslash."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def commands(block: Block) -> list[Command]:
    """The commands of a command block, each with the output the document shows after it."""
    if block.lang == "sh":
        return [Command(line.strip(), None, block) for line in _logical_lines(block.body)
                if line.strip() and not line.strip().startswith("#")]
    result: list[Command] = []
    lines = block.body
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        text = lines[i][2:]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        shown: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        while shown and not shown[-1].strip():
            shown.pop()
        result.append(Command(text.strip(), shown or None, block))
    return result


# ---- comparing output ----------------------------------------------------------------------------
_NORMALISE = (
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
    # generateName's random suffix: 5 characters of k8s.io/apimachinery/pkg/util/rand's alphabet (no vowels)
    (re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5}\b"), "-XXXXX"),
    # ages and durations as HumanDuration prints them (3s, 2m30s, 5h), and "1.2 s" wall times
    (re.compile(r"\b\d+(?:\.\d+)?(?:ms|s|m|h|d)(?:\d+(?:s|m|h))?\b"), "DUR"),
    (re.compile(r"\bleader \S+"), "leader HOLDER"),
    (re.compile(r"\bdecision [0-9a-f]{16}\b"), "decision ID"),  # a release's random decision id
    (re.compile(r"(?<=, )\d+(?:\.\d+)? s$"), "WALL"),  # a replay mode's wall time: ", 3.9 s" ending its line
)


def normalise(line: str) -> list[str]:
    """A line's words, with what differs from run to run replaced by placeholders."""
    for pattern, replacement in _NORMALISE:
        line = pattern.sub(replacement, line)
    return line.split()


def _segment_at(segment: list[list[str]], actual: list[list[str]], start: int) -> bool:
    return start + len(segment) <= len(actual) and all(actual[start + k] == segment[k] for k in range(len(segment)))


def matches(expected: list[str], actual: list[str]) -> bool:
    """True when the actual lines are the expected ones, `...` standing for any lines in between."""
    segments: list[list[list[str]]] = [[]]
    for line in expected:
        if line.strip() == "...":
            segments.append([])
        else:
            segments[-1].append(normalise(line))
    got = [normalise(line) for line in actual if line.strip() and not LOG_LINE.match(line)]
    segments = [[words for words in seg if words] for seg in segments]
    if len(segments) == 1:
        return got == segments[0]
    first, *middle, last = segments
    if not _segment_at(first, got, 0):
        return False
    position = len(first)
    for segment in middle:
        found = next((s for s in range(position, len(got) - len(segment) + 1) if _segment_at(segment, got, s)), None)
        if found is None:
            return False
        position = found + len(segment)
    return len(got) - len(last) >= position and _segment_at(last, got, len(got) - len(last))


# ---- running -----------------------------------------------------------------------------------
@dataclass
class Background:
    """A long-running command (`sim up`, `sim serve`, `... &`), its output collected as it comes."""

    command: str
    process: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    def start_reading(self) -> None:
        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line.rstrip("\n"))
        threading.Thread(target=read, daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Session:
    """One document's commands, run in order in one scratch directory."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        for entry in ROOT.iterdir():
            if entry.name not in (".git", ".venv") and not (workdir / entry.name).exists():
                (workdir / entry.name).symlink_to(entry)
        self._link_venv(VENV_BIN.parent, workdir / ".venv")
        self.env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(workdir),
                        NO_COLOR="1", PYTHONUNBUFFERED="1")
        # A user's shell, not `make test`'s: without these a `make` in a document prints
        # "make[1]: Entering directory" (it thinks it is a sub-make), which a user never sees.
        for name in ("KUBECONFIG", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
            self.env.pop(name, None)
        self.background: list[Background] = []
        self.cluster = False

    @staticmethod
    def _link_venv(venv: Path, target: Path) -> None:
        """The test's virtualenv, as `.venv/` of the scratch directory, with a fresh set-up stamp:
        `make demo` there runs the demo and never the set-up, which would re-point the editable
        install at the scratch directory (the suite tests the documents, not `make setup`)."""
        if target.is_symlink():
            target.unlink()
        target.mkdir(exist_ok=True)
        for entry in venv.iterdir():
            if entry.name != ".installed" and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
        (target / ".installed").touch()

    def close(self) -> None:
        for job in reversed(self.background):
            job.stop()
        self.background.clear()

    def run(self, command: Command) -> None:
        """Run one command; AssertionError (naming the document's line) when it fails or its output differs."""
        text = command.text
        if _long_running(text):
            self._start(command)
            return
        deadline = time.monotonic() + (RETRY_SECONDS if _read_only(text) and command.expected else 0)
        while True:
            result = subprocess.run(["bash", "-c", text], cwd=self.workdir, env=self.env, capture_output=True,
                                    text=True, timeout=COMMAND_SECONDS)
            output = (result.stdout + result.stderr).splitlines()
            good_output = command.expected is None or matches(command.expected, output)
            if good_output or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        where = command.block.where if command.block else "?"
        if not good_output:
            raise AssertionError(f"{where}: `{text}` printed\n" + "\n".join(output)
                                 + "\n--- but the document shows ---\n" + "\n".join(command.expected or []))
        failure_expected = bool(EXPECT_FAILURE.search(text)) or command.expected is not None
        if result.returncode != 0 and not failure_expected:
            raise AssertionError(f"{where}: `{text}` exited {result.returncode}:\n" + "\n".join(output))
        if EXPECT_FAILURE.search(text) and result.returncode == 0:
            raise AssertionError(f"{where}: `{text}` should fail, as its comment says, but exited 0:\n" + "\n".join(output))

    def _start(self, command: Command) -> None:
        text = _with_free_port(_uncommented(command.text).rstrip("&").strip())
        process = subprocess.Popen(["bash", "-c", f"exec {text}"], cwd=self.workdir, env=self.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        job = Background(text, process)
        job.start_reading()
        self.background.append(job)
        ready = next(line for name, line in READY_LINES if name in text)
        where = command.block.where if command.block else "?"
        deadline = time.monotonic() + READY_SECONDS
        while not any(ready in line for line in job.lines):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{where}: `{text}` did not get ready:\n" + "\n".join(job.lines))
            time.sleep(0.2)
        if "sim " in text:
            self.cluster = True
        if command.expected:
            deadline = time.monotonic() + 10
            while not matches(command.expected, job.lines) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not matches(command.expected, job.lines):
                raise AssertionError(f"{where}: `{text}` printed\n" + "\n".join(job.lines)
                                     + "\n--- but the document shows ---\n" + "\n".join(command.expected))

    def check_output(self, block: Block, previous: Command | None) -> None:
        """An `output` block: the last command before it printed this."""
        if previous is None:
            raise AssertionError(f"{block.where}: an output block with no command before it")
        self.run(Command(previous.text, block.body, block))


def _uncommented(text: str) -> str:
    """The command without its trailing `# comment`."""
    return re.split(r"\s#", text, maxsplit=1)[0].strip()


def _long_running(text: str) -> bool:
    stripped = _uncommented(text)
    return stripped.endswith("&") or bool(re.search(r"\bganggate sim (up|serve)\b", stripped))


def _read_only(text: str) -> bool:
    return bool(READ_ONLY.search(text)) and not WRITES.search(text)


def _with_free_port(text: str) -> str:
    """`sim up`/`sim serve` on a free port (the documents show the default, 8001, which may be taken here)."""
    if not re.search(r"\bganggate sim (up|serve)\b", text):
        return text
    if re.search(r"--port[ =]\d+", text):
        return re.sub(r"--port[ =]\d+", "--port 0", text)
    return text + " --port 0"


def documents() -> list[Path]:
    """README.md, docs/*.md and the READMEs under deploy/ (what a user is told to run)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "deploy").rglob("README.md"))]
