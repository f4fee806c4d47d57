"""Reading a request as kube-apiserver does: the target object of a URL, the verb, the query's
options (dry run, continue tokens, resourceVersion), and the Status and JSON responses
(k8s.io/apiserver/pkg/endpoints/request and handlers/responsewriters)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver import discovery, fieldvalidation
from ganggate.sim.apiserver.admission import policy as admission_policy
from ganggate.sim.apiserver.discovery import ResourceInfo
from ganggate.sim.apiserver.watch import dumps

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


def parse_target(group: str, version: str, parts: list[str], gates: Any = None) -> Target:
    """Resolve the path below /api/v1 or /apis/<group>/<version> (404 for anything not served)."""
    namespace: str | None = None
    if len(parts) >= 3 and parts[0] == "namespaces":
        candidate = discovery.lookup(group, version, parts[2], gates)
        if candidate is not None and candidate.namespaced:
            namespace = parts[1]
            parts = parts[2:]
    if not parts or len(parts) > 3:
        raise _not_found_path()
    info = discovery.lookup(group, version, parts[0], gates)
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
    """Add the Warning header: unknown fields under fieldValidation=Warn, then policies' Warn actions."""
    warnings = warnings + admission_policy.take_warnings()
    if warnings:
        response.headers["Warning"] = fieldvalidation.warning_header(warnings)
    return response


def error_response(error: errors.ApiError) -> web.Response:
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, int(error.retry_after)))
    return web.Response(body=dumps(error.status()), status=error.code, content_type=JSON, headers=headers)

