"""The scheduling queue: active, backoff and unschedulable pods, and gated ones held back.

Follows pkg/scheduler/backend/queue/scheduling_queue.go (PriorityQueue):
- activeQ is ordered by PrioritySort (framework/plugins/queuesort/priority_sort.go): higher
  spec.priority first, then the earlier queue timestamp (when the pod entered the queue, reset
  when it last failed; for a pod never retried that is its arrival order).
- A pod that fails goes to the unschedulable set; a cluster event (node added or updated,
  a pod deleted or finished) moves every unschedulable pod to activeQ, or to backoffQ while
  its backoff (1 s doubling per attempt up to 10 s: podInitialBackoffSeconds /
  podMaxBackoffSeconds) has not expired. Pods left unschedulable longer than
  `max_unschedulable_seconds` are retried anyway (flushUnschedulablePodsLeftover, 5 min in
  kube-scheduler; shorter and configurable here).
- A pod whose spec.schedulingGates is not empty is held back (PreEnqueue, plugin
  schedulinggates); once its gates are gone it goes straight to activeQ.
Queueing hints (skipping events that cannot help a given pod) are not emulated.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ganggate.sim.scheduler.plugins import pod_priority


def is_gated(pod: Mapping) -> bool:
    """True while the pod has scheduling gates (KEP-3521)."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def spec_changed(old: Mapping, new: Mapping) -> bool:
    """isPodUpdated (scheduling_queue.go): a change apart from status and bookkeeping."""

    def strip(pod: Mapping) -> dict:
        pod = dict(pod)
        pod.pop("status", None)
        metadata = dict(pod.get("metadata") or {})
        for key in ("resourceVersion", "generation", "managedFields", "finalizers"):
            metadata.pop(key, None)
        pod["metadata"] = metadata
        return pod

    return strip(old) != strip(new)


