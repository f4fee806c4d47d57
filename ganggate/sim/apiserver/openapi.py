"""OpenAPI v3 documents for the resources kubesim serves (GET /openapi/v3 and /openapi/v3/<gv path>).

Shapes follow k8s.io/kube-openapi/pkg/handler3/handler.go: /openapi/v3 is an OpenAPIV3Discovery
(`{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=<SHA512>"}, ...}}`); each
group-version document is served at its URL, with `Cache-Control: public, immutable` when asked
for with the current hash, and a 301 to the current URL for a stale hash. Paths and operations
follow k8s.io/apiserver/pkg/endpoints/installer.go (operation ids, `x-kubernetes-action`,
`x-kubernetes-group-version-kind`, the `fieldValidation`/`dryRun`/`fieldManager` query parameters
on writes, patch bodies by content type) — kubectl reads the PATCH operations to learn whether
the server validates fields itself (k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go)
and the schemas to compute strategic merge patches. Schemas come from
ganggate.sim.apiserver.openapi_schemas (generated; see ganggate/sim/apiserver/openapi_gen.py). Watch paths are omitted.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from ganggate.sim.apiserver import discovery
from ganggate.sim.apiserver.discovery import ResourceInfo

_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json")


@functools.lru_cache(maxsize=1)
def schemas() -> dict[str, Any]:
    """Every component schema, keyed by definition name."""
    from ganggate.sim.apiserver import (
        openapi_crds,
        openapi_map_schemas,
        openapi_schemas,
        openapi_schemas_resource,
        openapi_workload,
    )

    every = {**openapi_schemas.load(), **openapi_schemas_resource.load(), **openapi_crds.schemas(),
             **openapi_map_schemas.load(), **openapi_workload.schemas()}
    openapi_workload.add_pod_field(every)
    # DRAExtendedResource's pod status field (1.34+; kubesim's core schemas are 1.31's)
    every["io.k8s.api.core.v1.PodStatus"]["properties"]["extendedResourceClaimStatus"] = {
        "allOf": [_ref("io.k8s.api.core.v1.PodExtendedResourceClaimStatus")],
        "description": "Status of extended resource claim backed by DRA."}
    return every


@functools.cache
def schema_name(group: str, version: str, kind: str) -> str | None:
    """The definition name of a kind (by its x-kubernetes-group-version-kind), or None."""
    for name, schema in schemas().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return name
    return None


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _gv_path(group: str, version: str) -> str:
    """`api/v1` or `apis/batch/v1`, the keys of /openapi/v3."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _id_prefix(group: str, version: str) -> str:
    """installer.go's operation id infix: CoreV1, BatchV1, CoordinationV1, AdmissionregistrationV1."""
    name = (group.split(".", 1)[0] if group else "core")
    return name[:1].upper() + name[1:] + version[:1].upper() + version[1:]


def _param(name: str, where: str = "query", kind: str = "string", description: str = "") -> dict[str, Any]:
    param: dict[str, Any] = {"name": name, "in": where, "description": description, "schema": {"type": kind, "uniqueItems": True}}
    if where == "path":
        param["required"] = True
    return param


_WRITE_PARAMS = [
    _param("dryRun", description="When present, indicates that modifications should not be persisted."),
    _param("fieldManager", description="fieldManager is a name associated with the actor or entity that is making these changes."),
    _param("fieldValidation", description=(
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing "
        "unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict")),
]
_LIST_PARAMS = [_param(n) for n in ("continue", "fieldSelector", "labelSelector")] + [
    _param("limit", kind="integer"), _param("resourceVersion"), _param("timeoutSeconds", kind="integer"),
    _param("watch", kind="boolean")]


def _operation(verb: str, action: str, op_id: str, info: ResourceInfo, kind: str, response: str | None,
               params: list[dict[str, Any]], body: str | None = None, patch: bool = False) -> dict[str, Any]:
    group, version = info.group, info.version
    if kind == "Eviction":
        group, version = "policy", "v1"
    op: dict[str, Any] = {
        "tags": [_id_prefix(info.group, info.version).lower()],
        "description": f"{verb} {kind}",
        "operationId": op_id,
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(response)}}}} if response
        else {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
    }
    op["responses"]["401"] = {"description": "Unauthorized"}
    if patch:
        op["requestBody"] = {"content": {t: {"schema": _ref(_META + "Patch")} for t in _PATCH_TYPES}, "required": True}
    elif body:
        op["requestBody"] = {"content": {"application/json": {"schema": _ref(body)}}, "required": True}
    return op


