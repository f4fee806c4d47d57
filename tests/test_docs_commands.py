"""Every command block of README.md, docs/*.md and deploy/**/README.md runs, and prints what the document shows.

How a block is marked (the fence's info string), how output is compared and when a command may
fail: tests/doc_commands.py's docstring. In short: ```` ```sh run ````, ```` ```console run ```` run
here; ```` ```console sim-up ```` runs against the cluster an earlier block of the same document
started with `ganggate sim up` / `ganggate sim serve`; ```` ```sh no-run: <why> ```` is counted
and listed with its reason; ```` ```text output ```` is the output of the command before it.

A document whose commands drift from what the code does fails here. Blocks that use kubectl run the
virtualenv's (the test extra installs it; tests/kubectl_support.py).
"""

from __future__ import annotations

import pytest

from tests.doc_commands import ROOT, Block, Command, Session, commands, documents, matches, parse, problems

DOCS = documents()


def _label(path) -> str:
    return str(path.relative_to(ROOT))


def test_every_block_says_what_it_is_and_nothing_is_skipped_silently(capsys) -> None:
    """Each fence is a command block (run, sim-up, or no-run with its reason) or marked as not one."""
    found = [problem for doc in DOCS for block in parse(doc) for problem in problems(block)]
    assert not found, "\n".join(found)
    counts: dict[str, int] = {}
    not_run: list[str] = []
    for doc in DOCS:
        for block in parse(doc):
            counts[block.kind] = counts.get(block.kind, 0) + 1
            if block.kind == "no-run":
                not_run.append(f"  {block.where}: {block.reason}")
    with capsys.disabled():
        print(f"\ndoc blocks: {counts}\nnot run here:\n" + "\n".join(not_run))
    assert counts.get("run", 0) + counts.get("sim-up", 0) > 0


def _runnable(doc) -> list[Block]:
    return [b for b in parse(doc) if b.kind in ("run", "sim-up", "output")]


# A document runs several commands in a row (replay.md: a demo and two replays, 138 s measured on 2
# CPUs at load average 17): the suite's 300 s safety net per test is too tight for it on a loaded machine.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("doc", [d for d in DOCS if _runnable(d)], ids=_label)
def test_the_documents_commands_run_as_written(doc, tmp_path) -> None:
    blocks = _runnable(doc)
    session = Session(tmp_path)
    try:
        for index, block in enumerate(blocks):
            if block.kind == "output":
                continue  # checked with the command before it
            if block.kind == "sim-up" and not session.cluster:
                raise AssertionError(f"{block.where}: a sim-up block, but no earlier block of {doc.name} starts a cluster")
            steps = commands(block)
            following = blocks[index + 1] if index + 1 < len(blocks) else None
            if following is not None and following.kind == "output" and steps:
                last = steps[-1]
                steps[-1] = Command(last.text, following.body, following)
            for step in steps:
                session.run(step)
    finally:
        session.close()


def test_output_is_compared_line_by_line_with_only_the_volatile_parts_loosened() -> None:
    shown = ["NAME      READY   STATUS    AGE", "w-0-2gjwx 1/1     Running   3s", "...", "last line"]
    assert matches(shown, ["NAME READY STATUS AGE", "w-0-xk7pq 1/1 Running 2m10s", "x", "y", "last line"])
    assert not matches(shown, ["NAME READY STATUS AGE", "w-0-xk7pq 1/1 Pending 1s", "last line"])
    assert not matches(shown, ["NAME READY STATUS AGE", "w-0-xk7pq 1/1 Running 1s", "last line", "one more"])
    assert not matches(["a", "b"], ["a"]) and matches(["a", "...", "c"], ["a", "c"])
    assert matches(["  API server:  http://127.0.0.1:8001 (4 nodes)"], ["  API server:  http://127.0.0.1:39121 (4 nodes)"])


def test_a_drifted_example_fails_and_names_the_documents_line(tmp_path) -> None:
    block = Block("docs/x.md", 7, "console", ["run"], None, ["$ echo three", "two"])
    session = Session(tmp_path)
    try:
        with pytest.raises(AssertionError, match=r"docs/x.md:7: `echo three` printed\nthree\n--- but the document shows ---\ntwo"):
            session.run(commands(block)[0])
        with pytest.raises(AssertionError, match="exited 3"):
            session.run(Command("exit 3", None, block))
        session.run(Command("exit 3   # fails", None, block))
    finally:
        session.close()


def test_fences_without_a_kind_or_reason_are_refused() -> None:
    assert problems(Block("d.md", 1, "", [], None, []))
    assert problems(Block("d.md", 1, "sh", [], None, ["ls"]))
    assert problems(Block("d.md", 1, "sh", [], "", ["ls"]))
    assert not problems(Block("d.md", 1, "sh", [], "needs a real cluster", ["kubectl apply -k deploy/"]))
    assert not problems(Block("d.md", 1, "yaml", [], None, ["a: 1"]))
