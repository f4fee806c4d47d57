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

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, NamedTuple

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


def _started_line(pod: Mapping[str, Any], name: str, when: str) -> LogLine:
    container = _container_spec(pod, name)
    command = " ".join(str(part) for part in (container.get("command") or []) + (container.get("args") or []))
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
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _format(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time of a log line (None when unreadable)."""
    return _parse(text)