def _paths(info: ResourceInfo) -> dict[str, Any]:
    """The paths of one resource and its subresources, as installer.go registers them."""
    name = schema_name(info.group, info.version, info.kind)
    list_name = schema_name(info.group, info.version, info.list_kind)
    if name is None:
        return {}
    root = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
    scope = "/namespaces/{namespace}" if info.namespaced else ""
    infix = "Namespaced" if info.namespaced else ""
    prefix = _id_prefix(info.group, info.version)
    kind, verbs = info.kind, set(info.verbs)
    shared = [_param("name", "path", description=f"name of the {kind}")]
    ns = [_param("namespace", "path", description="object name and auth scope, such as for teams and projects")] if info.namespaced else []
    out: dict[str, Any] = {}
    collection: dict[str, Any] = {"parameters": ns + [_param("pretty")]}
    if "list" in verbs and list_name:
        collection["get"] = _operation("list", "list", f"list{prefix}{infix}{kind}", info, kind, list_name, _LIST_PARAMS)
    if "create" in verbs:
        collection["post"] = _operation("create", "post", f"create{prefix}{infix}{kind}", info, kind, name, _WRITE_PARAMS, body=name)
    if "deletecollection" in verbs:
        collection["delete"] = _operation("delete collection of", "deletecollection", f"deleteCollection{prefix}{infix}{kind}",
                                          info, kind, _META + "Status", _LIST_PARAMS, body=_META + "DeleteOptions")
    out[f"{root}{scope}/{info.plural}"] = collection
    if info.namespaced and "list" in verbs and list_name:
        out[f"{root}/{info.plural}"] = {"parameters": [_param("pretty")], "get": _operation(
            "list", "list", f"list{prefix}{kind}ForAllNamespaces", info, kind, list_name, _LIST_PARAMS)}
    if info.plural == "bindings":
        return out
    item: dict[str, Any] = {"parameters": shared + ns + [_param("pretty")]}
    item["get"] = _operation("read", "get", f"read{prefix}{infix}{kind}", info, kind, name, [])
    item["put"] = _operation("replace", "put", f"replace{prefix}{infix}{kind}", info, kind, name, _WRITE_PARAMS, body=name)
    item["patch"] = _operation("partially update", "patch", f"patch{prefix}{infix}{kind}", info, kind, name,
                               _WRITE_PARAMS + [_param("force", kind="boolean")], patch=True)
    item["delete"] = _operation("delete", "delete", f"delete{prefix}{infix}{kind}", info, kind, _META + "Status",
                                _WRITE_PARAMS[:1] + [_param("gracePeriodSeconds", kind="integer"), _param("propagationPolicy")],
                                body=_META + "DeleteOptions")
    out[f"{root}{scope}/{info.plural}/{{name}}"] = item
    for sub, (sub_kind, sub_verbs) in info.subresources.items():
        if sub == "log":
            continue  # answers text/plain, not a Pod (registry/pod_log.py); kubectl logs reads no schema
        suffix = sub[:1].upper() + sub[1:]
        sub_schema = schema_name("policy", "v1", sub_kind) if sub_kind == "Eviction" else schema_name("", "v1", sub_kind) \
            if sub_kind == "Binding" else name
        path: dict[str, Any] = {"parameters": shared + ns + [_param("pretty")]}
        if "get" in sub_verbs:
            path["get"] = _operation("read", "get", f"read{prefix}{infix}{kind}{suffix}", info, sub_kind, sub_schema, [])
        if "update" in sub_verbs:
            path["put"] = _operation("replace", "put", f"replace{prefix}{infix}{kind}{suffix}", info, sub_kind, sub_schema,
                                     _WRITE_PARAMS, body=sub_schema)
        if "patch" in sub_verbs:
            path["patch"] = _operation("partially update", "patch", f"patch{prefix}{infix}{kind}{suffix}", info, sub_kind,
                                       sub_schema, _WRITE_PARAMS + [_param("force", kind="boolean")], patch=True)
        if "create" in sub_verbs and sub_schema:
            path["post"] = _operation("create", "post", f"create{prefix}{infix}{kind}{suffix}", info, sub_kind, sub_schema,
                                      _WRITE_PARAMS, body=sub_schema)
        out[f"{root}{scope}/{info.plural}/{{name}}/{sub}"] = path
    return out


def resource_paths(info: ResourceInfo) -> dict[str, Any]:
    """The v3 paths of one resource (shared with the Swagger 2.0 document, apiserver/openapi_v2.py)."""
    return _paths(info)


def _reachable(roots: list[str]) -> dict[str, Any]:
    """The component schemas reachable from the roots through $ref."""
    from ganggate.sim.apiserver.openapi_gen import reachable

    every = schemas()
    return {name: every[name] for name in reachable(every, roots)}


@functools.cache
def document_bytes(group: str, version: str) -> bytes | None:
    """The OpenAPI v3 document of one group-version, serialized, or None if kubesim does not serve it."""
    served = [info for info in discovery.RESOURCES if info.group == group and info.version == version]
    if not served:
        return None
    paths: dict[str, Any] = {}
    for info in served:
        paths.update(_paths(info))
    roots = [_META + m for m in ("Status", "DeleteOptions", "Patch", "APIResourceList")]
    text = json.dumps(paths)
    roots += [name for name in schemas() if f"schemas/{name}\"" in text]
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discovery.version_info()["gitVersion"]},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": _reachable(roots)},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@functools.cache
def document_hash(group: str, version: str) -> str:
    """The hash in serverRelativeURL: the uppercase hex SHA-512 of the document (handler3.go computeETag)."""
    data = document_bytes(group, version) or b""
    return hashlib.sha512(data).hexdigest().upper()


def group_versions(gates: Any = None) -> list[tuple[str, str]]:
    """Every (group, version) kubesim serves with these feature gates (None: all), core first."""
    seen: list[tuple[str, str]] = []
    for info in discovery.RESOURCES:
        if gates is not None and not discovery.served(info, gates):
            continue
        if (info.group, info.version) not in seen:
            seen.append((info.group, info.version))
    return seen


def discovery_document(gates: Any = None) -> dict[str, Any]:
    """GET /openapi/v3 (the group-versions served with these feature gates)."""
    return {"paths": {
        _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={document_hash(g, v)}"}
        for g, v in group_versions(gates)
    }}


def parse_gv_path(tail: str) -> tuple[str, str] | None:
    """`api/v1` -> ("", "v1"); `apis/batch/v1` -> ("batch", "v1"); anything else None."""
    parts = tail.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "api":
        return "", parts[1]
    if len(parts) == 3 and parts[0] == "apis":
        return parts[1], parts[2]
    return None
