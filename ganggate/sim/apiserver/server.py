"""kubesim's HTTP API: the routes of kube-apiserver for the resources in ganggate.sim.apiserver.discovery.

The server is split by concern: this module routes (discovery, OpenAPI, fault injection, the
resource URLs) and reads request bodies; `requests` parses targets and options and writes
responses; `reads` serves get, list and watch; `writes` the create/update/patch/bind/evict/delete
pipelines; per-kind rules live in `registry/`, `validation.py`, `strategies.py`, `propagation.py`,
`fieldvalidation.py` and `openapi.py`. Errors are Status objects (ganggate.sim.apimachinery.errors).
Watches stream newline-delimited JSON events from ganggate.sim.apiserver.watch.

Simplifications (see docs/kubesim.md): no authentication or authorization; JSON only (no
protobuf); pods are deleted gracefully (deletion.py), other
kinds at once (no finalizers); a namespace's deletion removes its objects at once; `continue` pages show the
current state after the page boundary rather than an etcd snapshot; get/list ignore the
resourceVersion they are given and serve the latest state (always "not older than").
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver import discovery, openapi, openapi_v2, protobuf_body, validation
from ganggate.sim.apiserver import faults as faults_module
from ganggate.sim.apiserver import patch as patching
from ganggate.sim.apiserver.admission import policy as admission_policy
from ganggate.sim.apiserver.admission import priority
from ganggate.sim.apiserver.faults import FaultInjector
from ganggate.sim.apiserver.hangup import ClientGone, client_hung_up, read_body
from ganggate.sim.apiserver.reads import Reads
from ganggate.sim.apiserver.registry import mutatingadmissionpolicy as mutating_policy
from ganggate.sim.apiserver.registry import pod_log
from ganggate.sim.apiserver.registry import service as services
from ganggate.sim.apiserver.requests import (
    DEFAULT_NAMESPACES,
    JSON,
    _json_response,
    _not_found_path,
    error_response,
    parse_target,
    verb_of,
    wants_table,
)
from ganggate.sim.apiserver.store import Store
from ganggate.sim.apiserver.watch import clone
from ganggate.sim.apiserver.writes import Writes
from ganggate.sim.componentbase.featuregate import FeatureGates

log = logging.getLogger("ganggate.sim.apiserver.server")




class ApiServer(Reads, Writes):
    """The API: routes, the write pipeline and the watch streams, over a Store."""

    def __init__(
        self,
        store: Store | None = None,
        faults: FaultInjector | None = None,
        *,
        bookmark_seconds: float = 5.0,
        admission: Any = None,
        feature_gates: FeatureGates | None = None,
    ) -> None:
        self.store = store or Store()
        # kube-apiserver's --feature-gates (ganggate/sim/componentbase/featuregate.py): which fields and APIs it serves
        self.feature_gates = feature_gates or FeatureGates()
        self.faults = faults or FaultInjector(self.store.hub.close_all, self.store.compact)
        self.bookmark_seconds = bookmark_seconds
        self._admission = admission
        self._admission_loaded = admission is not None
        self._policies: admission_policy.PolicyChain | None = None
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
        """The mutating admission chain, if kubesim/apiserver/admission/chain.py is installed (imported lazily)."""
        if not self._admission_loaded:
            self._admission_loaded = True
            try:
                from ganggate.sim.apiserver.admission.chain import AdmissionChain
            except ModuleNotFoundError as exc:
                if exc.name != "ganggate.sim.apiserver.admission.chain":
                    raise
                self._admission = None
            else:
                self._admission = AdmissionChain(
                    # The stored objects themselves: the chain only reads them.
                    lambda: [s.obj for _, s in self.store.iter("mutatingwebhookconfigurations.admissionregistration.k8s.io")],
                    self._stored_namespace,
                    policies=self._mutating_policies(),
                )
        return self._admission

    def _mutating_policies(self) -> Any:
        """The MutatingAdmissionPolicy plugin when its feature gate is on (registry/mutatingadmissionpolicy.py)."""
        if not self.feature_gates.enabled(mutating_policy.FEATURE_GATE):
            return None
        from ganggate.sim.apiserver.admission.chain import AdmissionChain
        from ganggate.sim.apiserver.admission.mutating_policy import MutatingPolicyChain

        return MutatingPolicyChain(
            lambda key: [stored.obj for _, stored in self.store.iter(key)], self.store.count,
            self._stored_namespace,
            default=lambda request, obj: AdmissionChain._default(request, obj), last_write=lambda key: self.store.last_write(key))

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
        app.router.add_get("/openapi/v2", self._openapi_v2)
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
        return _json_response(discovery.api_group_list(self.feature_gates))

    async def _core_root(self, request: web.Request) -> web.Response:
        doc = discovery.resource_list("", request.match_info["version"], self.feature_gates) if request.method == "GET" else None
        return _json_response(doc) if doc else error_response(_not_found_path())

    async def _group_root(self, request: web.Request) -> web.Response:
        doc = discovery.api_group(request.match_info["group"], self.feature_gates) if request.method == "GET" else None
        return _json_response(doc) if doc else error_response(_not_found_path())

    async def _group_version_root(self, request: web.Request) -> web.Response:
        doc = None
        if request.method == "GET":
            doc = discovery.resource_list(request.match_info["group"], request.match_info["version"],
                                          self.feature_gates)
        return _json_response(doc) if doc else error_response(_not_found_path())

    async def _openapi_v2(self, request: web.Request) -> web.Response:
        """The Swagger 2.0 document, JSON or protobuf as the client asks (apiserver/openapi_v2.py)."""
        media = openapi_v2.negotiate(request.headers.get("Accept", ""))
        if media is None:
            return error_response(errors.ApiError(406, "NotAcceptable", "only the following media types are accepted: "
                                                  + ", ".join((openapi_v2.JSON_TYPE,) + openapi_v2.PROTOBUF_TYPES)))
        etag = openapi_v2.etag()
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"Etag": etag})
        body = openapi_v2.json_bytes() if media == openapi_v2.JSON_TYPE else openapi_v2.protobuf_bytes()
        return web.Response(body=body, headers={"Content-Type": media, "Etag": etag, "Vary": "Accept",
                                                "Cache-Control": "no-cache, private"})

    async def _openapi_root(self, request: web.Request) -> web.Response:
        return _json_response(openapi.discovery_document(self.feature_gates),
                              headers={"Cache-Control": "no-cache, private"})

    async def _openapi_gv(self, request: web.Request) -> web.StreamResponse:
        """One group-version's document (kube-openapi handler3.go: immutable when asked for by hash)."""
        gv = openapi.parse_gv_path(request.match_info["tail"])
        data = openapi.document_bytes(*gv) if gv and gv in openapi.group_versions(self.feature_gates) else None
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
                seconds = body["latency"] if "latency" in body else body["seconds"]
                rule: faults_module.LatencyRule | faults_module.FailRule = self.faults.latency(
                    float(seconds), body.get("verb"), body.get("resource"))
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
        admission_policy.begin_request()
        try:
            target = parse_target(group, version, [p for p in tail.split("/")], self.feature_gates)
            query = dict(request.query)
            verb = verb_of(request.method, target, query)
            allowed = target.info.subresources[target.subresource][1] if target.subresource else target.info.verbs
            if verb not in allowed:
                raise errors.method_not_allowed(
                    request.method,
                    target.info.plural if not target.subresource else f"{target.info.plural}/{target.subresource}")
            delay = self.faults.delay_for(verb, target.info.plural)
            if delay > 0:
                await asyncio.sleep(delay)
            injected = self.faults.take(verb, target.info.plural, target.subresource, target.namespace, target.name)
            if injected is not None:
                raise injected
            if verb == "watch":
                return await self._watch(request, target, query)
            if target.subresource == "log":
                return await pod_log.serve(request, self.store, target.namespace or "", target.name or "")
            if verb == "get":
                if wants_table(request.headers.get("Accept", "")) and target.subresource is None:
                    return self._table(target, [self._current(target)], str(self.store.resource_version), query=query)
                return self._get(target, query)
            if verb == "list":
                if wants_table(request.headers.get("Accept", "")):
                    response = self._list(target, query)
                    assert isinstance(response.body, bytes)  # (_json_response's)
                    listed = json.loads(response.body)
                    return self._table(target, listed["items"], listed["metadata"].get("resourceVersion", ""),
                                       listed["metadata"].get("continue"), query=query)
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
        except ClientGone as gone:  # the client hung up while its body was read
            return client_hung_up(request, gone)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug in kubesim: answer as the real server does, and log it
            log.exception("internal error serving %s %s", request.method, request.path)
            return error_response(errors.internal_error(str(exc)))

    async def _body(self, request: web.Request) -> Any:
        raw = await read_body(request)
        content_type = request.headers.get("Content-Type", JSON).split(";")[0].strip().lower()
        if request.method == "PATCH":
            if content_type == patching.APPLY_PATCH or content_type not in patching.SUPPORTED:
                raise errors.unsupported_media_type(content_type)
        elif content_type not in (JSON, "", "*/*"):
            if content_type == protobuf_body.PROTOBUF:
                try:  # a typed client's write of a built-in kind (apiserver/protobuf_body.py)
                    return protobuf_body.decode(raw)
                except protobuf_body.Undecodable:
                    pass
            if content_type in ("application/yaml", protobuf_body.PROTOBUF):
                raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                      f"accepted media types include: application/json (got {content_type})")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc

    async def _delete_options(self, request: web.Request, query: dict[str, str]) -> dict[str, Any]:
        raw = await read_body(request)
        if not raw.strip():
            return {}
        try:
            options = json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"json parse error: {exc}") from exc
        return options if isinstance(options, dict) else {}

    # ---- reads -------------------------------------------------------------------------------------
