"""Which URL an ownerReference's kind lives at, read from the API server's discovery over HTTP.

client-go's DeferredDiscoveryRESTMapper (restmapper/discovery.go) maps a group/version/kind to its
resource by asking the server's discovery documents (`/api/v1`, `/apis/<group>/<version>`) once and
caching the answer; the garbage collector resolves owners with it (garbagecollector.go
GetObjectReference via restMapper). kubesim's controllers do the same instead of importing the
server's own resource table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp


class RESTMapper:
    """Kind -> (plural, namespaced) per group/version, fetched once from discovery and cached."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._groups: dict[str, dict[str, tuple[str, bool]]] = {}

    async def _resources(self, group_version: str) -> dict[str, tuple[str, bool]]:
        """The kinds a group/version serves (subresources left out); {} when the server serves none."""
        if group_version not in self._groups:
            path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
            async with self._session.get(self._base_url + path) as response:
                if response.status == 404:
                    self._groups[group_version] = {}
                    return {}
                if response.status != 200:
                    raise aiohttp.ClientError(f"GET {path}: {response.status}")
                body = await response.json(content_type=None)
            self._groups[group_version] = {
                r["kind"]: (r["name"], bool(r.get("namespaced")))
                for r in body.get("resources") or [] if "/" not in r.get("name", "")
            }
        return self._groups[group_version]

    async def path_of(self, ref: Mapping[str, Any], namespace: str) -> str | None:
        """The URL path of the object an ownerReference names, or None if the server serves no such kind."""
        group_version = str(ref.get("apiVersion") or "")
        found = (await self._resources(group_version)).get(str(ref.get("kind"))) if group_version else None
        if found is None:
            return None
        plural, namespaced = found
        root = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        scope = f"/namespaces/{namespace}" if namespaced else ""
        return f"{root}{scope}/{plural}/{ref.get('name')}"
