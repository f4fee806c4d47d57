"""List + watch over HTTP with raw JSON: the reflector kubesim's scheduler and kubelet share.

Like client-go's Reflector (tools/cache/reflector.go ListAndWatch): list, hand the items to
the handler as a Replace (objects that disappeared become DELETED), then watch from the
list's resourceVersion; a watch that ends normally is resumed from the last resourceVersion
seen (bookmarks included); a 410 Gone, as an HTTP status or as an ERROR event, means that
version is compacted away and forces a relist; any other failure is retried with backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

Handler = Callable[[str, dict, "dict | None"], None]
"""handler(event_type, obj, previous): ADDED/MODIFIED with the new object, DELETED with the last."""

MIN_WATCH_TIMEOUT_SECONDS = 300  # reflector.go minWatchTimeout: watches last 5-10 minutes


class Expired(Exception):
    """The resourceVersion we resume from is gone (410): relist."""


def object_key(obj: Mapping) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


class Reflector:
    """Keeps `store` in step with one collection of the API server and reports each change."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        path: str,
        handler: Handler,
        *,
        max_backoff_seconds: float = 5.0,
        field_selector: str | None = None,
    ) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + path
        self.handler = handler
        # Listed and watched with this fieldSelector (ListWatch's ListOptions.FieldSelector): the
        # API server sends only matching objects, an object that starts matching as ADDED.
        self.query = {"fieldSelector": field_selector} if field_selector else {}
        self.store: dict[str, dict] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.max_backoff = max_backoff_seconds
        self.relists = 0

    async def run(self) -> None:
        """List and watch until cancelled."""
        backoff = 0.05
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Expired:
                need_list = True
                self.relists += 1
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                log.debug("reflector %s: %s; retrying in %.2fs", self.url, exc, backoff)
                await asyncio.sleep(backoff * (1 + random.random() / 2))
                backoff = min(backoff * 2, self.max_backoff)
            except Exception:  # a handler bug must not end the watch for good: start over
                log.exception("reflector %s: handler failed; relisting", self.url)
                need_list = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    async def _list(self) -> None:
        async with self.session.get(self.url, params=self.query) as response:
            if response.status == 410:
                raise Expired()
            if response.status != 200:
                raise aiohttp.ClientResponseError(
                    response.request_info, (), status=response.status, message=await response.text()
                )
            body = await response.json(content_type=None)
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        fresh = {object_key(item): item for item in body.get("items") or []}
        for key in [k for k in self.store if k not in fresh]:
            gone = self.store.pop(key)
            self.handler("DELETED", gone, gone)
        for key, item in fresh.items():
            old = self.store.get(key)
            self.store[key] = item
            self.handler("MODIFIED" if old is not None else "ADDED", item, old)
        self.synced.set()

    async def _watch(self) -> None:
        params = {
            **self.query,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(int(MIN_WATCH_TIMEOUT_SECONDS * (1 + random.random()))),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=10)
        async with self.session.get(self.url, params=params, timeout=timeout) as response:
            if response.status == 410:
                raise Expired()
            if response.status != 200:
                raise aiohttp.ClientResponseError(
                    response.request_info, (), status=response.status, message=await response.text()
                )
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                buffer += chunk
                start = 0
                while True:
                    end = buffer.find(b"\n", start)
                    if end < 0:
                        break
                    line = bytes(buffer[start:end]).strip()
                    start = end + 1
                    if line:
                        self._event(json.loads(line))
                del buffer[:start]

    def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise Expired()
            raise ValueError(f"watch error: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if kind == "BOOKMARK":
            return
        key = object_key(obj)
        old = self.store.get(key)
        if kind == "DELETED":
            self.store.pop(key, None)
            self.handler("DELETED", obj, old)
        elif kind in ("ADDED", "MODIFIED"):
            self.store[key] = obj
            self.handler(kind, obj, old)


async def run_synced(first: ReflectorLike, second: ReflectorLike, work: Callable[[], Any], ready: asyncio.Event,
                     also_cancel: Callable[[], list[asyncio.Future]] = list) -> None:
    """A controller's main loop, as kube-controller-manager's run WaitForCacheSync before workers:
    list and watch `first`, then once it has synced `second` and the work loop; set `ready` when both
    caches are synced; run until cancelled, then cancel the watches, the workers and `also_cancel()`."""
    tasks = [asyncio.ensure_future(first.run())]
    try:
        await first.synced.wait()
        tasks += [asyncio.ensure_future(second.run()), asyncio.ensure_future(work())]
        await second.synced.wait()
        ready.set()
        await asyncio.gather(*tasks)
    finally:
        pending = [*tasks, *also_cancel()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


class SharedInformers:
    """One list+watch per collection for several controllers of one process, as
    kube-controller-manager's controllers share theirs (client-go tools/cache/shared_informer.go,
    informers.NewSharedInformerFactory in cmd/kube-controller-manager/app/controllermanager.go):
    the API server sends each change once to the process, not once per controller."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._shared: dict[str, _Shared] = {}

    def reflector(self, path: str, handler: Handler) -> _Handle:
        """A handle on the shared reflector of `path` that also calls `handler` for each change."""
        shared = self._shared.get(path)
        if shared is None:
            shared = self._shared[path] = _Shared(self.base_url, path)
        return _Handle(shared, handler)

    async def stop(self) -> None:
        for shared in self._shared.values():
            await shared.stop()


def reflector_for(session: aiohttp.ClientSession, base_url: str, path: str, handler: Handler,
                  shared: SharedInformers | None) -> ReflectorLike:
    """A Reflector of the controller's own, or its handle on the process's shared one."""
    if shared is None:
        return Reflector(session, base_url, path, handler)
    return shared.reflector(path, handler)


class _Shared:
    """The one Reflector of a path, on its own session, calling every registered handler."""

    def __init__(self, base_url: str, path: str) -> None:
        self.base_url = base_url
        self.path = path
        self.handlers: list[Handler] = []
        self.store: dict[str, dict] = {}
        self.synced = asyncio.Event()
        self.reflector: Reflector | None = None
        self._task: asyncio.Future | None = None

    def add(self, handler: Handler) -> None:
        """Call `handler` for every change from now on; once listed, first for what is there as
        ADDED (as AddEventHandler on a started informer does)."""
        self.handlers.append(handler)
        if self.synced.is_set():
            for obj in list(self.store.values()):
                handler("ADDED", obj, None)

    def _dispatch(self, kind: str, obj: dict, previous: dict | None) -> None:
        """Every handler gets the change; a failure (after all were called) makes the reflector relist."""
        failure: Exception | None = None
        for handler in list(self.handlers):
            try:
                handler(kind, obj, previous)
            except Exception as exc:  # re-raised below, once the others have run
                failure = failure or exc
        if failure is not None:
            raise failure

    async def _run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            self.reflector = Reflector(session, self.base_url, self.path, self._dispatch)
            self.reflector.store = self.store
            self.reflector.synced = self.synced
            await self.reflector.run()

    def start(self) -> asyncio.Future:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


class _Handle:
    """What a controller holds of a shared reflector, used as its own Reflector: `store`,
    `synced` (once its handler has been told of the listed objects) and `run`, which adds the
    handler only when called (so run_synced's order, this collection after that one, holds),
    starts the shared reflector if nobody has, and lasts until cancelled without stopping it."""

    def __init__(self, shared: _Shared, handler: Handler) -> None:
        self._shared = shared
        self._handler = handler
        self.store = shared.store
        self.synced = asyncio.Event()

    @property
    def resource_version(self) -> str:
        return self._shared.reflector.resource_version if self._shared.reflector is not None else ""

    @property
    def relists(self) -> int:
        return self._shared.reflector.relists if self._shared.reflector is not None else 0

    async def run(self) -> None:
        self._shared.add(self._handler)
        task = self._shared.start()
        await self._shared.synced.wait()
        self.synced.set()
        await asyncio.shield(task)


#: What reflector_for gives a controller: its own Reflector, or its handle on a shared one.
ReflectorLike = Reflector | _Handle
