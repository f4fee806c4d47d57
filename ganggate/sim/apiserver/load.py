"""`ganggate sim serve --load FILE`: objects created at start, each as if it had been POSTed.

A bench aid: bench/bench_memory.py needs a 20,000-node, 100,000-pod cluster in place before the
client it measures starts, and 120,000 POSTs over HTTP would take minutes on a shared machine.
Each object still goes through the API server's own create pipeline (`ApiServer.create_object`:
defaulting, admission, validation, the store), the path a POST takes, so what is served is what
POSTs would have made; objects are created in the file's order (a Namespace before its pods: the
NamespaceLifecycle admission plugin refuses objects in a namespace that does not exist).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ganggate.sim.apiserver import discovery
from ganggate.sim.apiserver.requests import Target
from ganggate.sim.apiserver.server import ApiServer


def read_objects(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a file: a List (`items`), a single object, or JSON Lines (one a line).
    ValueError names what is wrong."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        objects = data.get("items") if "items" in data else [data]
    else:
        objects = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objects.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"{path}: line {number} is not JSON: {exc}") from None
    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise ValueError(f"{path}: expected a List, an object or JSON Lines of objects")
    return objects


def resource_of(obj: dict[str, Any]) -> discovery.ResourceInfo:
    """The served resource of an object, by its apiVersion and kind; ValueError if none."""
    api_version, kind = obj.get("apiVersion") or "", obj.get("kind") or ""
    for info in discovery.RESOURCES:
        if info.api_version == api_version and info.kind == kind and "create" in info.verbs:
            return info
    raise ValueError(f"no served resource for apiVersion {api_version!r} kind {kind!r}")


async def load_objects(server: ApiServer, objects: list[dict[str, Any]]) -> int:
    """Create the objects in order through the create pipeline; the number created. The first
    refused one stops the load with a ValueError naming it (the objects before it stay)."""
    for position, obj in enumerate(objects):
        info = resource_of(obj)
        namespace = (obj.get("metadata") or {}).get("namespace") or "default" if info.namespaced else None
        try:
            await server.create_object(Target(info, namespace, None, None), obj)
        except Exception as exc:  # an ApiError: the reason the API server gives
            name = (obj.get("metadata") or {}).get("name")
            raise ValueError(f"object {position} ({info.kind} {name}) refused: {exc}") from None
    return len(objects)
