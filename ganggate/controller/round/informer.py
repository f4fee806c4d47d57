"""A list-then-watch informer over raw JSON, like client-go's Reflector, for nodes and pods.

List with paging (limit/continue), then watch from the list's resourceVersion with bookmarks;
BOOKMARK events only move the resourceVersion; a 410 Gone (HTTP status or an ERROR event,
k8s.io/client-go/tools/cache/reflector.go) relists; any other failure reconnects with
exponential backoff and jitter. Responses are parsed from JSON directly (no model objects) so
10,000s of pods stay cheap. The informer hands each change to callbacks: `on_list(objects)`
after every (re)list (awaited when it returns an awaitable: the watch starts once it is done) and
`on_event(type, object)` per event; it keeps a store (key -> object)
unless told not to (`keep_store=False`: the controller's ClusterState is its own store, and a
second copy of 100,000 pod objects would be most of its memory, issue #11). With `convert`, a
list reads each page into the caller's form as the page arrives (client-go's Reflector pages
its lists too, tools/cache/reflector.go with tools/pager, but keeps every object), so no more
than one page of objects is alive at once and on_list gets the converted ones.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

# How long a list converts objects, or a chunk of watch events is applied, before the event loop
# gets a turn: at 100,000 pods a page of 500 converted in one go held the loop 13 ms on a quiet
# machine (three times that under load), and a chunk of a release's thousands of watch events
# longer (bench/bench_loop_stall.py). Short, because a task that yields with sleep(0) runs again
# before a timer that fell due meanwhile is served: a waiting task sees two or three slices.
SLICE_SECONDS = 0.002


class Gone(Exception):
    """The resourceVersion we watch from is too old (410): relist."""


def object_key(obj: dict) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


class Informer:
    """Keeps the caller (and a store, unless keep_store is False) of one kind of object in
    step with the API server."""

    def __init__(self, list_fn: Callable[..., Any], kind: str, *,
                 on_list: Callable[[list[Any]], Awaitable[None] | None], on_event: Callable[[str, dict], None],
                 page_size: int = 500, watch_timeout: int = 300, metrics: Any = None,
                 backoff_base: float = 0.2, backoff_cap: float = 10.0,
                 convert: Callable[[dict], Any] | None = None, keep_store: bool = True,
                 freeze_pages: bool = False) -> None:
        self.list_fn = list_fn
        self.kind = kind
        self.on_list = on_list
        self.on_event = on_event
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.metrics = metrics
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.convert = convert
        self.keep_store = keep_store
        # After each page of a list, gc.freeze(): the converted objects are long-lived, and a
        # full collection that walks the growing list on the loop took 30-160 ms at 20,000 pods
        # (bench/bench_loop_stall.py); for a caller that freezes its picture after a relist anyway.
        self.freeze_pages = freeze_pages
        self.store: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.synced = False
        self.relists = 0
        self.watch_restarts = 0

    async def list(self) -> None:
        """List everything (page by page, each page converted as it comes) and replace the store."""
        items: list[Any] = []
        store: dict[str, dict] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size}
            if token:
                kwargs["_continue"] = token
            body = await call_json(self.list_fn, verb="list", metrics=self.metrics, timeout=60.0, **kwargs)
            page = body.get("items") or []
            if self.keep_store:
                store.update((object_key(o), o) for o in page)
            if self.convert is None:
                items.extend(page)
            else:
                convert, deadline = self.convert, time.perf_counter() + SLICE_SECONDS
                for obj in page:
                    items.append(convert(obj))
                    if time.perf_counter() > deadline:
                        await asyncio.sleep(0)
                        deadline = time.perf_counter() + SLICE_SECONDS
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            del body, page  # this page's objects go now, not at the end of the list
            if self.freeze_pages:
                gc.freeze()
            if not token:
                self.resource_version = meta.get("resourceVersion")
                break
        self.store = store
        self.relists += 1
        applied = self.on_list(items)
        if inspect.isawaitable(applied):  # the caller applies it off the loop: the watch starts after
            await applied
        self.synced = True

    async def watch(self) -> None:
        """Watch from resource_version until the server ends the watch; raise Gone on 410."""
        try:
            resp = await self.list_fn(
                watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout, _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=self.watch_timeout + 30, sock_connect=10),
            )
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            if self.metrics is not None:
                self.metrics.api_error("watch", 0)
            raise ApiCallError(0, type(exc).__name__, str(exc)) from exc
        try:
            if resp.status != 200:
                data = await resp.read()
                try:
                    status = orjson.loads(data)
                except ValueError:
                    status = {}
                if self.metrics is not None:
                    self.metrics.api_error("watch", resp.status)
                if resp.status == 410:
                    raise Gone(status.get("message", "gone"))
                raise ApiCallError(resp.status, str(status.get("reason") or resp.reason),
                                   str(status.get("message") or ""))
            buffer = b""
            async for chunk in resp.content.iter_any():
                # Every whole line of the chunk at once (splitting one line off at a time copied
                # the rest of the chunk for each: quadratic in a burst of events).
                *lines, buffer = (buffer + chunk).split(b"\n")
                deadline = time.perf_counter() + SLICE_SECONDS
                for line in lines:
                    if line.strip():
                        self._handle(orjson.loads(line))
                    if time.perf_counter() > deadline:
                        await asyncio.sleep(0)
                        deadline = time.perf_counter() + SLICE_SECONDS
            if buffer.strip():
                self._handle(orjson.loads(buffer))
        except (TimeoutError, aiohttp.ClientError, ConnectionError, ValueError) as exc:
            if self.metrics is not None:
                self.metrics.api_error("watch", 0)
            raise ApiCallError(0, type(exc).__name__, str(exc)) from exc
        finally:
            resp.release()

    def _handle(self, event: dict) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(obj.get("message", "gone"))
            raise ApiCallError(int(code or 0), str(obj.get("reason") or "WatchError"), str(obj.get("message") or ""))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        if self.keep_store:
            key = object_key(obj)
            if kind == "DELETED":
                self.store.pop(key, None)
            else:
                self.store[key] = obj
        if rv:
            self.resource_version = rv
        self.on_event(kind, obj)

    async def run(self) -> None:
        """List and watch forever (until cancelled), relisting on 410 and backing off on errors."""
        failures = 0
        need_list = True
        while True:
            try:
                if need_list:
                    await self.list()
                    need_list = False
                await self.watch()
                self.watch_restarts += 1
                failures = 0
                await asyncio.sleep(0.05)  # a server that ends watches at once must not spin us
            except Gone as exc:
                log.info("%s watch: resourceVersion %s expired (%s); relisting", self.kind, self.resource_version, exc)
                need_list = True
                failures = 0
            except ApiCallError as exc:
                failures += 1
                ceiling = min(self.backoff_cap, self.backoff_base * 2 ** min(failures, 10))
                delay = exc.retry_after if exc.retry_after is not None else random.uniform(ceiling / 2, ceiling)
                log.warning("%s %s failed (%s); retrying in %.2fs", self.kind,
                            "list" if need_list else "watch", exc, delay)
                await asyncio.sleep(delay)
