"""Fault injection: make chosen requests fail or slow down, cut watches, compact history.

A rule matches a request by Kubernetes verb (get, list, watch, create, update, patch, delete,
deletecollection), resource (plural, e.g. `pods`, `leases`), subresource and namespace; None
matches anything. A failure rule answers `count` matching requests with a Status of the given
code (429 TooManyRequests with Retry-After, 409 Conflict, 500 InternalError, ...), then expires.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ganggate.sim.apimachinery import errors

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass
class FailRule:
    verb: str | None
    resource: str | None
    status: int
    count: int
    retry_after: float | None
    subresource: str | None
    namespace: str | None

    def matches(self, verb: str, resource: str, subresource: str | None, namespace: str | None) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
            and (self.subresource is None or self.subresource == subresource)
            and (self.namespace is None or self.namespace == namespace)
        )


@dataclass
class LatencyRule:
    seconds: float
    verb: str | None
    resource: str | None

    def matches(self, verb: str, resource: str) -> bool:
        return (self.verb is None or self.verb == verb) and (self.resource is None or self.resource == resource)


def fault_error(rule: FailRule, resource: str, name: str | None) -> errors.ApiError:
    """The Status a failure rule answers with."""
    if rule.status == 429:
        return errors.too_many_requests(rule.retry_after if rule.retry_after is not None else 1)
    if rule.status == 500:
        return errors.internal_error("injected fault")
    if rule.status == 409:
        return errors.conflict(resource, name or "", errors.STALE_OBJECT)
    if rule.status == 404:
        return errors.not_found(resource, name or "")
    reason = _REASONS.get(rule.status, "InternalError" if rule.status >= 500 else "BadRequest")
    error = errors.ApiError(rule.status, reason, f"injected fault ({rule.status} {reason})")
    error.retry_after = rule.retry_after
    return error


class FaultInjector:
    """The rules in force, consulted by the API server before each request is served."""

    def __init__(self, cut_watches: Callable[[], int] | None = None, compact: Callable[[], int] | None = None) -> None:
        self._fail: list[FailRule] = []
        self._latency: list[LatencyRule] = []
        self._cut_watches = cut_watches
        self._compact = compact
        self.injected = 0

    def fail(self, verb: str | None = None, resource: str | None = None, status: int = 500, count: int = 1,
             retry_after: float | None = None, subresource: str | None = None,
             namespace: str | None = None) -> FailRule:
        """Answer the next `count` matching requests with `status`."""
        if verb is not None and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; one of {', '.join(VERBS)}")
        if count < 1:
            raise ValueError("count must be at least 1")
        if not 400 <= int(status) <= 599:
            raise ValueError("status must be an HTTP error code (400-599)")
        rule = FailRule(verb, resource, int(status), int(count), retry_after, subresource, namespace)
        self._fail.append(rule)
        return rule

    def latency(self, seconds: float, verb: str | None = None, resource: str | None = None) -> LatencyRule:
        """Delay every matching request by `seconds` (until cleared)."""
        if seconds < 0:
            raise ValueError("latency must not be negative")
        if verb is not None and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; one of {', '.join(VERBS)}")
        rule = LatencyRule(float(seconds), verb, resource)
        self._latency.append(rule)
        return rule

    def cut_watches(self) -> int:
        """End every open watch stream now; returns how many were cut."""
        return self._cut_watches() if self._cut_watches else 0

    def compact(self) -> int:
        """Forget watch history: every resourceVersion before now answers 410; returns the revision."""
        return self._compact() if self._compact else 0

    def clear(self) -> None:
        """Remove every failure and latency rule."""
        self._fail.clear()
        self._latency.clear()

    def delay_for(self, verb: str, resource: str) -> float:
        return sum(rule.seconds for rule in self._latency if rule.matches(verb, resource))

    def take(self, verb: str, resource: str, subresource: str | None, namespace: str | None,
             name: str | None = None) -> errors.ApiError | None:
        """The injected error for this request, if a rule matches (consuming one of its count)."""
        for rule in self._fail:
            if rule.matches(verb, resource, subresource, namespace):
                rule.count -= 1
                if rule.count <= 0:
                    self._fail.remove(rule)
                self.injected += 1
                return fault_error(rule, resource, name)
        return None

    def describe(self) -> dict[str, Any]:
        """The rules in force, as served by GET /kubesim/faults."""
        return {
            "fail": [vars(rule).copy() for rule in self._fail],
            "latency": [vars(rule).copy() for rule in self._latency],
            "injected": self.injected,
        }


def fail_pod_update(pod: dict[str, Any], reason: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """The pod with the kubelet stand-in's failure annotations set to fail it now (the kubelet acts on them)."""
    from ganggate.sim.api.kubesim import FAIL_AFTER_ANNOTATION, FAIL_EXIT_CODE_ANNOTATION, FAIL_REASON_ANNOTATION

    new = dict(pod, metadata=dict(pod["metadata"]))
    annotations = dict(new["metadata"].get("annotations") or {})
    annotations[FAIL_AFTER_ANNOTATION] = "0"
    annotations[FAIL_REASON_ANNOTATION] = str(reason or "Error")
    if exit_code is not None:
        annotations[FAIL_EXIT_CODE_ANNOTATION] = str(int(exit_code))
    else:
        annotations.pop(FAIL_EXIT_CODE_ANNOTATION, None)
    new["metadata"]["annotations"] = annotations
    return new
