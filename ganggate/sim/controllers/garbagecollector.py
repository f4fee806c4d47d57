"""Garbage collection of pods whose owners are gone, and the propagation policies of a delete.

The real garbage collector (pkg/controller/garbagecollector/garbagecollector.go) keeps a graph of
ownerReferences. kubesim's deletion is immediate (no finalizers), so the three policies of
DeleteOptions.propagationPolicy are emulated in two places:
- Orphan and Foreground happen in the API server, before the owner is removed
  (`prepare_delete`): Orphan removes the ownerReference from the dependents, as orphanDependents
  does behind the `orphan` finalizer; Foreground deletes the dependents first, as the
  `foregroundDeletion` finalizer makes the owner wait for them.
- Background, the default of most kinds, is the `GarbageCollector` stand-in below: an HTTP client
  of the server that watches pods and deletes, with a uid precondition, every pod all of whose
  owners are gone, after confirming with a live GET as attemptToDeleteItem does (so a pod whose
  owner its informer has not seen yet is never deleted).
Only pods are collected (the dependents kubesim's controllers create).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

import aiohttp

from ganggate.sim.apiserver import discovery
from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.errors import Cause, not_supported
from ganggate.sim.client.informers import Reflector, SharedInformers, object_key, reflector_for, run_synced
from ganggate.sim.apiserver.store import Store
from ganggate.sim.apiserver.watch import clone

log = logging.getLogger(__name__)

POLICIES = ["Foreground", "Background", "Orphan"]


def propagation_policy(options: Mapping[str, Any], query: Mapping[str, str], default: str) -> str:
    """The policy a delete asks for (body or query), or the kind's default; 422 for a bad one (ValidateDeleteOptions)."""
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    orphan = options.get("orphanDependents")
    if orphan is None and "orphanDependents" in query:
        orphan = query["orphanDependents"] in ("true", "1", "True")
    causes: list[Cause] = []
    if policy is not None and policy not in POLICIES:
        causes.append(not_supported("propagationPolicy", policy, POLICIES))
    if policy is not None and orphan is not None:
        causes.append(errors.invalid_value("propagationPolicy", policy, "orphanDependents and deletionPropagation cannot be both set"))
    if causes:
        raise errors.invalid("DeleteOptions", "", causes)
    if policy:
        return str(policy)
    if orphan is not None:
        return "Orphan" if orphan else "Background"
    return default


def _refers_to(pod: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def prepare_delete(store: Store, owner: Mapping[str, Any], namespace: str | None, policy: str) -> None:
    """Orphan: drop the owner's references from its pods. Foreground: delete its pods first."""
    uid = (owner.get("metadata") or {}).get("uid")
    if not uid or policy == "Background" or namespace is None:
        return
    for (ns, name), stored in list(store.iter("pods", namespace)):
        if not _refers_to(stored.obj, uid):
            continue
        if policy == "Foreground":
            store.delete("pods", ns, name)
            continue
        pod = clone(stored.obj)
        refs = [r for r in pod["metadata"]["ownerReferences"] if r.get("uid") != uid]
        if refs:
            pod["metadata"]["ownerReferences"] = refs
        else:
            del pod["metadata"]["ownerReferences"]
        store.update("pods", pod, expect_rv=stored.obj["metadata"]["resourceVersion"])


def owner_path(ref: Mapping[str, Any], namespace: str) -> str | None:
    """The URL path of the object an ownerReference names, if kubesim serves its kind."""
    group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
    for info in discovery.RESOURCES:
        if info.group == group and info.version == version and info.kind == ref.get("kind"):
            root = f"/apis/{group}/{version}" if group else f"/api/{version}"
            scope = f"/namespaces/{namespace}" if info.namespaced else ""
            return f"{root}{scope}/{info.plural}/{ref.get('name')}"
    return None


class GarbageCollector:
    """Deletes pods whose every owner is gone (Background propagation)."""

    def __init__(self, base_url: str, *, shared: SharedInformers | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared = shared  # the process's shared informers (Components), or None: watches of its own
        self._session: aiohttp.ClientSession | None = None
        self._pods: Reflector | None = None
        self._jobs: Reflector | None = None
        self._dirty: asyncio.Queue[str] = asyncio.Queue()
        self.deleted = 0
        self.ready = asyncio.Event()
        """Set once the pods and the Jobs have been listed."""

    def on_owner(self, kind: str, obj: dict, old: dict | None) -> None:
        """An owner's deletion makes every pod referring to it a candidate."""
        if kind != "DELETED" or self._pods is None:
            return
        uid = (obj.get("metadata") or {}).get("uid")
        for key, pod in list(self._pods.store.items()):
            if _refers_to(pod, uid):
                self._dirty.put_nowait(key)

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        if kind != "DELETED" and (pod.get("metadata") or {}).get("ownerReferences"):
            self._dirty.put_nowait(object_key(pod))

    def _known_owner(self, ref: Mapping[str, Any], namespace: str) -> bool:
        """The owner is in the informer's cache (the graph's owner node exists): no need to ask."""
        job = self._jobs.store.get(f"{namespace}/{ref.get('name')}") if self._jobs and ref.get("kind") == "Job" else None
        return job is not None and (job.get("metadata") or {}).get("uid") == ref.get("uid")

    async def _owner_exists(self, ref: Mapping[str, Any], namespace: str) -> bool:
        if self._known_owner(ref, namespace):
            return True
        path = owner_path(ref, namespace)
        if path is None or self._session is None:
            return True  # a kind kubesim does not serve: never collect on its account
        async with self._session.get(self.base_url + path) as response:
            if response.status == 404:
                return False
            if response.status != 200:
                raise aiohttp.ClientError(f"GET {path}: {response.status}")
            body = await response.json(content_type=None)
        return (body.get("metadata") or {}).get("uid") == ref.get("uid")

    async def _attempt(self, key: str) -> None:
        pod = self._pods.store.get(key) if self._pods else None
        if pod is None or self._session is None:
            return
        meta = pod["metadata"]
        namespace = meta.get("namespace", "")
        for ref in meta.get("ownerReferences") or []:
            if await self._owner_exists(ref, namespace):
                return
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{meta['name']}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background",
                "preconditions": {"uid": meta.get("uid")}}
        async with self._session.delete(url, json=body) as response:
            await response.read()
            if response.status == 200:
                self.deleted += 1
            elif response.status not in (404, 409):
                raise aiohttp.ClientError(f"DELETE {url}: {response.status}")

    async def _work(self) -> None:
        while True:
            key = await self._dirty.get()
            try:
                await self._attempt(key)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                log.debug("garbage collector: %s: %s; retrying", key, exc)
                await asyncio.sleep(0.2)
                self._dirty.put_nowait(key)

    async def run(self) -> None:
        """Watch pods and their owners' kinds until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            self._pods = reflector_for(session, self.base_url, "/api/v1/pods", self.on_pod, self.shared)
            self._jobs = reflector_for(session, self.base_url, "/apis/batch/v1/jobs", self.on_owner, self.shared)
            await run_synced(self._pods, self._jobs, self._work, self.ready)
