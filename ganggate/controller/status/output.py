"""`ganggate status -o json|yaml` and `--watch`: the status tables as data, and the table again
whenever it changes. Pure except `watch`, which re-reads the cluster every `interval` seconds.

The document is `{"controller": ..., "topologyLevels": [...], "gangs": [...], "nodes": [...]}`,
one object per table row with the same values as the table (the state column's text, pods present
and needed, GPUs, the "why"), so a script reads what a person reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict
from typing import Any

OUTPUTS = ("text", "json", "yaml")


def status_document(gang_rows: Iterable[Any], node_rows: Iterable[Any], controller: str | None = None,
                    topology_levels: Iterable[str] = ()) -> dict[str, Any]:
    """The status as plain data, from controller.status.tables's GangRows and NodeRows."""
    gangs = []
    for row in gang_rows:
        gangs.append({"gang": row.gang, "state": row.state, "pods": row.present, "podNum": row.needed,
                      "gpus": row.gpus, "waiting": None if row.waiting_since == "-" else row.waiting_since,
                      "why": row.why, "domain": None if row.domain == "-" else row.domain})
    nodes = []
    for node in node_rows:
        item = asdict(node)
        nodes.append({"node": item["node"], "status": item["condition"], "gpus": item["gpus"], "used": item["used"],
                      "promised": item["promised"], "free": item["free"], "sharedFree": item["shared_free"],
                      "domain": None if item["domain"] == "-" else item["domain"]})
    return {"controller": controller or None, "topologyLevels": list(topology_levels), "gangs": gangs,
            "nodes": nodes}


def render(document: dict[str, Any], output: str) -> str:
    """The document as JSON or YAML text."""
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(document, sort_keys=False)


def separator(output: str) -> str:
    """What goes before each snapshot after the first: the time for text, `---` for YAML, nothing
    for JSON (a stream of JSON documents, as `kubectl get -w -o json` prints)."""
    if output == "yaml":
        return "---\n"
    if output == "json":
        return ""
    return f"\n{time.strftime('%H:%M:%S')}\n"


async def watch(read: Callable[[], Awaitable[str]], write: Callable[[str], None], interval: float = 2.0,
                rounds: int | None = None, output: str = "text") -> None:
    """Print the status, then again each time it changes (checked every `interval` seconds), until
    cancelled (Ctrl-C) or, for tests, after `rounds` reads. A JSON or YAML snapshot is a document of
    its own (YAML ones separated by `---`)."""
    last = None
    done = 0
    while rounds is None or done < rounds:
        text = await read()
        done += 1
        if text != last:
            write(text if last is None else separator(output) + text)
            last = text
        if rounds is None or done < rounds:
            await asyncio.sleep(interval)
