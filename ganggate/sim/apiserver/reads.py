"""The read verbs of kubesim's API server: get, list (pages, selectors, Tables) and watch
(k8s.io/apiserver/pkg/endpoints/handlers/get.go and watch.go), over the Store."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from ganggate.sim.apimachinery import errors, selectors
from ganggate.sim.apiserver import discovery
from ganggate.sim.apiserver.requests import (
    DEFAULT_WATCH_SECONDS,
    JSON,
    Target,
    _json_response,
    _requested_rv,
    decode_continue,
    encode_continue,
    parse_bool,
    wants_table,
)
from ganggate.sim.apiserver.store import Store
from ganggate.sim.apiserver.watch import dumps, event_line


def include_object(query: dict[str, str]) -> str:
    """The TableOptions' includeObject (Metadata when unset); 400 for another value (response.go asTable)."""
    value = query.get("includeObject") or "Metadata"
    if value not in discovery.INCLUDE_OBJECT:
        raise errors.bad_request(f'unrecognized includeObject value: "{value}"')
    return value


class Reads:
    """get, list and watch; mixed into ApiServer, whose store, faults and bookmarks they read."""

    # What they read of the ApiServer they are mixed into (set in ApiServer.__init__).
    store: Store
    bookmark_seconds: float

    def _check_not_ahead(self, requested: int | None) -> None:
        """A resourceVersion newer than the store's (a client that outlived a restarted simulator)
        is 504 `Too large resource version`, as the watch cache answers after waiting for it
        (k8s.io/apiserver/pkg/storage/errors.go NewTooLargeResourceVersionError)."""
        current = self.store.resource_version
        if requested is not None and requested > current:
            raise errors.ApiError(
                504, "Timeout", f"Too large resource version: {requested}, current: {current}",
                causes=[errors.Cause("", "ResourceVersionTooLarge", "Too large resource version")], retry_after=1,
            )

    def _get(self, target: Target, query: dict[str, str] | None = None) -> web.Response:
        info = target.info
        self._check_not_ahead(_requested_rv(query or {}))
        namespace = target.namespace or ""
        stored = self.store.lookup(info.key, namespace, target.name or "")
        if stored is None:
            raise errors.not_found(info.plural, target.name or "", info.group)
        if target.subresource in (None, "status"):
            return _json_response(None, raw=stored.raw)
        raise errors.method_not_allowed("GET", f"{info.plural}/{target.subresource}")

    def _list(self, target: Target, query: dict[str, str]) -> web.Response:
        info = target.info
        predicate = selectors.make_predicate(query.get("labelSelector"), query.get("fieldSelector"), info.key)
        limit = 0
        if query.get("limit"):
            try:
                limit = int(query["limit"])
            except ValueError as exc:
                raise errors.bad_request(f"invalid limit: {query['limit']}") from exc
        list_rv = self.store.resource_version
        self._check_not_ahead(_requested_rv(query))
        after = None
        if query.get("continue"):
            list_rv, after = decode_continue(query["continue"])
            if list_rv < self.store.hub.floor:
                raise errors.ApiError(
                    410, "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter, or use the continue token in this response to "
                    "retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the first "
                    "chunk was returned and now may show up in the list.",
                )
        items: list[bytes] = []
        last = None
        more = False
        remaining = 0
        node = selectors.node_name_equality(query.get("fieldSelector")) if info.key == "pods" else None
        source = (self.store.iter_node_pods(node, target.namespace, after) if node
                  else self.store.iter(info.key, target.namespace, after))
        for key, stored in source:
            if predicate is not None and not predicate(stored.obj):
                continue
            if limit and len(items) >= limit:
                more = True
                if predicate is None:
                    remaining = -1
                break
            items.append(stored.item)
            last = key
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if more and last is not None:
            meta["continue"] = encode_continue(list_rv, last)
            if remaining == -1:
                total_after = sum(1 for _ in (self.store.iter_node_pods(node, target.namespace, last) if node
                                              else self.store.iter(info.key, target.namespace, last)))
                meta["remainingItemCount"] = total_after
        head = dumps({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(items) + b"]}"
        return _json_response(None, raw=body)

    def _table(self, target: Target, items: list[dict[str, Any]], rv: str, token: str | None = None,
               query: dict[str, str] | None = None) -> web.Response:
        """A meta.k8s.io/v1 Table, as `kubectl get` asks for (pkg/printers/internalversion/printers.go),
        its rows carrying the objects as `includeObject` asks (kubectl's --sort-by and -o
        custom-columns ask for Object)."""
        include = include_object(query or {})
        return _json_response(discovery.table_of(target.info.kind, items, rv, token, include=include,
                                                 api_version=target.info.api_version))

    # ---- watch ---------------------------------------------------------------------------------------
    async def _watch(self, request: web.Request, target: Target, query: dict[str, str]) -> web.StreamResponse:
        info = target.info
        field_selector = query.get("fieldSelector")
        if target.name is not None:
            # GET .../pods/<name>?watch=true watches that one object (requestinfo.go turns the name
            # into a metadata.name field selector).
            field_selector = ",".join(filter(None, [field_selector, f"metadata.name={target.name}"]))
        predicate = selectors.make_predicate(query.get("labelSelector"), field_selector, info.key)
        timeout = DEFAULT_WATCH_SECONDS
        if query.get("timeoutSeconds"):
            try:
                timeout = max(0, int(query["timeoutSeconds"]))
            except ValueError as exc:
                raise errors.bad_request(f"invalid timeoutSeconds: {query['timeoutSeconds']}") from exc
        bookmarks = parse_bool(query.get("allowWatchBookmarks"))
        send_initial = _watch_list_options(query, bookmarks)
        rv_text = query.get("resourceVersion") or ""
        since: int | None = None
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise errors.bad_request(f"invalid resource version: {rv_text}") from exc
            self._check_not_ahead(since)
        as_table = wants_table(request.headers.get("Accept", ""))
        include = include_object(query) if as_table else "Metadata"
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            # resourceVersion unset or "0": synthetic ADDED events for the current state, then changes
            # (the watch cache serves "0" from its current state; docs/reference/using-api/api-concepts).
            initial = (s for _, s in self.store.iter(info.key, target.namespace)) if since is None or send_initial else ()
            watcher = self.store.hub.subscribe(info.key, target.namespace, predicate, None if send_initial else since, initial)
            if send_initial:
                # A watch-list stream (sendInitialEvents=true): the current state as ADDED events, then one
                # BOOKMARK annotated k8s.io/initial-events-end at the revision they show, then changes
                # (k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go processInterval; client-go's
                # reflector watchList waits for that bookmark). NotOlderThan an RV: the current state is.
                mark = {"kind": info.kind, "apiVersion": info.api_version,
                        "metadata": {"resourceVersion": str(self.store.resource_version),
                                     "annotations": {INITIAL_EVENTS_END: "true"}}}
                watcher.push_raw(event_line("BOOKMARK", dumps(mark)))
        except errors.ApiError as error:
            # An expired resourceVersion is an ERROR event in a 200 stream, as the watch cache does.
            await response.write(event_line("ERROR", dumps(error.status())))
            await response.write_eof()
            return response
        headers = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + self.bookmark_seconds
        try:
            while True:
                lines = watcher.drain()
                if lines and as_table:
                    # The column definitions come with the first event only.
                    lines = [discovery.table_event_line(info.kind, line, headers and i == 0, include, info.api_version)
                             for i, line in enumerate(lines)]
                    headers = False
                if lines:
                    await response.write(b"".join(lines))
                if watcher.closed and not watcher.lines:
                    if watcher.error:
                        await response.write(watcher.error)
                    break
                now = loop.time()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    # Everything up to the current revision has been queued to this watcher already.
                    mark = {"kind": info.kind, "apiVersion": info.api_version,
                            "metadata": {"resourceVersion": str(self.store.resource_version)}}
                    await response.write(event_line("BOOKMARK", dumps(mark)))
                    next_bookmark = now + self.bookmark_seconds
                wait = deadline - now
                if bookmarks:
                    wait = min(wait, max(0.0, next_bookmark - now))
                await watcher.wait(wait)
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.store.hub.unsubscribe(watcher)
        try:
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return response



INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _watch_list_options(query: dict[str, str], bookmarks: bool) -> bool:
    """Whether a watch asks for a watch-list stream; 422 for options the real server refuses with it
    (k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go validateWatchOptions)."""
    match = query.get("resourceVersionMatch", "")
    if "sendInitialEvents" not in query:
        return False
    send_initial = parse_bool(query.get("sendInitialEvents"))
    causes: list[errors.Cause] = []
    if match != "NotOlderThan":
        causes.append(errors.forbidden("resourceVersionMatch",
                                       "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
    if send_initial and not bookmarks:
        causes.append(errors.forbidden("allowWatchBookmarks", "sendInitialEvents requires setting allowWatchBookmarks to true"))
    if causes:
        raise errors.invalid("ListOptions", "", causes, group="meta.k8s.io")
    return send_initial
