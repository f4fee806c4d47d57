"""The scheduling queue: active, backoff and unschedulable pods, and gated ones held back.

Follows kube-scheduler 1.35's PriorityQueue (pkg/scheduler/backend/queue/scheduling_queue.go,
active_queue.go, backoff_queue.go):
- activeQ is ordered by PrioritySort (framework/plugins/queuesort/priority_sort.go): higher
  spec.priority first, then the earlier queue timestamp (when the pod entered the queue, reset
  when it last failed).
- A pod that fails goes to the unschedulable pool with the plugins that rejected it
  (AddUnschedulableIfNotPresent); one that failed with no plugin to blame (an error, no nodes
  at all) goes to backoffQ. A cluster event moves an unschedulable pod only when one of the
  plugins that rejected it registered the event and its QueueingHint says Queue
  (movePodsToActiveOrBackoffQueue, isPodWorthRequeuing: see ganggate.sim.scheduler.hints);
  it goes to backoffQ while its backoff (1 s doubling per attempt up to 10 s,
  calculateBackoffDuration) runs, else to activeQ.
- SchedulerPopFromBackoffQ (beta, on since 1.33): when activeQ is empty, pop() takes the head of
  backoffQ at once (activeQueue.unlockedPop via backoffQPopper); backoff expiries are aligned
  to whole seconds (alignToWindow) and backoffQ is ordered by expiry, then as activeQ. Pods
  that failed with no plugin to blame wait in podErrorBackoffQ, which is never popped early
  (backoffQueue.add, popBackoff).
- Pods left unschedulable longer than 5 minutes are moved anyway, checked every 30 s
  (flushUnschedulablePodsLeftover, DefaultPodMaxInUnschedulablePodsDuration; Run's wait.Until).
- A pod whose spec.schedulingGates is not empty is held back (PreEnqueue, plugin
  schedulinggates); once its gates are gone it goes straight to activeQ.
kubesim's scheduling cycle runs without awaiting anything, so no event can arrive while a pod is
in flight: the in-flight event list (and moveRequestCycle without QueueingHints) never applies.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ganggate.sim.scheduler import hints
from ganggate.sim.scheduler.hints import ClusterEvent
from ganggate.sim.scheduler.plugins import pod_priority

MAX_IN_UNSCHEDULABLE_SECONDS = 300.0  # DefaultPodMaxInUnschedulablePodsDuration
LEFTOVER_FLUSH_INTERVAL = 30.0  # wait.Until(flushUnschedulablePodsLeftover, 30*time.Second)


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


def unscheduled_pod_update_events(old: Mapping, new: Mapping) -> list[ClusterEvent]:
    """PodSchedulingPropertiesChange for a pod not yet bound (the events a QueueingHint sees)."""
    actions = []
    if ((old.get("metadata") or {}).get("labels") or {}) != ((new.get("metadata") or {}).get("labels") or {}):
        actions.append(hints.UPDATE_POD_LABEL)
    if hints.pod_scaled_down(old, new):
        actions.append(hints.UPDATE_POD_SCALE_DOWN)
    if is_gated(old) and not is_gated(new):
        actions.append(hints.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    if len((old.get("spec") or {}).get("tolerations") or []) != len((new.get("spec") or {}).get("tolerations") or []):
        actions.append(hints.UPDATE_POD_TOLERATION)
    if hints.generated_claims_changed(old, new):
        actions.append(hints.UPDATE_POD_GENERATED_RESOURCE_CLAIM)
    return [ClusterEvent(hints.UNSCHEDULED_POD, a, "UnscheduledPodUpdate") for a in actions or [hints.UPDATE_POD_OTHER]]


@dataclass
class QueuedPod:
    """A pending pod known to the queue, with what the scheduler computed about it once."""

    key: str
    pod: Mapping
    priority: int
    timestamp: int  # queue order among equal priorities
    attempts: int = 0
    failed_at: float = 0.0
    rejected_by: frozenset[str] = frozenset()  # UnschedulablePlugins of the last failure
    extra: dict[str, Any] = field(default_factory=dict)


class SchedulingQueue:
    """Pending pods by state; pop() returns the next pod to try, by PrioritySort."""

    def __init__(
        self,
        *,
        initial_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 10.0,
        max_unschedulable_seconds: float = MAX_IN_UNSCHEDULABLE_SECONDS,
        pop_from_backoff: bool = True,
        queueing_hints: bool = True,
        release: tuple[int, int] = (1, 35),
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial_backoff = initial_backoff_seconds
        self.max_backoff = max_backoff_seconds
        self.max_unschedulable = max_unschedulable_seconds
        self.pop_from_backoff = pop_from_backoff  # SchedulerPopFromBackoffQ
        self.queueing_hints = queueing_hints  # SchedulerQueueingHints
        self.hint_table = hints.registrations(queueing_hints, release)
        self._now = now
        self._seq = itertools.count()
        self.pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, int, int, str]] = []  # (-priority, timestamp, entry id, key)
        self._active_entry: dict[str, int] = {}  # key -> live entry id
        self._backoff: list[tuple[float, int, int, int, str]] = []  # (ready_at, -priority, timestamp, entry, key)
        self._error_backoff: list[tuple[float, int, int, int, str]] = []  # podErrorBackoffQ, same order
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
        heap = self._backoff if queued.rejected_by else self._error_backoff
        heapq.heappush(heap, (ready_at, -queued.priority, queued.timestamp, entry, queued.key))

    def _drop(self, key: str) -> None:
        self._active_entry.pop(key, None)
        self._backoff_entry.pop(key, None)
        self.unschedulable.pop(key, None)
        self.gated.discard(key)

    def _align(self, t: float) -> float:
        """alignToWindow: whole seconds when popping from backoffQ is on."""
        return math.floor(t) if self.pop_from_backoff else t

    def backoff_until(self, queued: QueuedPod) -> float:
        """When the pod's backoff ends (getBackoffTime / calculateBackoffDuration)."""
        if queued.attempts == 0:
            return 0.0
        duration = self.initial_backoff
        for _ in range(1, queued.attempts):
            if duration > self.max_backoff - duration:
                duration = self.max_backoff
                break
            duration += duration
        return self._align(queued.failed_at + duration)

    def is_backing_off(self, queued: QueuedPod) -> bool:
        """isPodBackingoff: the expiry is not before the current window."""
        return queued.attempts > 0 and not self.backoff_until(queued) < self._align(self._now())

    def _requeue(self, queued: QueuedPod) -> str:
        """requeuePodWithQueueingStrategy(queueAfterBackoff): backoffQ while backing off, else activeQ."""
        if self.is_backing_off(queued):
            self._to_backoff(queued, self.backoff_until(queued))
            return "backoff"
        self._to_active(queued)
        return "active"

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
        """The pending pod changed (PriorityQueue.Update): ungated pods are released; an
        unschedulable one is retried when the change may help it (its QueueingHints, or without
        them any change apart from status)."""
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
        elif key in self.unschedulable:
            if self.queueing_hints:
                if any(hints.worth_requeuing(self.hint_table, queued.rejected_by, pod, event, old, pod)
                       for event in unscheduled_pod_update_events(old, pod)):
                    self._requeue(queued)
            elif spec_changed(old, pod):
                self._requeue(queued)
        elif key in self._active_entry:
            self._to_active(queued)  # priority may have changed
        elif key in self._backoff_entry:
            self._to_backoff(queued, self.backoff_until(queued))
        return queued

    def delete(self, key: str) -> None:
        """The pod is gone, bound or finished: forget it."""
        if self.pods.pop(key, None) is not None:
            self._drop(key)

    # -- scheduling cycle ----------------------------------------------------------------

    def pop(self) -> QueuedPod | None:
        """The next pod to try (its attempt counted), or None when there is none: activeQ's
        head, or with SchedulerPopFromBackoffQ backoffQ's head when activeQ is empty (not
        podErrorBackoffQ's)."""
        while self._active:
            _, _, entry, key = heapq.heappop(self._active)
            if self._active_entry.get(key) == entry:
                del self._active_entry[key]
                return self._popped(self.pods[key])
        if self.pop_from_backoff:
            while self._backoff:
                *_, entry, key = heapq.heappop(self._backoff)
                if self._backoff_entry.get(key) == entry:
                    del self._backoff_entry[key]
                    return self._popped(self.pods[key])
        return None

    @staticmethod
    def _popped(queued: QueuedPod) -> QueuedPod:
        queued.attempts += 1
        return queued

    def unschedulable_failed(self, queued: QueuedPod, rejected_by: frozenset[str] | None = None) -> str:
        """The pod fit nowhere (AddUnschedulableIfNotPresent): to the unschedulable pool with the
        plugins that rejected it, or to backoffQ when no plugin did; where it went."""
        if queued.key not in self.pods:
            return "gone"
        queued.failed_at = self._now()
        queued.timestamp = next(self._seq)
        if rejected_by is not None:
            queued.rejected_by = frozenset(rejected_by)
        if rejected_by is not None and not rejected_by:
            self._to_backoff(queued, self.backoff_until(queued))
            return "backoff"
        self._drop(queued.key)
        self.unschedulable[queued.key] = queued.failed_at
        return "unschedulable"

    def error_failed(self, queued: QueuedPod) -> None:
        """Binding failed (an API error): retry after backoff."""
        if queued.key not in self.pods:
            return
        queued.failed_at = self._now()
        queued.timestamp = next(self._seq)
        queued.rejected_by = frozenset()
        self._to_backoff(queued, self.backoff_until(queued))

    def move(self, event: ClusterEvent, old: Mapping | None = None, new: Mapping | None = None,
             pre_check: Callable[[Mapping], bool] | None = None) -> int:
        """MoveAllToActiveOrBackoffQueue: the unschedulable pods this event may help (pre_check
        first, then their QueueingHints) to backoffQ or activeQ; how many moved."""
        if not hints.is_event_of_interest(self.hint_table, event):
            return 0
        moved = 0
        for key in list(self.unschedulable):
            queued = self.pods[key]
            if pre_check is not None and not pre_check(queued.pod):
                continue
            if not hints.worth_requeuing(self.hint_table, queued.rejected_by, queued.pod, event, old, new):
                continue
            self._requeue(queued)
            moved += 1
        return moved

    def move_all_to_active_or_backoff(self) -> int:
        """Retry every unschedulable pod (a wildcard event, as ForceActivate)."""
        return self.move(hints.FORCE_ACTIVATE)

    def flush(self) -> None:
        """Backed-off pods whose time has come, and long-unschedulable ones, to activeQ."""
        self.flush_backoff()
        self.flush_unschedulable_leftover()

    def flush_backoff(self) -> None:
        """Backed-off pods whose time has come to activeQ (flushBackoffQCompleted, both heaps)."""
        for heap in (self._backoff, self._error_backoff):
            while heap:
                ready_at, *_, entry, key = heap[0]
                if self._backoff_entry.get(key) != entry:
                    heapq.heappop(heap)
                    continue
                if not ready_at < self._align(self._now()):
                    break
                heapq.heappop(heap)
                self._to_active(self.pods[key])

    def flush_unschedulable_leftover(self) -> int:
        """Pods unschedulable longer than `max_unschedulable_seconds` move as on a wildcard event
        (flushUnschedulablePodsLeftover, EventUnschedulableTimeout); call it every 30 s."""
        now = self._now()
        stale = [key for key, since in self.unschedulable.items() if now - since > self.max_unschedulable]
        for key in stale:
            self._requeue(self.pods[key])
        return len(stale)

    def next_wakeup(self) -> float | None:
        """The earliest time a backed-off pod becomes ready, if any (in the clock of `now`)."""
        heads = []
        for heap in (self._backoff, self._error_backoff):
            while heap and self._backoff_entry.get(heap[0][-1]) != heap[0][-2]:
                heapq.heappop(heap)
            if heap:
                heads.append(heap[0][0])
        if not heads:
            return None
        return min(heads) + 1.0 if self.pop_from_backoff else min(heads)  # the window must have passed
