"""API errors as the real kube-apiserver serves them: `Status` objects with reason and code.

Shapes and messages follow k8s.io/apimachinery/pkg/api/errors/errors.go (NewNotFound,
NewAlreadyExists, NewConflict, NewInvalid, NewBadRequest, NewMethodNotSupported,
NewTooManyRequests, NewInternalError, NewResourceExpired).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Cause:
    """One entry of details.causes: a field path, a reason such as FieldValueForbidden, a message."""

    field: str
    reason: str
    message: str


class ApiError(Exception):
    """An error the API answers with a Status object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str | None = None,
        group: str | None = None,
        kind: str | None = None,
        causes: list[Cause] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.group = group
        self.kind = kind
        self.causes = causes or []
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        """The Status object for the response body."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details: dict[str, Any] = {}
        if self.name is not None:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind is not None:
            details["kind"] = self.kind
        if self.causes:
            # metav1.StatusCause's fields are omitempty: a cause may carry a message only.
            details["causes"] = [
                {k: v for k, v in (("reason", c.reason), ("message", c.message), ("field", c.field)) if v or k == "message"}
                for c in self.causes
            ]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = int(self.retry_after)
        if details:
            body["details"] = details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404: `pods "x" not found` (qualified resource: `leases.coordination.k8s.io "x" not found`)."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', name=name, group=group, kind=resource)


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409, "AlreadyExists", f'{qualified} "{name}" already exists', name=name, group=group, kind=resource
    )


def conflict(resource: str, name: str, detail: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {detail}',
        name=name,
        group=group,
        kind=resource,
    )


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def stale(resource: str, name: str, group: str = "") -> ApiError:
    """409 Conflict for an update carrying an out-of-date resourceVersion."""
    return conflict(resource, name, STALE_OBJECT, group)


def invalid(kind: str, name: str, causes: list[Cause], group: str = "") -> ApiError:
    """422 Invalid: `Pod "x" is invalid: <field>: <Type>: <detail>` (errors.NewInvalid)."""
    texts = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', name=name, group=group, kind=kind, causes=causes
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(verb: str, resource: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"{verb} is not supported on resources of kind \"{resource}\"")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json "
                    f"(got {content_type})")


def too_many_requests(retry_after: float | None = 1) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        retry_after=retry_after,
    )


def internal_error(message: str = "an error on the server has prevented the request from succeeding") -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def expired(requested: int, oldest: int) -> ApiError:
    """410 Expired as the watch cache answers (cacher/watch_cache.go: `too old resource version`)."""
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


# Field error helpers in the shape of k8s.io/apimachinery/pkg/util/validation/field/errors.go.
def forbidden(path: str, detail: str) -> Cause:
    return Cause(path, "FieldValueForbidden", f"Forbidden: {detail}")


def required(path: str, detail: str = "") -> Cause:
    return Cause(path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def invalid_value(path: str, value: Any, detail: str) -> Cause:
    import json

    shown = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    return Cause(path, "FieldValueInvalid", f"Invalid value: {shown}: {detail}")


def duplicate(path: str, value: Any) -> Cause:
    import json

    shown = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    return Cause(path, "FieldValueDuplicate", f"Duplicate value: {shown}")


def not_supported(path: str, value: Any, supported: list[str]) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    quoted = ", ".join(f'"{s}"' for s in supported)
    return Cause(path, "FieldValueNotSupported", f"Unsupported value: {shown}: supported values: {quoted}")


def too_long(path: str, limit: int) -> Cause:
    return Cause(path, "FieldValueTooLong", f"Too long: must have at most {limit} bytes")


def too_many(path: str, actual: int, limit: int) -> Cause:
    return Cause(path, "FieldValueTooMany", f"Too many: {actual}: must have at most {limit} items")


def invalid_omitted(path: str, detail: str) -> Cause:
    """field.Invalid(path, field.OmitValueType{}, detail): the value is not shown."""
    return Cause(path, "FieldValueInvalid", f"Invalid value: {detail}")
