"""kubesim's HTTP API: the routes of kube-apiserver for the resources in ganggate.sim.discovery.

Why this module is long: it is the request pipeline of every verb (routing, reads, watch, the
create/update/patch/delete pipelines, binding, eviction), which share the target, admission and
error plumbing; per-kind rules live elsewhere (validation.py, strategies.py, gc.py,
fieldvalidation.py, openapi.py).

Requests go through the real server's order (k8s.io/apiserver/pkg/endpoints/handlers/create.go,
update.go, patch.go, delete.go; k8s.io/apiserver/pkg/registry/generic/registry/store.go):
decode + default -> mutating admission (pods, CREATE/UPDATE, not subresources) -> strategy
PrepareForCreate/PrepareForUpdate -> validation -> store. Errors are Status objects
(ganggate.sim.errors). Watches stream newline-delimited JSON events from ganggate.sim.watch.

Simplifications (see docs/kubesim.md): no authentication or authorization; JSON only (no
protobuf); pods are deleted gracefully (deletion.py), other
kinds at once (no finalizers); a namespace's deletion removes its objects at once; `continue` pages show the
current state after the page boundary rather than an etcd snapshot; get/list ignore the
resourceVersion they are given and serve the latest state (always "not older than").
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ganggate.sim import deletion, discovery, errors, fieldvalidation, gc, openapi, patch as patching, selectors, services
from ganggate.sim import eviction, pod_logs, priority, strategies, validation
from ganggate.sim.discovery import ResourceInfo
from ganggate.sim import faults as faults_module
from ganggate.sim.faults import FaultInjector
from ganggate.sim.store import Store
from ganggate.sim.watch import Stored, clone, dumps, event_line

log = logging.getLogger("ganggate.sim.apiserver")

JSON = "application/json"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# NamespaceLifecycle admission (plugin/pkg/admission/namespace/lifecycle) refuses to delete these.
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
USER_INFO = {"username": "kubesim-admin", "uid": "kubesim-admin", "groups": ["system:masters", "system:authenticated"]}
# Watch timeouts: the real server picks a random duration in [minRequestTimeout, 2*minRequestTimeout)
# with --min-request-timeout=1800 (k8s.io/apiserver/pkg/endpoints/handlers/get.go ListResource).
DEFAULT_WATCH_SECONDS = 1800
# names.SimpleNameGenerator (k8s.io/apiserver/pkg/storage/names/generate.go): 5 random characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


MAX_UPDATE_ATTEMPTS = 5


class ObjectChanged(Exception):
    """The object was written by someone else while this update was being admitted."""


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses."""

    info: ResourceInfo
    namespace: str | None
    name: str | None
    subresource: str | None


def _not_found_path() -> errors.ApiError:
    return errors.ApiError(404, "NotFound", "the server could not find the requested resource", kind="", name="")


def parse_target(group: str, version: str, parts: list[str]) -> Target:
    """Resolve the path below /api/v1 or /apis/<group>/<version> (404 for anything not served)."""
    namespace: str | None = None
    if len(parts) >= 3 and parts[0] == "namespaces":
        candidate = discovery.lookup(group, version, parts[2])
        if candidate is not None and candidate.namespaced:
            namespace = parts[1]
            parts = parts[2:]
    if not parts or len(parts) > 3:
        raise _not_found_path()
    info = discovery.lookup(group, version, parts[0])
    if info is None or (info.namespaced and namespace is None and len(parts) > 1):
        raise _not_found_path()
    name = parts[1] if len(parts) > 1 else None
    sub = parts[2] if len(parts) > 2 else None
    if sub is not None and sub not in info.subresources:
        raise _not_found_path()
    if name == "":
        raise _not_found_path()
    return Target(info, namespace, name, sub)


def verb_of(method: str, target: Target, query: dict[str, str]) -> str:
    """The Kubernetes verb of a request (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go)."""
    if method == "GET":
        if parse_bool(query.get("watch")) and target.subresource is None:
            return "watch"  # on a collection, or on one object (the legacy form of metadata.name=)
        return "list" if target.name is None else "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "deletecollection" if target.name is None else "delete"
    raise errors.method_not_allowed(method, target.info.plural)


def wants_table(accept: str) -> bool:
    """kubectl get asks for `application/json;as=Table;v=v1;g=meta.k8s.io` first."""
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def parse_bool(value: str | None) -> bool:
    """strconv.ParseBool, as the query parameter decoder uses it (kubernetes-asyncio sends `True`)."""
    return value in ("1", "t", "T", "TRUE", "true", "True")


