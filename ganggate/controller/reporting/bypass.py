"""Gangs that bypassed the gate: gang pods created without ganggate's gate and never released by it.

A pod of a served scheduler that carries `scheduling.k8s.io/group-name` but neither the gate
nor a `ganggate.io/decision` annotation was not gated by the webhook (or someone else removed
the gate): the scheduler places it alone, so its gang is not all-or-nothing. `BypassTracker`
keeps such pods per gang as pod events arrive and says which gangs are due to be reported
(once each); `describe` is the message. Pure: no I/O; the controller does not touch those pods.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ganggate.contract import GATE_NAME, ContractError
from ganggate.core.placement.explain import plural

GangKey = tuple[str, str]

CAUSES = ("the ganggate webhook is not installed (no MutatingWebhookConfiguration), the namespace is "
          "excluded by its namespaceSelector, or its failurePolicy is Ignore and it could not be reached")


def bypass_key(pod: Any, scheduler_names: Iterable[str]) -> GangKey | None:
    """The gang of a pod (a PodInfo) that bypassed the gate, or None when it did not."""
    group = pod.group_name
    if not group or pod.scheduler_name not in tuple(scheduler_names) or pod.gated:
        return None
    if pod.decided:
        return None  # released by ganggate (it records a decision)
    return (pod.namespace, str(group))


@dataclass
class BypassReport:
    """One gang that bypassed the gate, as seen now."""

    gang_key: GangKey
    pods: list[Any]  # PodInfo of the pods that bypassed, by name
    gated: int = 0  # pods of the gang the webhook did gate
    invalid: list[str] = field(default_factory=list)  # "pod: why" for pods with bad annotations

    @property
    def gang(self) -> str:
        return f"{self.gang_key[0]}/{self.gang_key[1]}"


def describe(report: BypassReport) -> str:
    """The GangNotGated message: how many pods bypassed, likely causes, invalid annotations."""
    count = len(report.pods)
    verb = "was" if count == 1 else "were"
    text = (f"{plural(count, 'pod')} of gang {report.gang} {verb} created without the scheduling gate "
            f"{GATE_NAME} and not released by ganggate, so the gang is not all-or-nothing")
    if report.gated:
        text += f" ({plural(report.gated, 'other pod')} gated)"
    text += f". Likely causes: {CAUSES}."
    if report.invalid:
        shown = "; ".join(report.invalid[:5])
        more = f"; and {len(report.invalid) - 5} more" if len(report.invalid) > 5 else ""
        text += f" Invalid annotations (the webhook would have refused these pods): {shown}{more}."
    return text


def invalid_of(pods: Iterable[Any]) -> list[str]:
    """'pod: why' for each pod whose gang annotations do not parse."""
    return [f"{p.name}: {p.gang.message()}" for p in sorted(pods, key=lambda p: p.name)
            if isinstance(p.gang, ContractError)]


class BypassTracker:
    """Pods that bypassed the gate, per gang; each gang is reported once, after it settles."""

    def __init__(self, scheduler_names: Iterable[str], settle_seconds: float = 2.0) -> None:
        self.scheduler_names = tuple(scheduler_names)
        self.settle_seconds = settle_seconds
        self.gangs: dict[GangKey, dict[str, Any]] = {}
        self._changed: dict[GangKey, float] = {}
        self._where: dict[str, GangKey] = {}  # pod key -> gang it was filed under
        self.reported: set[GangKey] = set()

    def reset(self, pods: Iterable[Any]) -> None:
        """After a relist: file every pod again (gangs already reported stay reported)."""
        self.gangs, self._where = {}, {}
        for pod in pods:
            self.update(pod.key, pod)
        for key in [k for k in self.reported if k not in self.gangs]:
            self.reported.discard(key)

    def update(self, pod_key: str, pod: Any | None) -> None:
        """A pod added or changed (PodInfo), or deleted (None)."""
        key = bypass_key(pod, self.scheduler_names) if pod is not None else None
        old = self._where.get(pod_key)
        if old is not None and old != key:
            del self._where[pod_key]
            members = self.gangs.get(old, {})
            members.pop(pod_key, None)
            if not members:  # the gang is gone (or gated now): a new one is reported anew
                self.gangs.pop(old, None)
                self._changed.pop(old, None)
                self.reported.discard(old)
        if key is None:
            return
        members = self.gangs.setdefault(key, {})
        if pod_key not in members and key not in self.reported:
            self._changed[key] = time.monotonic()
        members[pod_key] = pod
        self._where[pod_key] = key

    def report(self, key: GangKey, gang: Any = None) -> BypassReport:
        """What is known now of one gang that bypassed (gang: its core Gang, if any)."""
        pods = sorted(self.gangs.get(key, {}).values(), key=lambda p: p.name)
        gated = len(gang.gated_pods()) if gang is not None else 0
        return BypassReport(key, pods, gated, invalid_of(pods))

    def due(self, gangs: dict[GangKey, Any], now: float | None = None) -> list[BypassReport]:
        """Gangs to report now: complete, or unchanged for settle_seconds; marks them reported."""
        now = time.monotonic() if now is None else now
        out = []
        for key in sorted(self.gangs):
            if key in self.reported:
                continue
            gang = gangs.get(key)
            spec = getattr(gang, "spec", None)
            complete = gang is not None and spec is not None and gang.live_count >= spec.pod_num
            if complete or now - self._changed.get(key, now) >= self.settle_seconds:
                self.reported.add(key)
                out.append(self.report(key, gang))
        return out
