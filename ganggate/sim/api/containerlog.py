"""What kubesim's containers print: a container's simulated stdout, for `kubectl logs`.

kubesim runs no processes, so a container's log is the lines its (simulated) runtime writes at the
moments the kubelet stand-in (sim/kubelet/kubelet.py, status.py) records in the pod's status: the
start of the container, the SIGTERM a deletion sends it (the kubelet's killContainer, grace period
from the pod's deletionGracePeriodSeconds), and its exit (code and reason, 137 for the SIGKILL at the
end of the grace period). The lines are read back from the status the kubelet wrote, so they are
the same whether the kubelet runs in the server's process or in the components' process
(`--components-process`), and a restarted container's previous run is its `lastState`. This is
kubesim's own contract (like its kubesim.io annotations), so it lives with the shared API types:
the real API server proxies pods/log to the node's kubelet, kubesim's kubelet has no node server,
and the API server's pods/log (apiserver/registry/pod_log.py) renders these lines itself.

Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

KILLED_EXIT_CODE = 137  # 128 + SIGKILL, as containerd reports a container killed at the end of its grace period


class LogLine(NamedTuple):
    """One line of a container's stdout and when it was written (RFC 3339, UTC)."""

    time: str
    text: str


def _container_spec(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if container.get("name") == name:
            return container
    return {}


def container_status(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The container's status (regular or init container), None when the kubelet has written none."""
    status = pod.get("status") or {}
    for item in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if item.get("name") == name:
            return item
    return None


_FIELD = re.compile(r"^metadata\.(annotations|labels)\['(.+)'\]$")


def _field(pod: Mapping[str, Any], path: str) -> str | None:
    """A downward-API fieldRef's value (pkg/fieldpath ExtractFieldPathAsString), None for one not modelled."""
    meta = pod.get("metadata") or {}
    if (match := _FIELD.match(path)) is not None:
        value = (meta.get(match.group(1)) or {}).get(match.group(2))
        return None if value is None else str(value)
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
              "status.podIP": (pod.get("status") or {}).get("podIP")}
    value = simple.get(path)
    return None if value is None else str(value)


def _environment(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The variables the kubelet gives the container (kubelet_pods.go makeEnvironmentVariables), of
    those kubesim can resolve: literal values (expanding earlier ones) and downward-API fieldRefs."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = expand(str(item.get("value") or ""), env)
        elif (path := ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")) is not None:
            if (value := _field(pod, path)) is not None:
                env[item["name"]] = value
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` references as the kubelet expands command and args (third_party/forked/golang/expansion
    expand.go): a defined variable's value, an undefined reference left as written, `$$` an escaped `$`."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1 and text[i + 2:end] in env:
            out.append(env[text[i + 2:end]])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _started_line(pod: Mapping[str, Any], name: str, when: str) -> LogLine:
    container = _container_spec(pod, name)
    env = _environment(pod, container)
    parts = (container.get("command") or []) + (container.get("args") or [])
    command = " ".join(expand(str(part), env) for part in parts)
    what = command or f"the entrypoint of {container.get('image') or 'its image'}"
    limits = (container.get("resources") or {}).get("limits") or {}
    gpus = ", ".join(f"{key}: {value}" for key, value in sorted(limits.items()) if "gpu" in key)
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    suffix = f" with {gpus}" if gpus else ""
    return LogLine(when, f"kubesim: container {name} started on node {node}{suffix}: {what}")


def _sigterm_line(pod: Mapping[str, Any], started: str, finished: str | None) -> LogLine | None:
    """The SIGTERM a deletion sent while the container ran (deletionTimestamp - grace), if any."""
    meta = pod.get("metadata") or {}
    deleted = _parse(meta.get("deletionTimestamp"))
    if deleted is None:
        return None
    grace = int(meta.get("deletionGracePeriodSeconds") or 0)
    sent = deleted - timedelta(seconds=grace)
    start = _parse(started)
    end = _parse(finished) if finished else None
    if start is not None and sent < start or end is not None and sent > end:
        return None
    return LogLine(_format(sent), f"kubesim: received SIGTERM (the pod is being deleted, grace period {grace}s)")


def _exit_line(terminated: Mapping[str, Any], signalled: bool) -> LogLine:
    code = int(terminated.get("exitCode") or 0)
    reason = terminated.get("reason") or ("Completed" if code == 0 else "Error")
    when = terminated.get("finishedAt") or terminated.get("startedAt") or ""
    if code == KILLED_EXIT_CODE and signalled:
        return LogLine(when, f"kubesim: killed by SIGKILL at the end of the grace period (exit code {code})")
    return LogLine(when, f"kubesim: exited with code {code} ({reason})")


def _run_lines(pod: Mapping[str, Any], name: str, state: Mapping[str, Any], last_run: bool) -> list[LogLine]:
    """The lines of one run of the container: start, SIGTERM (last run only), exit."""
    running, terminated = state.get("running"), state.get("terminated")
    started = (running or terminated or {}).get("startedAt")
    if not started:
        return []
    lines = [_started_line(pod, name, started)]
    signal = _sigterm_line(pod, started, (terminated or {}).get("finishedAt")) if last_run else None
    if signal is not None:
        lines.append(signal)
    if terminated:
        lines.append(_exit_line(terminated, signal is not None))
    return lines


def container_log(pod: Mapping[str, Any], name: str, previous: bool = False) -> list[LogLine]:
    """The container's stdout so far (of its previous run with `previous`), oldest first."""
    status = container_status(pod, name) or {}
    state = (status.get("lastState") if previous else status.get("state")) or {}
    return _run_lines(pod, name, state, last_run=not previous)


def finished(pod: Mapping[str, Any], name: str) -> bool:
    """True once the container's current run has exited (a follow of its log ends there)."""
    status = container_status(pod, name) or {}
    return bool((status.get("state") or {}).get("terminated"))


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _format(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time of a log line (None when unreadable)."""
    return _parse(text)
