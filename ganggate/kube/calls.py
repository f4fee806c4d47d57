"""Raw JSON calls to the Kubernetes API, with the error type, retries and backoff they share.

kubernetes-asyncio's generated methods are called with `_preload_content=False`, so no model
deserialization runs on hot paths; every component (controller, status, leader election, events)
calls the API through `call_json` and retries through `with_retries`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import orjson

log = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset({0, 429, 500, 502, 503, 504})
#: The reason of an ApiCallError whose connection was refused: nothing listens at the server's URL.
NO_CLUSTER = "ConnectionRefused"


def no_cluster_message(url: str) -> str:
    """What a refused connection means to a user, and the likely fix: on loopback, where `ganggate
    sim up` serves, that it is not running (elsewhere the cause is the operator's to find)."""
    host = url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    local = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    return f"no cluster answers at {url}" + (" (is `ganggate sim up` running?)" if local else "")


def _server_url(fn: Callable[..., Any], exc: aiohttp.ClientConnectorError) -> str:
    """The URL the call went to: its ApiClient's host, else the host and port that refused."""
    host = getattr(getattr(getattr(getattr(fn, "__self__", None), "api_client", None), "configuration", None),
                   "host", None)
    return host if isinstance(host, str) and host else f"{exc.host}:{exc.port}"


def _refused(exc: BaseException) -> bool:
    """Whether a transport error is a refused connection (not a TLS or DNS failure)."""
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(exc, aiohttp.ClientSSLError):
        return isinstance(exc.os_error, ConnectionRefusedError)
    return False


class ApiCallError(Exception):
    """A failed API call: HTTP status (0 for a transport error or timeout), reason, message."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None,
                 body: dict | None = None) -> None:
        # A refused connection says so in words a user acts on, not "0 ClientConnectorError: ...".
        super().__init__(message if reason == NO_CLUSTER else f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body = body or {}

    @property
    def retryable(self) -> bool:
        return self.status in RETRYABLE_CODES


def _retry_after(headers: Mapping[str, str], body: Mapping[str, Any]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        value = ((body.get("details") or {}) if isinstance(body, Mapping) else {}).get("retryAfterSeconds")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


async def read_json(resp: aiohttp.ClientResponse) -> dict:
    """Read a raw response (from `_preload_content=False`) as JSON; raise ApiCallError if not 2xx."""
    try:
        data = await resp.read()
    finally:
        resp.release()
    try:
        body = orjson.loads(data) if data else {}  # (3-5x json's speed: a list page of 500 pods is ~1.4 MB)
    except ValueError:
        body = {"message": data[:200].decode("utf-8", "replace")}
    if not 200 <= resp.status <= 299:
        if not isinstance(body, dict):
            body = {}
        raise ApiCallError(
            resp.status, str(body.get("reason") or resp.reason or ""), str(body.get("message") or ""),
            _retry_after(resp.headers, body), body,
        )
    return body


async def call_json(fn: Callable[..., Awaitable[Any]], *args: Any, verb: str = "", metrics: Any = None,
                    timeout: float = 30.0, **kwargs: Any) -> dict:
    """Call a kubernetes-asyncio API method without model deserialization; return the JSON body.

    Raises ApiCallError (status 0 for transport errors and timeouts); counts errors in metrics.
    """
    try:
        resp = await fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
        return await read_json(resp)
    except ApiCallError as exc:
        if metrics is not None:
            metrics.api_error(verb, exc.status)
        raise
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        if metrics is not None:
            metrics.api_error(verb, 0)
        if _refused(exc):
            assert isinstance(exc, aiohttp.ClientConnectorError)
            raise ApiCallError(0, NO_CLUSTER, no_cluster_message(_server_url(fn, exc))) from exc
        raise ApiCallError(0, type(exc).__name__, str(exc)) from exc


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter, as client-go's wait.Backoff with Jitter (a value: never
    changed once made, so one may be a default argument)."""

    base: float = 0.05
    cap: float = 5.0
    attempts: int = 12

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** attempt)
        return ceiling / 2 + random.uniform(0, ceiling / 2)


_Result = TypeVar("_Result")


async def with_retries(make_call: Callable[[], Awaitable[_Result]], backoff: Backoff) -> _Result:
    """Run make_call, retrying retryable ApiCallErrors; Retry-After wins over the backoff delay."""
    for attempt in range(backoff.attempts):
        try:
            return await make_call()
        except ApiCallError as exc:
            if not exc.retryable or attempt == backoff.attempts - 1:
                raise
            delay = exc.retry_after if exc.retry_after is not None else backoff.delay(attempt)
            log.debug("retrying after %s (attempt %d, %.2fs)", exc, attempt + 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
