"""Is a pod's owner going away? A GET on the object its controller ownerReference names.

When a user deletes a Job (or the garbage collector deletes a gang's pods because their owner
is gone, or a foreground deletion of the owner deletes them first), the pods are not members
lost by a running gang: the gang is going away. kube-controller-manager's garbage collector
deletes a dependent only once its owner is gone, or, in a foreground deletion, while the owner
carries a deletionTimestamp (pkg/controller/garbagecollector); so at the time the controller
sees such a pod deleted, its owner is already absent (404), replaced by another object of the
same name (another uid), or being deleted. That is what `going` checks.

The resource of the owner's kind is found through discovery (GET /api/v1 or
/apis/<group>/<version>, cached per group-version). The GET needs RBAC `get` on that resource:
deploy/base/rbac.yaml grants it for batch Jobs; for any other owner kind, without that grant,
the answer is "unknown" and the loss is treated as one (one WARNING per kind says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

_REMEMBER = 10_000  # owner uids known to be going (oldest forgotten first)


def controller_ref(pod: Mapping) -> dict | None:
    """The pod's ownerReference with controller: true, if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return dict(ref)
    return None


def owner_is_going(ref: Mapping, owner: Mapping | None) -> bool:
    """Given the object found at the reference's name (None: 404), whether the owner the
    reference means is gone or being deleted. Pure."""
    if owner is None:
        return True
    meta = owner.get("metadata") or {}
    if ref.get("uid") and meta.get("uid") != ref.get("uid"):
        return True  # the owner was deleted and another object of its name made
    return bool(meta.get("deletionTimestamp"))


class OwnerLookup:
    """`going(namespace, ref)`: True (owner gone or being deleted), False (alive), or None
    (cannot tell: kind not served, no RBAC, API errors)."""

    def __init__(self, api_client: Any, metrics: Any = None) -> None:
        self.api_client = api_client
        self.metrics = metrics
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}  # group-version -> kind -> (plural, namespaced)
        self._going: OrderedDict[str, bool] = OrderedDict()
        self._in_flight: dict[str, asyncio.Future] = {}
        self._warned: set[str] = set()

    async def _get(self, path: str) -> dict:
        return await call_json(self.api_client.call_api, path, "GET", header_params={"Accept": "application/json"},
                               auth_settings=["BearerToken"], verb="get", metrics=self.metrics)

    async def _resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        if api_version not in self._resources:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            body = await self._get(path)
            self._resources[api_version] = {
                r["kind"]: (r["name"], bool(r.get("namespaced")))
                for r in body.get("resources") or [] if isinstance(r, dict) and "/" not in str(r.get("name"))
                and r.get("kind")}
        return self._resources[api_version].get(kind)

    async def going(self, namespace: str, ref: Mapping) -> bool | None:
        uid = str(ref.get("uid") or "")
        if uid and uid in self._going:
            return True
        if uid in self._in_flight:
            return await asyncio.shield(self._in_flight[uid])
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        if uid:
            self._in_flight[uid] = future
        verdict: bool | None = None
        try:
            verdict = await self._ask(namespace, ref)
        finally:
            self._in_flight.pop(uid, None)
            if not future.done():
                future.set_result(verdict)
        if verdict and uid:
            self._going[uid] = True
            while len(self._going) > _REMEMBER:
                self._going.popitem(last=False)
        return verdict

    async def _ask(self, namespace: str, ref: Mapping) -> bool | None:
        api_version, kind, name = str(ref.get("apiVersion") or ""), str(ref.get("kind")), str(ref.get("name"))
        try:
            resource = await self._resource(api_version, kind)
            if resource is None:
                self._warn(f"{kind}.{api_version}", "its kind is not served by the API server")
                return None
            plural, namespaced = resource
            root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            path = f"{root}/namespaces/{namespace}/{plural}/{name}" if namespaced else f"{root}/{plural}/{name}"
            try:
                owner = await self._get(path)
            except ApiCallError as exc:
                if exc.status != 404:
                    raise
                owner = None
            return owner_is_going(ref, owner)
        except ApiCallError as exc:
            self._warn(f"{kind}.{api_version}", f"{exc} (RBAC: the controller needs get on it)"
                       if exc.status == 403 else str(exc))
            return None

    def _warn(self, what: str, why: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("cannot tell whether owners of kind %s are being deleted: %s; pods of theirs deleted "
                        "are treated as member losses", what, why)