@dataclass
class QueuedPod:
    """A pending pod known to the queue, with what the scheduler computed about it once."""

    key: str
    pod: Mapping
    priority: int
    timestamp: int  # queue order among equal priorities
    attempts: int = 0
    failed_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class SchedulingQueue:
    """Pending pods by state; pop() returns the next pod to try, by PrioritySort."""

    def __init__(
        self,
        *,
        initial_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 10.0,
        max_unschedulable_seconds: float = 60.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial_backoff = initial_backoff_seconds
        self.max_backoff = max_backoff_seconds
        self.max_unschedulable = max_unschedulable_seconds
        self._now = now
        self._seq = itertools.count()
        self.pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, int, int, str]] = []  # (-priority, timestamp, entry id, key)
        self._active_entry: dict[str, int] = {}  # key -> live entry id
        self._backoff: list[tuple[float, int, str]] = []
        self._backoff_entry: dict[str, int] = {}
        self.unschedulable: dict[str, float] = {}  # key -> when it was put there
        self.gated: set[str] = set()

    # -- states --------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self.pods

    def __len__(self) -> int:
        return len(self.pods)

    def active_count(self) -> int:
        return len(self._active_entry)

    def backoff_count(self) -> int:
        return len(self._backoff_entry)

    def _to_active(self, queued: QueuedPod) -> None:
        self._drop(queued.key)
        entry = next(self._seq)
        self._active_entry[queued.key] = entry
        heapq.heappush(self._active, (-queued.priority, queued.timestamp, entry, queued.key))

    def _to_backoff(self, queued: QueuedPod, ready_at: float) -> None:
        self._drop(queued.key)
        entry = next(self._seq)
        self._backoff_entry[queued.key] = entry
        heapq.heappush(self._backoff, (ready_at, entry, queued.key))

    def _drop(self, key: str) -> None:
        self._active_entry.pop(key, None)
        self._backoff_entry.pop(key, None)
        self.unschedulable.pop(key, None)
        self.gated.discard(key)

    def backoff_until(self, queued: QueuedPod) -> float:
        """When the pod's backoff ends (calculateBackoffDuration: doubling from the initial)."""
        duration = self.initial_backoff
        for _ in range(1, queued.attempts):
            duration *= 2
            if duration >= self.max_backoff:
                duration = self.max_backoff
                break
        return queued.failed_at + duration

    def _requeue(self, queued: QueuedPod) -> None:
        ready_at = self.backoff_until(queued)
        if queued.attempts and ready_at > self._now():
            self._to_backoff(queued, ready_at)
        else:
            self._to_active(queued)

    # -- informer events -----------------------------------------------------------------

    def add(self, key: str, pod: Mapping, **extra: Any) -> QueuedPod:
        """A new pending pod: gated pods wait, others go to activeQ."""
        queued = QueuedPod(key, pod, pod_priority(pod), next(self._seq), extra=dict(extra))
        self.pods[key] = queued
        if is_gated(pod):
            self.gated.add(key)
        else:
            self._to_active(queued)
        return queued

    def update(self, key: str, pod: Mapping, **extra: Any) -> QueuedPod:
        """The pending pod changed: ungated pods are released, changed specs retried."""
        queued = self.pods.get(key)
        if queued is None:
            return self.add(key, pod, **extra)
        old = queued.pod
        queued.pod = pod
        queued.priority = pod_priority(pod)
        queued.extra.update(extra)
        if key in self.gated:
            if not is_gated(pod):
                self._to_active(queued)
        elif is_gated(pod):
            self._drop(key)
            self.gated.add(key)
        elif key in self.unschedulable and spec_changed(old, pod):
            self._requeue(queued)
        elif key in self._active_entry:
            self._to_active(queued)  # priority may have changed
        return queued

    def delete(self, key: str) -> None:
        """The pod is gone, bound or finished: forget it."""
        if self.pods.pop(key, None) is not None:
            self._drop(key)

    # -- scheduling cycle ----------------------------------------------------------------

    def pop(self) -> QueuedPod | None:
        """The next pod to try (its attempt counted), or None when activeQ is empty."""
        while self._active:
            _, _, entry, key = heapq.heappop(self._active)
            if self._active_entry.get(key) == entry:
                del self._active_entry[key]
                queued = self.pods[key]
                queued.attempts += 1
                return queued
        return None

    def unschedulable_failed(self, queued: QueuedPod) -> None:
        """The pod fit nowhere: park it until a cluster event (AddUnschedulableIfNotPresent)."""
        if queued.key not in self.pods:
            return
        queued.failed_at = self._now()
        queued.timestamp = next(self._seq)
        self._drop(queued.key)
        self.unschedulable[queued.key] = queued.failed_at

    def error_failed(self, queued: QueuedPod) -> None:
        """Binding failed (an API error): retry after backoff."""
        if queued.key not in self.pods:
            return
        queued.failed_at = self._now()
        queued.timestamp = next(self._seq)
        self._to_backoff(queued, self.backoff_until(queued))

    def move_all_to_active_or_backoff(self) -> int:
        """A cluster event may have made room: retry every unschedulable pod."""
        keys = list(self.unschedulable)
        for key in keys:
            self._requeue(self.pods[key])
        return len(keys)

    def flush(self) -> None:
        """Backed-off pods whose time has come, and long-unschedulable ones, to activeQ."""
        self.flush_backoff()
        self.flush_unschedulable_leftover()

    def flush_backoff(self) -> None:
        """Backed-off pods whose time has come to activeQ (flushBackoffQCompleted; cheap)."""
        now = self._now()
        while self._backoff and self._backoff[0][0] <= now:
            _, entry, key = heapq.heappop(self._backoff)
            if self._backoff_entry.get(key) == entry:
                self._to_active(self.pods[key])

    def flush_unschedulable_leftover(self) -> None:
        """Pods unschedulable for `max_unschedulable_seconds` are retried (a scan: call it rarely)."""
        now = self._now()
        stale = [key for key, since in self.unschedulable.items() if now - since >= self.max_unschedulable]
        for key in stale:
            self._requeue(self.pods[key])

    def next_wakeup(self) -> float | None:
        """The earliest time a backed-off pod becomes ready, if any."""
        while self._backoff and self._backoff_entry.get(self._backoff[0][2]) != self._backoff[0][1]:
            heapq.heappop(self._backoff)
        return self._backoff[0][0] if self._backoff else None
