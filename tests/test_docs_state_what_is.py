"""The user docs state what is: no internal issue numbers or commit hashes, a benchmarks page a
reader can take in, every figure's command a script that exists, and links that land.

History (what a figure was before a change, which change made it) belongs to git; a user reads
the figure that holds now and the command that reproduces it. Upstream references stay: a
Kubernetes pull request is named with its repository (`kubernetes/kubernetes#3030`), which is
where a user can look it up; a bare `#12` or "issue 12" names this project's tracker, which a
user does not have.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
MAX_BENCHMARK_LINES = 460

# `#12`, `(#12)`, `#12's` — but not `kubernetes#139520` or `owner/repo#12` (a word or `/` before the
# `#`: an upstream reference) and not a Markdown anchor `(#the-starvation-guard)`.
ISSUE_NUMBER = re.compile(r"(?<![\w/#&])#\d{1,4}\b")
ISSUE_WORD = re.compile(r"\bissues? #?\d+\b", re.IGNORECASE)
# A commit hash, short (7-12) or full (40): hex digits with at least one letter and one digit, as
# its own word. A 16-digit decision id in a shown Event is neither length.
COMMIT_HASH = re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)(?:[0-9a-f]{7,12}|[0-9a-f]{40})(?![\w-])")


def user_docs() -> list[Path]:
    """README.md, docs/*.md but the architecture notes (a developer's page), and every Markdown file
    under examples/ and deploy/."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += sorted((ROOT / "examples").rglob("*.md")) + sorted((ROOT / "deploy").rglob("*.md"))
    return [doc for doc in docs if doc.name != "architecture.md"]


def internal_references(text: str) -> list[str]:
    """Every internal issue number or commit hash in a text, with its line."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern in (ISSUE_NUMBER, ISSUE_WORD, COMMIT_HASH):
            found += [f"line {number}: {m.group(0)!r} in {line.strip()[:100]!r}" for m in pattern.finditer(line)]
    return found


def test_the_patterns_catch_internal_references_and_leave_upstream_ones() -> None:
    assert internal_references("Topology-aware gangs (#10)")
    assert internal_references("#21's bar is met")
    assert internal_references("as issue 12 asks")
    assert internal_references("measured before 63ac084, after 784659e")
    assert internal_references("git worktree add /tmp/base 211440a")
    assert internal_references("at " + "0123456789abcdef0123456789abcdef01234567")
    assert not internal_references("kubernetes/kubernetes#3030 and kubernetes#139520")
    assert not internal_references("see [the guard](benchmarks.md#the-starvation-guard)")
    assert not internal_references("released (decision 4b1f0c9e2a7d6358); 31536000 seconds; 2026-11-28")
    assert not internal_references("a ClusterIssuer issues the certificate; deadbeef-free")


def test_no_user_doc_names_an_internal_issue_or_a_commit() -> None:
    found = [f"{doc.relative_to(ROOT)} {hit}" for doc in user_docs() for hit in internal_references(doc.read_text())]
    assert not found, "user docs state what is (history is git's):\n" + "\n".join(found)


def test_the_benchmarks_page_is_short_enough_to_read() -> None:
    lines = len(BENCHMARKS.read_text().splitlines())
    assert lines <= MAX_BENCHMARK_LINES, \
        f"docs/benchmarks.md has {lines} lines (at most {MAX_BENCHMARK_LINES}): keep the figure that holds now"


def _bench_scripts() -> set[str]:
    """Every benchmark under bench/ (its sub-folders too), as a path from the checkout."""
    return {str(path.relative_to(ROOT)) for path in (ROOT / "bench").rglob("bench_*.py")}


def test_every_bench_command_in_the_benchmarks_page_names_a_script_that_exists() -> None:
    named = set(re.findall(r"\bbench/[\w/]+\.py\b", BENCHMARKS.read_text()))
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert named and not missing, f"docs/benchmarks.md names scripts that do not exist: {missing}"


def test_every_benchmark_has_its_figures_and_command_in_the_benchmarks_page() -> None:
    text = BENCHMARKS.read_text()
    absent = sorted(script for script in _bench_scripts() if f".venv/bin/python {script}" not in text)
    assert not absent, f"benchmarks whose command docs/benchmarks.md does not give: {absent}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_into_a_doc_land_on_one_of_its_headings() -> None:
    broken = []
    for doc in user_docs():
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([\w-]+)\)", doc.read_text()):
            linked = (doc.parent / target).resolve()
            if not linked.is_file():
                broken.append(f"{doc.relative_to(ROOT)}: {target} does not exist")
                continue
            headings = [line for line in linked.read_text().splitlines() if re.match(r"#{1,6} ", line)]
            anchors = {_anchor(line.lstrip("#")) for line in headings}
            if anchor not in anchors:
                broken.append(f"{doc.relative_to(ROOT)}: {target}#{anchor} is no heading of it")
    assert not broken, "\n".join(broken)


def test_no_bench_help_text_names_an_internal_issue_or_a_commit() -> None:
    """A bench's module docstring is its `--help` description (and its usage examples): user-facing."""
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        found += [f"{path.relative_to(ROOT)} {hit}" for hit in internal_references(docstring)]
    assert not found, "\n".join(found)
