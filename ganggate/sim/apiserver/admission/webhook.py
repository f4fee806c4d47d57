"""Calling one mutating webhook over HTTPS: the AdmissionReview out, the verified response back.

Follows k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go
(CreateAdmissionObjects, CreateV1AdmissionReview, VerifyAdmissionResponse) and the call in
k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go (callAttrMutatingHook).
Failures to talk to the webhook raise `CallError` (the real ErrCallingWebhook), whose
consequence the caller decides from the webhook's failurePolicy.

kubesim resolves only `clientConfig.url`; a `clientConfig.service` reference would need
cluster DNS and service proxying, so it is reported as a call error (failurePolicy applies)
saying the URL form is needed.
"""

from __future__ import annotations

import base64
import binascii
import errno
import functools
import json
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from ganggate.sim.apiserver import rfc6902
from ganggate.sim.apiserver.watch import clone

_KNOWN_REVIEW_VERSIONS = ("v1", "v1beta1")


class CallError(Exception):
    """The webhook could not be called or answered nonsense (ErrCallingWebhook)."""

    def __init__(self, webhook_name: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{webhook_name}": {reason}')
        self.webhook_name = webhook_name
        self.reason = reason


class PatchApplyError(Exception):
    """A decodable patch that does not apply: always an internal error, whatever the failurePolicy."""


@dataclass(frozen=True)
class WebhookResponse:
    """The fields of a verified AdmissionReview response."""

    allowed: bool
    patch: bytes | None
    patch_type: str | None
    result: Mapping[str, Any] | None
    warnings: tuple[str, ...] = ()


def review_version(webhook: Mapping[str, Any]) -> str | None:
    """The first of the webhook's admissionReviewVersions that kubesim speaks (v1, v1beta1)."""
    for version in webhook.get("admissionReviewVersions") or []:
        if version in _KNOWN_REVIEW_VERSIONS:
            return version
    return None


def operation_options(operation: str, dry_run: bool) -> dict[str, Any] | None:
    """The request's options object: CreateOptions/UpdateOptions/DeleteOptions (meta.k8s.io/v1)."""
    kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}.get(operation)
    if kind is None:
        return None
    options: dict[str, Any] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = ["All"]
    return options


def admission_request(
    *,
    uid: str,
    operation: str,
    kind: Mapping[str, str],
    resource: Mapping[str, str],
    sub_resource: str | None,
    namespace: str,
    name: str,
    obj: Mapping[str, Any] | None,
    old_obj: Mapping[str, Any] | None,
    dry_run: bool,
    user_info: Mapping[str, Any],
) -> dict[str, Any]:
    """The AdmissionRequest (CreateV1AdmissionReview); kind/resource equal the request's own."""
    user = {
        "username": user_info.get("username", ""),
        "uid": user_info.get("uid", ""),
        "groups": list(user_info.get("groups") or []),
        "extra": dict(user_info.get("extra") or {}),
    }
    request: dict[str, Any] = {
        "uid": uid,
        "kind": dict(kind),
        "resource": dict(resource),
        "requestKind": dict(kind),
        "requestResource": dict(resource),
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": user,
        "object": obj,
        "oldObject": old_obj,
        "dryRun": dry_run,
        "options": operation_options(operation, dry_run),
    }
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    return request


def new_uid() -> str:
    return str(uuid.uuid4())


