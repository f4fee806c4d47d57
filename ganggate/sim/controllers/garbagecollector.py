"""kube-controller-manager's garbage collector stand-in: deletes pods whose owners are gone.

The real garbage collector (pkg/controller/garbagecollector/garbagecollector.go) keeps a graph of
ownerReferences. kubesim's deletion is immediate (no finalizers), so of the three propagation
policies only Background is this controller's: an HTTP client of the server that watches pods and
deletes, with a uid precondition, every pod all of whose owners are gone, after confirming with a
live GET as attemptToDeleteItem does (so a pod whose owner its informer has not seen yet is never
deleted). Orphan and Foreground are the API server's (ganggate.sim.apiserver.propagation). Owners are
found by kind through discovery (ganggate.sim.client.restmapper), as the real one's RESTMapper does.
Only pods are collected (the dependents kubesim's controllers create).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from ganggate.sim.apimachinery.objectmeta import refers_to
from ganggate.sim.client.informers import ReflectorLike, SharedInformers, object_key, reflector_for, run_synced
from ganggate.sim.client.restmapper import RESTMapper

log = logging.getLogger(__name__)


class GarbageCollector:
    """Deletes pods whose every owner is gone (Background propagation)."""

    def __init__(self, base_url: str, *, shared: SharedInformers | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared = shared  # the process's shared informers (Components), or None: watches of its own
        self._session: aiohttp.ClientSession | None = None
        self._mapper: RESTMapper | None = None
        self._pods: ReflectorLike | None = None
        self._jobs: ReflectorLike | None = None
        self._dirty: asyncio.Queue[str] = asyncio.Queue()
        self.deleted = 0
        self.ready = asyncio.Event()
        """Set once the pods and the Jobs have been listed."""

    def on_owner(self, kind: str, obj: dict, old: dict | None) -> None:
        """An owner's deletion makes every pod referring to it a candidate."""
        if kind != "DELETED" or self._pods is None:
            return
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return  # (an object the API server stored has one; a pod never refers to none)
        for key, pod in list(self._pods.store.items()):
            if refers_to(pod, uid):
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
        if self._session is None or self._mapper is None:
            return True
        path = await self._mapper.path_of(ref, namespace)
        if path is None:
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
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.debug("garbage collector: %s: %s; retrying", key, exc)
                await asyncio.sleep(0.2)
                self._dirty.put_nowait(key)

    async def run(self) -> None:
        """Watch pods and their owners' kinds until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            self._mapper = RESTMapper(session, self.base_url)
            self._pods = reflector_for(session, self.base_url, "/api/v1/pods", self.on_pod, self.shared)
            self._jobs = reflector_for(session, self.base_url, "/apis/batch/v1/jobs", self.on_owner, self.shared)
            await run_synced(self._pods, self._jobs, self._work, self.ready)