def encode_continue(rv: int, last: tuple[str, str]) -> str:
    token = {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{last[0]}/{last[1]}\u0000"}
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        namespace, _, name = data["start"].rstrip("\u0000").partition("/")
        return int(data["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc


def _requested_rv(query: dict[str, str]) -> int | None:
    """The resourceVersion a get or list asks for ("" and "0" mean any), or None."""
    text = query.get("resourceVersion") or ""
    if text in ("", "0"):
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise errors.bad_request(f"invalid resource version: {text}") from exc


def _dry_run(query: dict[str, str]) -> bool:
    value = query.get("dryRun")
    if value is None:
        return False
    if value != "All":
        raise errors.bad_request(f'Invalid dry run value: "{value}": supported values: "All"')
    return True


def _status_success(code: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        body["details"] = details
    return body


def _json_response(body: Any, status: int = 200, raw: bytes | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=raw if raw is not None else dumps(body), status=status, content_type=JSON, headers=headers)


def _warned(response: web.Response, warnings: list[str]) -> web.Response:
    """Add the Warning header of unknown fields under fieldValidation=Warn."""
    if warnings:
        response.headers["Warning"] = fieldvalidation.warning_header(warnings)
    return response


def error_response(error: errors.ApiError) -> web.Response:
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, int(error.retry_after)))
    return web.Response(body=dumps(error.status()), status=error.code, content_type=JSON, headers=headers)


class ApiServer:
    """The API: routes, the write pipeline and the watch streams, over a Store."""

    def __init__(
        self,
        store: Store | None = None,
        faults: FaultInjector | None = None,
        *,
        bookmark_seconds: float = 5.0,
        admission: Any = None,
    ) -> None:
        self.store = store or Store()
        self.faults = faults or FaultInjector(self.store.hub.close_all, self.store.compact)
        self.bookmark_seconds = bookmark_seconds
        self._admission = admission
        self._admission_loaded = admission is not None
        self.requests = 0

    # ---- setup -----------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        """Create the namespaces every cluster starts with."""
        for name in DEFAULT_NAMESPACES:
            if self.store.lookup("namespaces", "", name) is None:
                ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                validation.default_namespace(ns)
                self.store.create("namespaces", ns)
        if self.store.lookup("services", "default", "kubernetes") is None:
            self.store.create("services", services.kubernetes_service())
        for pc in priority.system_classes():  # storage_scheduling.go AddSystemPriorityClasses
            if self.store.lookup(priority.KEY, "", pc["metadata"]["name"]) is None:
                priority.prepare_create(pc)
                self.store.create(priority.KEY, pc)

    def admission(self) -> Any:
        """The mutating admission chain, if kubesim/admission.py is installed (imported lazily)."""
        if not self._admission_loaded:
            self._admission_loaded = True
            try:
                from ganggate.sim.admission import AdmissionChain
            except ModuleNotFoundError as exc:
                if exc.name != "ganggate.sim.admission":
                    raise
                self._admission = None
            else:
                self._admission = AdmissionChain(
                    lambda: self.store.list("mutatingwebhookconfigurations"),
                    lambda name: self.store.get("namespaces", None, name),
                )
        return self._admission

    def set_admission(self, chain: Any) -> None:
        """Use this admission chain (an object with AdmissionChain's `admit`), or None for none."""
        self._admission = chain
        self._admission_loaded = True

    async def close(self) -> None:
        self.store.hub.close_all()
        chain = self._admission
        if chain is not None and hasattr(chain, "close"):
            await chain.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/version", self._version)
        app.router.add_get("/version/", self._version)
        for path in ("/healthz", "/readyz", "/livez"):
            app.router.add_get(path, self._ok)
        app.router.add_get("/api", self._api)
        app.router.add_get("/api/", self._api)
        app.router.add_get("/apis", self._apis)
        app.router.add_get("/apis/", self._apis)
        app.router.add_get("/openapi/v3", self._openapi_root)
        app.router.add_get("/openapi/v3/{tail:.+}", self._openapi_gv)
        app.router.add_get("/kubesim/faults", self._faults_get)
        app.router.add_post("/kubesim/faults", self._faults_add)
        app.router.add_delete("/kubesim/faults", self._faults_clear)
        app.router.add_post("/kubesim/faults/cut-watches", self._faults_cut)
        app.router.add_post("/kubesim/faults/compact", self._faults_compact)
        app.router.add_post("/kubesim/faults/fail-pod", self._faults_fail_pod)
        app.router.add_route("*", "/api/{version}", self._core_root)
        app.router.add_route("*", "/api/{version}/{tail:.+}", self._core)
        app.router.add_route("*", "/apis/{group}", self._group_root)
        app.router.add_route("*", "/apis/{group}/{version}", self._group_version_root)
        app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", self._grouped)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_shutdown(self, app: web.Application) -> None:
        await self.close()

    # ---- discovery -------------------------------------------------------------------------------
    async def _version(self, request: web.Request) -> web.Response:
        return _json_response(discovery.version_info())

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _api(self, request: web.Request) -> web.Response:
        return _json_response(discovery.api_versions(request.host))

    async def _apis(self, request: web.Request) -> web.Response:
        return _json_response(discovery.api_group_list())

    async def _core_root(self, request: web.Request) -> web.Response:
        doc = discovery.resource_list("", request.match_info["version"]) if request.method == "GET" else None
        return _json_response(doc) if doc else error_response(_not_found_path())

    async def _group_root(self, request: web.Request) -> web.Response:
        doc = discovery.api_group(request.match_info["group"]) if request.method == "GET" else None
        return _json_response(doc) if doc else error_response(_not_found_path())

    async def _group_version_root(self, request: web.Request) -> web.Response:
        doc = None
        if request.method == "GET":
            doc = discovery.resource_list(request.match_info["group"], request.match_info["version"])
        return _json_response(doc) if doc else error_response(_not_found_path())

    async def _openapi_root(self, request: web.Request) -> web.Response:
        return _json_response(openapi.discovery_document(), headers={"Cache-Control": "no-cache, private"})

    async def _openapi_gv(self, request: web.Request) -> web.StreamResponse:
        """One group-version's document (kube-openapi handler3.go: immutable when asked for by hash)."""
        gv = openapi.parse_gv_path(request.match_info["tail"])
        data = openapi.document_bytes(*gv) if gv else None
        if gv is None or data is None:
            return error_response(_not_found_path())
        current = openapi.document_hash(*gv)
        asked = request.query.get("hash")
        if asked is not None and asked != current:
            raise web.HTTPMovedPermanently(f"{request.path}?hash={current}")
        cache = "public, immutable" if asked else "no-cache, private"
        return _json_response(None, raw=data, headers={"Cache-Control": cache, "Etag": f'"{current}"'})

    # ---- faults over HTTP ---------------------------------------------------------------------------
    async def _faults_get(self, request: web.Request) -> web.Response:
        return _json_response(self.faults.describe())

    async def _faults_add(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            if "latency" in body or "seconds" in body:
                rule = self.faults.latency(float(body.get("latency", body.get("seconds"))), body.get("verb"), body.get("resource"))
            else:
                rule = self.faults.fail(
                    verb=body.get("verb"), resource=body.get("resource"), status=int(body.get("status", 500)),
                    count=int(body.get("count", 1)), retry_after=body.get("retry_after", body.get("retryAfter")),
                    subresource=body.get("subresource"), namespace=body.get("namespace"),
                )
        except (ValueError, TypeError) as exc:
            return error_response(errors.bad_request(f"invalid fault rule: {exc}"))
        return _json_response(vars(rule), status=201)

    async def _faults_clear(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return _json_response(self.faults.describe())

    async def _faults_cut(self, request: web.Request) -> web.Response:
        return _json_response({"cut": self.faults.cut_watches()})

    async def _faults_compact(self, request: web.Request) -> web.Response:
        return _json_response({"compactedResourceVersion": str(self.faults.compact())})

    async def _faults_fail_pod(self, request: web.Request) -> web.Response:
        """Make the kubelet stand-in fail a pod's containers now (faults.fail_pod_update)."""
        try:
            body = json.loads(await request.read() or b"{}")
            if not isinstance(body, dict) or not body.get("name"):
                raise ValueError("the body must be a JSON object with the pod's name")
            namespace = str(body.get("namespace") or "default")
            code = body.get("exitCode")
            stored = self.store.lookup("pods", namespace, str(body["name"]))
            if stored is None:
                return error_response(errors.not_found("pods", str(body["name"])))
            new = faults_module.fail_pod_update(clone(stored.obj), body.get("reason"), None if code is None else int(code))
        except (ValueError, TypeError) as exc:
            return error_response(errors.bad_request(f"invalid fail-pod request: {exc}"))
        return _json_response(self.store.update("pods", new, expect_rv=stored.obj["metadata"]["resourceVersion"]))

    # ---- resource requests ----------------------------------------------------------------------------
    async def _core(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "", request.match_info["version"], request.match_info["tail"])

    async def _grouped(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return await self._serve(request, info["group"], info["version"], info["tail"])

    async def _serve(self, request: web.Request, group: str, version: str, tail: str) -> web.StreamResponse:
        self.requests += 1
        try:
            target = parse_target(group, version, [p for p in tail.split("/")])
            query = dict(request.query)
            verb = verb_of(request.method, target, query)
            allowed = target.info.subresources[target.subresource][1] if target.subresource else target.info.verbs
            if verb not in allowed:
                raise errors.method_not_allowed(request.method, target.info.plural if not target.subresource else f"{target.info.plural}/{target.subresource}")
            delay = self.faults.delay_for(verb, target.info.plural)
            if delay > 0:
                await asyncio.sleep(delay)
            injected = self.faults.take(verb, target.info.plural, target.subresource, target.namespace, target.name)
            if injected is not None:
                raise injected
            if verb == "watch":
                return await self._watch(request, target, query)
            if target.subresource == "log":
                return await pod_logs.serve(request, self.store, target.namespace or "", target.name or "")
            if verb == "get":
                if wants_table(request.headers.get("Accept", "")) and target.subresource is None:
                    return self._table(target, [self._current(target)], str(self.store.resource_version))
                return self._get(target, query)
            if verb == "list":
                if wants_table(request.headers.get("Accept", "")):
                    listed = json.loads(self._list(target, query).body)
                    return self._table(target, listed["items"], listed["metadata"].get("resourceVersion", ""),
                                       listed["metadata"].get("continue"))
                return self._list(target, query)
            body = await self._body(request) if request.method in ("POST", "PUT", "PATCH") else None
            if verb == "create":
                return await self._create(target, body, query)
            if verb == "update":
                return await self._update(target, body, query)
            if verb == "patch":
                return await self._patch(target, body, request.headers.get("Content-Type", ""), query)
            if verb == "delete":
                options = await self._delete_options(request, query)
                return self._delete(target, options, query)
            if verb == "deletecollection":
                return self._delete_collection(target, query)
            raise errors.method_not_allowed(request.method, target.info.plural)
        except errors.ApiError as error:
            return error_response(error)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug in kubesim: answer as the real server does, and log it
            log.exception("internal error serving %s %s", request.method, request.path)
            return error_response(errors.internal_error(str(exc)))

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        content_type = request.headers.get("Content-Type", JSON).split(";")[0].strip().lower()
        if request.method == "PATCH":
            if content_type == patching.APPLY_PATCH or content_type not in patching.SUPPORTED:
                raise errors.unsupported_media_type(content_type)
        elif content_type not in (JSON, "", "*/*"):
            if content_type in ("application/yaml", "application/vnd.kubernetes.protobuf"):
                raise errors.ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json (got {content_type})")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc

    async def _delete_options(self, request: web.Request, query: dict[str, str]) -> dict[str, Any]:
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            options = json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"json parse error: {exc}") from exc
        return options if isinstance(options, dict) else {}

    # ---- reads -------------------------------------------------------------------------------------
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

    def _table(self, target: Target, items: list[dict[str, Any]], rv: str, token: str | None = None) -> web.Response:
        """A meta.k8s.io/v1 Table, as `kubectl get` asks for (pkg/printers/internalversion/printers.go)."""
        return _json_response(discovery.table_of(target.info.kind, items, rv, token))

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
        rv_text = query.get("resourceVersion") or ""
        since: int | None = None
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise errors.bad_request(f"invalid resource version: {rv_text}") from exc
            self._check_not_ahead(since)
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            # resourceVersion unset or "0": synthetic ADDED events for the current state, then changes
            # (the watch cache serves "0" from its current state; docs/reference/using-api/api-concepts).
            initial = (s for _, s in self.store.iter(info.key, target.namespace)) if since is None else ()
            watcher = self.store.hub.subscribe(info.key, target.namespace, predicate, since, initial)
        except errors.ApiError as error:
            # An expired resourceVersion is an ERROR event in a 200 stream, as the watch cache does.
            await response.write(event_line("ERROR", dumps(error.status())))
            await response.write_eof()
            return response
        as_table = wants_table(request.headers.get("Accept", ""))
        headers = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + self.bookmark_seconds
        try:
            while True:
                lines = watcher.drain()
                if lines and as_table:
                    # The column definitions come with the first event only.
                    lines = [discovery.table_event_line(info.kind, line, headers and i == 0) for i, line in enumerate(lines)]
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

    # ---- writes: shared pieces ----------------------------------------------------------------------------
    def _check_body(self, target: Target, body: Any, expected_kind: str | None = None) -> dict[str, Any]:
        info = target.info
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        kind = expected_kind or info.kind
        api_version = body.get("apiVersion")
        expected_version = info.api_version
        if expected_kind in ("Binding",):
            expected_version = "v1"
        if expected_kind == "Eviction":
            expected_version = None  # policy/v1 or policy/v1beta1
        if api_version and expected_version and api_version != expected_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({expected_version})")
        if body.get("kind") and body["kind"] != kind:
            raise errors.bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind ({kind})")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if info.namespaced and target.namespace is not None:
            if meta.get("namespace") and meta["namespace"] != target.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = target.namespace
        return body

    def _require_namespace(self, namespace: str | None) -> None:
        """NamespaceLifecycle admission: no namespaced object in a namespace that does not exist."""
        if namespace and self.store.lookup("namespaces", "", namespace) is None:
            raise errors.not_found("namespaces", namespace)

    def _default(self, info: ResourceInfo, obj: dict[str, Any]) -> None:
        if info.kind == "Pod" and info.group == "":
            validation.default_pod(obj)
        elif info.kind == "Node":
            validation.default_node(obj)
        elif info.kind == "Namespace":
            validation.default_namespace(obj)
        elif (strategy := strategies.for_key(info.key)) is not None:
            strategy.default(obj)

    async def _admit(self, operation: str, target: Target, obj: dict[str, Any], old: dict[str, Any] | None,
                     dry_run: bool) -> dict[str, Any]:
        """Mutating admission for pods (kubesim/admission.py), then defaulting again as after decode."""
        info = target.info
        if info.key != "pods" or target.subresource is not None:
            return obj
        chain = self.admission()
        if chain is None or not self.store.count("mutatingwebhookconfigurations.admissionregistration.k8s.io"):
            return obj  # no webhook configured: the chain could not change anything
        meta = obj.get("metadata") or {}
        try:
            result = await self._call_chain(chain, operation, info, meta, obj, old, dry_run)
        except errors.ApiError:
            raise
        except Exception as exc:
            if isinstance(getattr(exc, "code", None), int) and hasattr(exc, "message"):
                # AdmissionDenied: served as the Status the chain describes.
                details = getattr(exc, "details", None) or {}
                raise errors.ApiError(
                    exc.code, str(getattr(exc, "reason", "") or ""), str(exc.message),
                    name=details.get("name"), group=details.get("group"), kind=details.get("kind"),
                ) from exc
            raise
        self._default(info, result)
        return result

    @staticmethod
    async def _call_chain(chain: Any, operation: str, info: ResourceInfo, meta: dict[str, Any], obj: dict[str, Any],
                          old: dict[str, Any] | None, dry_run: bool) -> dict[str, Any]:
        return await chain.admit(
            operation=operation,
            kind={"group": info.group, "version": info.version, "kind": info.kind},
            resource={"group": info.group, "version": info.version, "resource": info.plural},
            sub_resource=None,
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            obj=obj,
            old_obj=old,
            dry_run=dry_run,
            user_info=USER_INFO,
        )

    def _invalid(self, info: ResourceInfo, obj: dict[str, Any], causes: list[errors.Cause]) -> errors.ApiError:
        name = (obj.get("metadata") or {}).get("name") or ""
        return errors.invalid(info.kind, name, causes, info.group)

    # ---- create ------------------------------------------------------------------------------------------
    async def create_object(self, target: Target, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """The create pipeline (also used in-process by the Simulator)."""
        info = target.info
        obj = self._check_body(target, body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            # etcd3 store Create (k8s.io/apiserver/pkg/storage/etcd3/store.go).
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choice(_NAME_ALPHABET) for _ in range(5))
        if info.namespaced:
            self._require_namespace(meta.get("namespace"))
        obj.setdefault("apiVersion", info.api_version)
        obj.setdefault("kind", info.kind)
        self._default(info, obj)
        if info.key == "pods":
            validation.default_toleration_seconds(obj)
        priority.admit(self.store, "CREATE", info.key, obj)  # the Priority admission plugin
        obj = await self._admit("CREATE", target, obj, None, dry_run)
        meta = obj.setdefault("metadata", {})
        # rest.BeforeCreate: system fields are the server's.
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        if info.key == "pods":
            # SchedulingGated's lastTransitionTime: podutil.UpdatePodCondition's metav1.Now(), the
            # server's clock, as creationTimestamp (pkg/registry/core/pod/strategy.go PrepareForCreate).
            validation.prepare_pod_create(obj, self.store.timestamp())
        elif info.key == "mutatingwebhookconfigurations.admissionregistration.k8s.io":
            meta["generation"] = 1
        strategy = strategies.for_key(info.key)
        if strategy is not None:
            strategy.prepare_create(obj)
        validation.drop_empty(obj)
        causes = strategy.validate(obj) if strategy is not None else validation.validate_create(info.kind, obj, info.namespaced)
        if not causes and info.key == "services":
            # The REST storage allocates after validation (pkg/registry/core/service/storage/storage.go beginCreate).
            others = (stored.obj for _, stored in self.store.iter("services"))
            causes = services.allocate(obj, others)
        if causes:
            raise self._invalid(info, obj, causes)
        if info.namespaced:
            self._require_namespace(meta.get("namespace"))
        if dry_run:
            if self.store.lookup(info.key, meta.get("namespace", "") if info.namespaced else "", meta["name"]):
                raise errors.already_exists(info.plural, meta["name"], info.group)
            meta.setdefault("uid", _uuid())
            meta.setdefault("creationTimestamp", self.store.timestamp())
            return obj
        return self.store.create(info.key, obj)

    async def _create(self, target: Target, body: Any, query: dict[str, str]) -> web.Response:
        dry_run = _dry_run(query)
        info = target.info
        if target.subresource == "binding":
            return self._bind(target, body, dry_run)
        if info.key == "bindings":
            if target.name is not None or target.namespace is None:
                raise errors.method_not_allowed("POST", info.plural)
            name = (body.get("metadata") or {}).get("name") if isinstance(body, dict) else None
            if not name:
                raise errors.invalid("Binding", "", [errors.required("metadata.name", "name or generateName is required")])
            pods = discovery.by_key("pods")
            return self._bind(Target(pods, target.namespace, name, "binding"), body, dry_run)
        if target.subresource == "eviction":
            return self._evict(target, body, dry_run)
        if target.name is not None:
            raise errors.method_not_allowed("POST", info.plural)
        if info.namespaced and target.namespace is None:
            raise errors.method_not_allowed("POST", info.plural)
        warnings = fieldvalidation.check(info.group, info.version, info.kind, body, fieldvalidation.directive(query))
        created = await self.create_object(target, body, dry_run)
        return _warned(_json_response(created, status=201), warnings)

    # ---- update and patch ---------------------------------------------------------------------------------
    def _stored(self, target: Target) -> Stored:
        """The stored object (its dict and its serialized bytes), or 404."""
        info = target.info
        stored = self.store.lookup(info.key, target.namespace or "", target.name or "")
        if stored is None:
            raise errors.not_found(info.plural, target.name or "", info.group)
        return stored

    def _current(self, target: Target) -> dict[str, Any]:
        return self._stored(target).obj

    async def update_object(self, target: Target, new: dict[str, Any], dry_run: bool = False,
                            retry_on_change: bool = False) -> dict[str, Any]:
        """The update pipeline for the main resource and the status subresource.

        Raises ObjectChanged when the object was written while admission ran and the caller can
        redo the update against the new state: always for a patch (retry_on_change, the patch is
        re-applied), for an update only when it carries no resourceVersion precondition.
        """
        info = target.info
        new = self._check_body(target, new)
        meta = new["metadata"]
        if meta.get("name") and meta["name"] != target.name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})")
        meta["name"] = target.name
        old = self._current(target)
        old_meta = old["metadata"]
        expect = meta.get("resourceVersion") or None
        if expect is not None and expect != old_meta["resourceVersion"]:
            raise errors.stale(info.plural, target.name or "", info.group)
        new.setdefault("apiVersion", info.api_version)
        new.setdefault("kind", info.kind)
        # rest.BeforeUpdate: system fields come from the stored object; an update never
        # removes or changes a deletion timestamp or grace period.
        for field in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if field in old_meta:
                meta[field] = old_meta[field]
            elif field.startswith("deletion"):
                meta.pop(field, None)
        self._default(info, new)
        strategy = strategies.for_key(info.key)
        if target.subresource == "status":
            if strategy is not None:
                strategy.prepare_status_update(new, old)
            validation.prepare_status_update(new, old)
        else:
            new = await self._admit("UPDATE", target, new, old, dry_run)
            priority.admit(self.store, "UPDATE", info.key, new)
            meta = new.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if field in old_meta:
                    meta[field] = old_meta[field]
            if info.key == "pods":
                validation.prepare_pod_update(new, old)
            elif strategy is not None:
                strategy.prepare_update(new, old)
            else:
                validation.prepare_generic_update(info.kind, new, old)
                if info.key == "mutatingwebhookconfigurations.admissionregistration.k8s.io":
                    changed = validation._normal(new.get("webhooks")) != validation._normal(old.get("webhooks"))
                    meta["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
        validation.drop_empty(new)
        if strategy is not None:
            causes = validation.validate_object_meta_update(new, old) + strategy.validate_update(new, old)
        else:
            causes = validation.validate_update(info.kind, new, old, info.namespaced, target.subresource)
        if causes:
            raise self._invalid(info, new, causes)
        latest = self.store.lookup(info.key, target.namespace or "", target.name or "")
        if latest is None:
            raise errors.not_found(info.plural, target.name or "", info.group)
        if latest.obj is not old:
            # Written meanwhile (while a webhook was called): a precondition fails; otherwise the
            # caller retries against the new state, as GuaranteedUpdate's tryUpdate loop does.
            if retry_on_change or expect is None:
                raise ObjectChanged()
            raise errors.stale(info.plural, target.name or "", info.group)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            # A no-op update writes nothing: same resourceVersion, no watch event (etcd3 GuaranteedUpdate).
            return old
        if dry_run:
            return new
        return self.store.update(info.key, new, expect_rv=old_meta["resourceVersion"])

    async def _update(self, target: Target, body: Any, query: dict[str, str]) -> web.Response:
        if target.name is None or target.subresource not in (None, "status"):
            raise errors.method_not_allowed("PUT", target.info.plural)
        dry_run = _dry_run(query)
        info = target.info
        warnings = fieldvalidation.check(info.group, info.version, info.kind, body,
                                         fieldvalidation.directive(query, "UpdateOptions"))
        for _ in range(MAX_UPDATE_ATTEMPTS):
            try:
                return _warned(_json_response(await self.update_object(target, clone(body), dry_run)), warnings)
            except ObjectChanged:
                continue
        raise errors.stale(target.info.plural, target.name, target.info.group)

    async def _patch(self, target: Target, body: Any, content_type: str, query: dict[str, str]) -> web.Response:
        """Apply the patch to the current object and update; retried against the latest state when
        the object changes while admission runs (handlers/patch.go, maxRetryWhenPatchConflicts)."""
        if target.name is None or target.subresource not in (None, "status"):
            raise errors.method_not_allowed("PATCH", target.info.plural)
        dry_run = _dry_run(query)
        mode = fieldvalidation.directive(query, "PatchOptions")
        info = target.info
        for _ in range(MAX_UPDATE_ATTEMPTS):
            stored = self._stored(target)
            current = stored.obj
            original = json.loads(stored.raw)  # a copy to patch
            patched = patching.apply_patch(content_type, original, body, in_place=True)
            warnings = fieldvalidation.check(info.group, info.version, info.kind, patched, mode, patch=True)
            meta = patched.get("metadata") if isinstance(patched.get("metadata"), dict) else None
            if meta is not None and meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise errors.stale(target.info.plural, target.name, target.info.group)
            try:
                return _warned(_json_response(await self.update_object(target, patched, dry_run, retry_on_change=True)),
                               warnings)
            except ObjectChanged:
                continue
        raise errors.stale(target.info.plural, target.name, target.info.group)

    # ---- binding and eviction ------------------------------------------------------------------------------
    def _bind(self, target: Target, body: Any, dry_run: bool) -> web.Response:
        """pods/binding (pkg/registry/core/pod/storage/storage.go BindingREST.Create, assignPod)."""
        binding = self._check_body(Target(target.info, target.namespace, target.name, None), body, "Binding")
        name = binding["metadata"].get("name") or target.name
        if name != target.name:
            raise errors.bad_request(f"the name of the object ({name}) does not match the name on the URL ({target.name})")
        target_ref = binding.get("target") or {}
        causes = []
        if target_ref.get("kind") and target_ref["kind"] != "Node":
            causes.append(errors.not_supported("target.kind", target_ref["kind"], ["Node", "<empty>"]))
        if not target_ref.get("name"):
            causes.append(errors.required("target.name"))
        if causes:
            raise errors.invalid("Binding", name, causes)
        stored = self._stored(target)
        pod = stored.obj
        spec = pod.get("spec") or {}

        def refuse(detail: str) -> errors.ApiError:
            return errors.conflict("pods/binding", target.name or "", detail)

        if pod["metadata"].get("deletionTimestamp"):
            raise refuse(f"pod {target.name} is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise refuse(f'pod {target.name} is already assigned to node "{spec["nodeName"]}"')
        if spec.get("schedulingGates"):
            raise refuse(f"pod {target.name} has non-empty .spec.schedulingGates")
        uid = binding["metadata"].get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise errors.conflict("pods", target.name or "",
                                  f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod['metadata'].get('uid')}")
        # The real server does not check that the node exists (setPodHostAndAnnotations).
        new = json.loads(stored.raw)  # a copy
        new["spec"]["nodeName"] = target_ref["name"]
        annotations = binding["metadata"].get("annotations") or {}
        if annotations:
            new["metadata"].setdefault("annotations", {}).update(annotations)
        # assignPod (pkg/registry/core/pod/storage/storage.go): podutil.UpdatePodCondition stamps
        # metav1.Now(), the server's clock, as creationTimestamp.
        set_condition(new, {"type": "PodScheduled", "status": "True"}, self.store.timestamp())
        if not dry_run:
            self.store.update(target.info.key, new, expect_rv=pod["metadata"]["resourceVersion"])
        return _json_response(_status_success(201), status=201)

    def _evict(self, target: Target, body: Any, dry_run: bool) -> web.Response:
        """pods/eviction (ganggate/sim/eviction.py): PodDisruptionBudgets, then the pod delete path."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        if body.get("kind") and body["kind"] != "Eviction":
            raise errors.bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind (Eviction)")
        name = (body.get("metadata") or {}).get("name") or target.name
        if name != target.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        eviction.evict(self.store, target.namespace or "", target.name or "", body,
                       lambda options: self._delete(target, options, {}), dry_run)
        return _json_response(_status_success(201), status=201)

    # ---- delete ------------------------------------------------------------------------------------------
    def _delete(self, target: Target, options: dict[str, Any], query: dict[str, str]) -> web.Response:
        info = target.info
        dry_run = _dry_run(query) or options.get("dryRun") == ["All"]
        current = self._current(target)
        preconditions = options.get("preconditions") or {}
        if info.key == "namespaces" and target.name in IMMORTAL_NAMESPACES:
            raise errors.ApiError(403, "Forbidden", f'namespaces "{target.name}" is forbidden: this namespace may not be deleted',
                                  name=target.name, kind="namespaces")
        strategy = strategies.for_key(info.key)
        policy = gc.propagation_policy(options, query, strategy.default_delete_policy if strategy else "Background")
        if info.key == "pods":
            # Graceful deletion (ganggate/sim/deletion.py); pods own no dependents kubesim collects.
            obj, gone = deletion.delete_pod(self.store, target.namespace or "", target.name or "", options, query, dry_run)
            accepted = not gone and options.get("orphanDependents") is False  # handlers/delete.go
            return _json_response(obj, status=202 if accepted else 200)
        if dry_run:
            return _json_response(None, raw=self.store.lookup(info.key, target.namespace or "", target.name or "").raw)
        meta = current["metadata"]
        if (preconditions.get("uid") in (None, meta.get("uid"))
                and preconditions.get("resourceVersion") in (None, meta.get("resourceVersion")) and info.namespaced):
            gc.prepare_delete(self.store, current, target.namespace, policy)  # a failing precondition is 409 below
        if info.key == "namespaces":
            # The namespace controller would delete the contents while the namespace is Terminating.
            for contained in discovery.RESOURCES:
                if contained.namespaced:
                    for key, _ in list(self.store.iter(contained.key, target.name)):
                        self.store.delete(contained.key, key[0], key[1])
        deleted = self.store.delete(info.key, target.namespace, target.name or "",
                                    expect_uid=preconditions.get("uid"), expect_rv=preconditions.get("resourceVersion"))
        del current
        return _json_response(deleted)

    def _delete_collection(self, target: Target, query: dict[str, str]) -> web.Response:
        info = target.info
        dry_run = _dry_run(query)
        predicate = selectors.make_predicate(query.get("labelSelector"), query.get("fieldSelector"), info.key)
        deleted: list[bytes] = []
        for key, stored in list(self.store.iter(info.key, target.namespace)):
            if predicate is not None and not predicate(stored.obj):
                continue
            if info.key == "namespaces" and key[1] in IMMORTAL_NAMESPACES:
                continue
            if info.key == "pods":
                last, _ = deletion.delete_pod(self.store, key[0], key[1], {}, query, dry_run)
            else:
                last = stored.obj if dry_run else self.store.delete(info.key, key[0], key[1])
            deleted.append(dumps(last))
        head = dumps({"kind": info.list_kind, "apiVersion": info.api_version,
                      "metadata": {"resourceVersion": str(self.store.resource_version)}})
        return _json_response(None, raw=head[:-1] + b',"items":[' + b",".join(deleted) + b"]}")


def _uuid() -> str:
    import uuid

    return str(uuid.uuid4())


def set_condition(obj: dict[str, Any], condition: dict[str, Any], now: str) -> None:
    """podutil.UpdatePodCondition: replace the condition of that type, stamping transition time
    (`now`, on the API server's clock) on change."""
    status = obj.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            merged = dict(existing)
            merged.update(condition)
            if existing.get("status") != condition.get("status"):
                merged["lastTransitionTime"] = now
            if "reason" not in condition:
                merged.pop("reason", None)
            if "message" not in condition:
                merged.pop("message", None)
            conditions[index] = merged
            return
    conditions.append(dict(condition, lastProbeTime=None, lastTransitionTime=now))