def review_body(version: str, request: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview", "request": dict(request)}


def verify_response(webhook_name: str, uid: str, version: str, body: bytes) -> WebhookResponse:
    """Decode and check a webhook's answer (VerifyAdmissionResponse, mutating=True)."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CallError(webhook_name, f"failed to call webhook: json parse error: {exc}") from None
    if not isinstance(review, dict) or not review.get("kind"):
        raise CallError(webhook_name, f"failed to call webhook: Object 'Kind' is missing in '{_clip(body)}'")
    response = review.get("response")
    if not isinstance(response, dict):
        raise CallError(webhook_name, "received invalid webhook response: webhook response was absent")
    patch_raw = response.get("patch")
    try:
        patch = base64.b64decode(patch_raw, validate=True) if patch_raw else None
    except (binascii.Error, TypeError, ValueError) as exc:
        raise CallError(webhook_name, f"failed to call webhook: illegal base64 data in response.patch: {exc}") from None
    patch_type = response.get("patchType")
    if version == "v1":

        def invalid(detail: str) -> CallError:
            return CallError(webhook_name, f"received invalid webhook response: {detail}")

        got_uid = response.get("uid", "")
        if got_uid != uid:
            raise invalid(f'expected response.uid="{uid}", got "{got_uid}"')
        gvk = f"{review.get('apiVersion', '')}, Kind={review.get('kind', '')}"
        if gvk != "admission.k8s.io/v1, Kind=AdmissionReview":
            raise invalid(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {gvk}")
        if patch and patch_type is None:
            raise invalid("webhook returned response.patch but not response.patchType")
        if not patch and patch_type is not None:
            raise invalid("webhook returned response.patchType but not response.patch")
        if patch_type == "":
            raise invalid('webhook returned invalid response.patchType of ""')
    else:  # v1beta1: uid and patchType were never checked; a patch is a JSONPatch
        patch_type = "JSONPatch" if patch else None
    result = response.get("status")
    return WebhookResponse(
        allowed=bool(response.get("allowed")),
        patch=patch,
        patch_type=patch_type,
        result=result if isinstance(result, dict) else None,
        warnings=tuple(str(w) for w in response.get("warnings") or []),
    )


def apply_patch(webhook_name: str, response: WebhookResponse, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The patched object, a copy (`obj` is left as it is), or None when the response carries no
    (or an empty) patch."""
    if not response.patch:
        return None
    try:
        operations = json.loads(response.patch)
        if not isinstance(operations, list):
            raise ValueError("a JSON patch must be an array of operations")
    except (ValueError, UnicodeDecodeError) as exc:
        raise CallError(webhook_name, f"received undecodable patch in webhook response: {exc}") from None
    if not operations:
        return None
    if response.patch_type != "JSONPatch":
        raise CallError(webhook_name, f'unsupported patch type "{response.patch_type}"')
    try:
        patched = rfc6902.apply(clone(obj), operations)
    except rfc6902.PatchError as exc:
        raise PatchApplyError(str(exc)) from None
    if not isinstance(patched, dict):
        raise PatchApplyError("the patched document is not an object")
    return patched


def _clip(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "..."


@functools.lru_cache(maxsize=64)
def ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """A client TLS context trusting exactly caBundle (base64 PEM); system roots when empty.

    Cached per caBundle text: building a context parses the PEM and is not free.

    Raises ValueError for a caBundle that holds no usable certificate.
    """
    if not ca_bundle:
        context = ssl.create_default_context()
    else:
        try:
            pem = base64.b64decode(ca_bundle, validate=True).decode("ascii")
            context = ssl.create_default_context(cadata=pem)
        except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
            raise ValueError(f"unable to load root certificates: {exc}") from None
    # Go's crypto/x509 (Go >= 1.15) matches the host against subjectAltName only, never the CN.
    context.hostname_checks_common_name = False
    return context


def request_url(client_config: Mapping[str, Any], timeout_seconds: int) -> str:
    """The URL to POST to, with `?timeout=Ns` appended as client-go's request.Timeout does."""
    url = client_config.get("url")
    if not url:
        service = client_config.get("service") or {}
        raise ValueError(
            f"kubesim cannot resolve clientConfig.service {service.get('namespace', '')}/{service.get('name', '')}: "
            "kubesim calls webhooks only through clientConfig.url (give the webhook's URL instead)"
        )
    if isinstance(url, str):
        return _with_timeout(url, timeout_seconds)
    return _with_timeout.__wrapped__(url, timeout_seconds)  # (not cacheable; fails as it always did)


@functools.lru_cache(maxsize=256)
def _with_timeout(url: Any, timeout_seconds: int) -> str:
    """request_url's answer for one URL (cached: the same few webhooks are called for every pod)."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise ValueError(f'unsupported scheme "{parts.scheme}": webhook URLs must use https')
    query = "&".join(q for q in (parts.query, urlencode({"timeout": f"{timeout_seconds}s"})) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _http_error_text(status: int, body: bytes) -> str:
    """What client-go reports for a non-2xx answer (a Status body's message, else a generic text)."""
    try:
        decoded = json.loads(body)
        if isinstance(decoded, dict) and decoded.get("kind") == "Status" and decoded.get("message"):
            return str(decoded["message"])
    except (ValueError, UnicodeDecodeError):
        pass
    if status == 500:
        return f'an error on the server ("{_clip(body) or "unknown"}") has prevented the request from succeeding'
    return f"the server responded with the status code {status} but did not return more information"


async def post_review(
    session: aiohttp.ClientSession,
    webhook_name: str,
    url: str,
    context: ssl.SSLContext,
    body: Mapping[str, Any],
    timeout_seconds: int,
) -> bytes:
    """POST the review and return the raw answer; every transport failure is a CallError."""

    def fail(detail: str) -> CallError:
        return CallError(webhook_name, f'failed to call webhook: Post "{url}": {detail}')

    try:
        async with session.post(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            ssl=context,
            timeout=aiohttp.ClientTimeout(total=timeout_seconds),
        ) as resp:
            payload = await resp.read()
            if not 200 <= resp.status <= 206:
                raise CallError(webhook_name, f"failed to call webhook: {_http_error_text(resp.status, payload)}")
            return payload
    except CallError:
        raise
    except TimeoutError:
        raise fail("context deadline exceeded") from None
    except aiohttp.ClientConnectorCertificateError as exc:
        cert_error = exc.certificate_error
        detail = getattr(cert_error, "verify_message", None) or str(cert_error)
        raise fail(f"tls: failed to verify certificate: x509: {detail}") from None
    except aiohttp.ClientSSLError as exc:
        raise fail(f"tls: {exc}") from None
    except aiohttp.ClientConnectorError as exc:
        host = f"{exc.host}:{exc.port}"
        if exc.os_error is not None and exc.os_error.errno == errno.ECONNREFUSED:
            raise fail(f"dial tcp {host}: connect: connection refused") from None
        raise fail(f"dial tcp {host}: {exc.os_error or exc}") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise fail(str(exc) or type(exc).__name__) from None
