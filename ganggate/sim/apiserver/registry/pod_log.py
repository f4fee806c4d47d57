"""GET pods/{name}/log: the pods/log subresource, as kube-apiserver serves it (`kubectl logs [-f]`).

The real server validates the PodLogOptions (pkg/apis/core/validation ValidatePodLogOptions: 422
Invalid), picks the container (pkg/registry/core/pod/strategy.go LogLocation: the only one, or 400
"a container name must be specified for pod X, choose one of: [...]"; 400 "container C is not valid
for pod X"), answers an empty body for a pod not yet bound to a node (LogLocation returns no
location), and streams from the node's kubelet, which refuses a container that has not started
(pkg/kubelet/kubelet_pods.go validateContainerLogStatus: "container C in pod X is waiting to start:
ContainerCreating", "previous terminated container C in pod X not found"). kubesim has no node
server to proxy to: the container's stdout is what sim/api/containerlog.py renders from the status the
kubelet stand-in wrote. With follow=true the stream stays open and writes each line as the
kubelet records it, and ends when the container exits or the pod is deleted (the kubelet's
follow ends with the container). Options served: container, follow, previous, timestamps,
tailLines, limitBytes, sinceSeconds, sinceTime.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from ganggate.sim.api.containerlog import LogLine, container_log, container_status, finished, parse_time
from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver.store import Store

FOLLOW_SECONDS = 3600.0  # a follow ends after this long at the latest, as a watch's timeout does


def _bool(value: str | None) -> bool:
    return value in ("1", "t", "T", "TRUE", "true", "True")


def _int_option(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from exc


def validate_options(name: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The PodLogOptions of the query, or 422 Invalid as ValidatePodLogOptions answers."""
    options: dict[str, Any] = {"tail": _int_option(query, "tailLines"), "limit": _int_option(query, "limitBytes"),
               "since_seconds": _int_option(query, "sinceSeconds"), "since_time": query.get("sinceTime") or None}
    causes = []
    if options["tail"] is not None and options["tail"] < 0:
        causes.append(errors.invalid_value("tailLines", options["tail"], "must be greater than or equal to 0"))
    if options["limit"] is not None and options["limit"] < 1:
        causes.append(errors.invalid_value("limitBytes", options["limit"], "must be greater than 0"))
    if options["since_seconds"] is not None and options["since_seconds"] < 1:
        causes.append(errors.invalid_value("sinceSeconds", options["since_seconds"], "must be greater than 0"))
    if options["since_seconds"] is not None and options["since_time"]:
        causes.append(errors.Cause("", "FieldValueForbidden", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    if options["since_time"] and parse_time(options["since_time"]) is None:
        raise errors.bad_request(f'parsing time "{options["since_time"]}" as "2006-01-02T15:04:05Z07:00": cannot parse')
    if causes:
        raise errors.invalid("PodLogOptions", name, causes)
    return options


def pick_container(pod: Mapping[str, Any], requested: str | None) -> str:
    """LogLocation's choice: the container asked for, or the pod's only one."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    regular = [c.get("name") for c in spec.get("containers") or []]
    init = [c.get("name") for c in spec.get("initContainers") or []]
    if not requested:
        if len(regular) == 1:
            return regular[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(regular)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        raise errors.bad_request(message)
    if requested not in regular + init:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def check_started(pod: Mapping[str, Any], container: str, previous: bool) -> None:
    """validateContainerLogStatus: a container that has not started (or has no previous run) has no log."""
    name = (pod.get("metadata") or {}).get("name", "")
    status = container_status(pod, container)
    if previous:
        if not ((status or {}).get("lastState") or {}).get("terminated"):
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        return
    state = (status or {}).get("state") or {}
    if status is None or state.get("waiting") or not state:
        reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
        raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')


def _since(options: Mapping[str, Any]) -> datetime | None:
    if options["since_seconds"] is not None:
        return datetime.now(UTC) - timedelta(seconds=options["since_seconds"])
    return parse_time(options["since_time"])


def render(lines: list[LogLine], options: Mapping[str, Any], timestamps: bool) -> bytes:
    """The lines as the kubelet writes them: since, tail, timestamps (RFC 3339 prefix), then limitBytes."""
    since = _since(options)
    if since is not None:
        lines = [line for line in lines if (parse_time(line.time) or since) >= since]
    if options["tail"] is not None:
        lines = lines[-options["tail"]:] if options["tail"] else []
    body = "".join(f"{line.time} {line.text}\n" if timestamps else f"{line.text}\n" for line in lines).encode()
    return body[: options["limit"]] if options["limit"] is not None else body


async def serve(request: web.Request, store: Store, namespace: str, name: str) -> web.StreamResponse:
    """GET /api/v1/namespaces/{ns}/pods/{name}/log."""
    query = dict(request.query)
    options = validate_options(name, query)
    pod = store.get("pods", namespace, name)
    if pod is None:
        raise errors.not_found("pods", name)
    container = pick_container(pod, query.get("container"))
    if not (pod.get("spec") or {}).get("nodeName"):
        return web.Response(body=b"", content_type="text/plain")
    previous = _bool(query.get("previous"))
    check_started(pod, container, previous)
    timestamps = _bool(query.get("timestamps"))
    lines = container_log(pod, container, previous)
    if not _bool(query.get("follow")) or previous:
        return web.Response(body=render(lines, options, timestamps), content_type="text/plain")
    return await _follow(request, store, namespace, name, container, lines, options, timestamps)


def _restarts(pod: Mapping[str, Any] | None, container: str) -> int:
    """The container's restart count: a change means the followed run exited (the kubelet ends the follow)."""
    return int(((container_status(pod, container) if pod else None) or {}).get("restartCount") or 0)


async def _follow(request: web.Request, store: Store, namespace: str, name: str, container: str,
                  lines: list[LogLine], options: dict[str, Any], timestamps: bool) -> web.StreamResponse:
    """Write the lines so far, then each new one as the pod's status records it, until the container exits."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain", "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    watcher = store.hub.subscribe("pods", namespace, lambda obj: (obj.get("metadata") or {}).get("name") == name, None)
    written = len(lines)
    budget = options["limit"]
    run = _restarts(store.get("pods", namespace, name), container)
    try:
        first = render(lines, options, timestamps)
        await response.write(first)
        budget = None if budget is None else budget - len(first)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FOLLOW_SECONDS
        while (budget is None or budget > 0) and loop.time() < deadline:
            pod = store.get("pods", namespace, name)
            if pod is None:
                break
            now = container_log(pod, container)
            fresh = now[written:] if len(now) >= written else now
            written = len(now)
            if fresh:
                chunk = render(fresh, {**options, "tail": None, "limit": budget}, timestamps)
                await response.write(chunk)
                budget = None if budget is None else budget - len(chunk)
            if finished(pod, container) or watcher.closed or _restarts(pod, container) != run:
                break
            await watcher.wait(deadline - loop.time())
            watcher.drain()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.hub.unsubscribe(watcher)
    with contextlib.suppress(ConnectionResetError, ConnectionError):
        await response.write_eof()
    return response
