"""core/v1 Events on pods, rate-limited and aggregated, plus the policy of when to send them.

`EventRecorder` sends Events from a bounded queue at a bounded rate (a token bucket, as
client-go's EventBroadcaster spam filter does) and aggregates repeats of the same reason on
the same pod into one Event whose count grows (k8s.io/client-go/tools/record/events_cache.go):
the Event name is derived from the pod and reason, a repeat PATCHes count/message/lastTimestamp.
`WaitNotifier` decides which pods hear about a waiting gang, so that a 1,000-pod gang does
not produce 1,000 Events per decision round.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ganggate.kube.calls import ApiCallError, call_json, rfc3339
from ganggate.kube.clock import WALL, Clock

if TYPE_CHECKING:
    from ganggate.core.state.pods import PodInfo

log = logging.getLogger(__name__)

COMPONENT = "ganggate-controller"
WARNING_REASONS = frozenset({"ProvisioningFailed", "ProvisioningPending", "GangConflict", "GangUnschedulable",
                             "GangCannotFit", "GangBindTimeout", "GangNotGated", "GangBroken", "GangTimedOut",
                             "GangExcessMember", "GangRestartCountsAsFailure",
                             "GangBlocksDrain"})
#: The prefix client-go's EventAggregator gives an Event that stands for similar ones (same
#: object and reason, other messages), once it has seen `AGGREGATE_MAX` distinct messages within
#: `AGGREGATE_SECONDS` (EventAggregatorByReasonMessageFunc, defaultAggregateMaxEvents = 10,
#: defaultAggregateIntervalInSeconds = 600: k8s.io/client-go/tools/record/events_cache.go).
WARNING_REASONS = WARNING_REASONS | {"PodGroupNotFound", "PodGroupFieldDropped"}  # controller.round.podgroups
COMBINED = "(combined from similar events): "
AGGREGATE_MAX = 10
AGGREGATE_SECONDS = 600.0


@dataclass(frozen=True)
class PodRef:
    """The involved object of an Event."""

    namespace: str
    name: str
    uid: str
    kind: str = "Pod"  # another kind (a Job) for the Events about a pod's owner
    api_version: str = "v1"

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodRef:
        meta = pod.get("metadata") or {}
        return cls(meta.get("namespace") or "default", meta.get("name") or "", meta.get("uid") or "")

    @classmethod
    def of(cls, pod: Mapping | PodRef | PodInfo) -> PodRef:
        """The reference to a pod object, a PodInfo of the controller's picture, or a PodRef."""
        if isinstance(pod, PodRef):
            return pod
        if isinstance(pod, Mapping):
            return cls.from_pod(pod)
        return cls(pod.namespace, pod.name, pod.uid)


def event_name(ref: PodRef, reason: str) -> str:
    """A stable Event name per (pod, reason), so that repeats aggregate into one Event."""
    digest = hashlib.sha1(f"{ref.namespace}/{ref.name}/{ref.uid}/{reason}".encode()).hexdigest()[:10]
    return f"{ref.name[:200]}.{digest}"


@dataclass
class _Sent:
    name: str
    count: int
    first: str
    #: The distinct messages sent in the current aggregation window, and when it began.
    messages: set[str] = field(default_factory=set)
    window: float = 0.0

    def shown(self, message: str, now: float) -> str:
        """The message to write: prefixed COMBINED once the window holds AGGREGATE_MAX of them."""
        if now - self.window > AGGREGATE_SECONDS:
            self.messages, self.window = set(), now
        self.messages.add(message)
        return COMBINED + message if len(self.messages) >= AGGREGATE_MAX else message


class EventRecorder:
    """Queues Events and sends them at most `rate` per second (burst `burst`); drops when full."""

    def __init__(self, core_api: Any, *, rate: float = 50.0, burst: int = 200, queue_size: int = 5000,
                 metrics: Any = None, host: str = "", clock: Clock = WALL) -> None:
        self.core = core_api
        self.clock = clock  # the Events' timestamps; the rate limit stays on real time (API pacing)
        self.rate = rate
        self.burst = burst
        self.metrics = metrics
        self.host = host
        self.queue: asyncio.Queue[tuple[PodRef, str, str]] = asyncio.Queue(maxsize=queue_size)
        self._tokens = float(burst)
        self._last = time.monotonic()
        # Per (pod, reason): namespace, name and uid, so that pods never share an Event.
        self._sent: dict[tuple[PodRef, str], _Sent] = {}
        self.sent_count = 0

    def emit(self, pod: Mapping | PodRef | PodInfo, reason: str, message: str, log_it: bool = True) -> None:
        """Queue an Event (non-blocking) and log the same line (unless the caller logs it per gang)."""
        ref = PodRef.of(pod)
        if log_it:
            level = logging.WARNING if reason in WARNING_REASONS else logging.INFO
            log.log(level, "%s %s/%s: %s", reason, ref.namespace, ref.name, message)
        try:
            self.queue.put_nowait((ref, reason, message))
        except asyncio.QueueFull:
            if self.metrics is not None:
                self.metrics.events_dropped.inc()

    async def _take_token(self) -> None:
        while True:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.rate)

    async def send(self, ref: PodRef, reason: str, message: str) -> None:
        """Create the Event, or bump the count of the one already sent for this pod and reason."""
        now = rfc3339(self.clock.now())
        key = (ref, reason)
        sent = self._sent.get(key)
        if sent is not None:
            # One Event per pod and reason stands for its repeats (EventCorrelator: count and
            # lastTimestamp bumped); one whose message moved says it combines similar ones.
            shown = sent.shown(message, self.clock.now())
            patch = {"count": sent.count + 1, "message": shown[:1024], "lastTimestamp": now}
            try:
                await call_json(self.core.patch_namespaced_event, sent.name, ref.namespace, patch,
                                verb="patch", metrics=self.metrics)
                sent.count += 1
                return
            except ApiCallError as exc:
                if exc.status != 404:
                    raise
                del self._sent[key]  # the Event expired (TTL): start a new one
        name = event_name(ref, reason)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            # A Node is cluster-scoped: its Events live in "default" with no involvedObject namespace,
            # as the kubelet writes them (what `kubectl describe node` selects on).
            "involvedObject": {"kind": ref.kind, "apiVersion": ref.api_version,
                               "namespace": "" if ref.kind == "Node" else ref.namespace,
                               "name": ref.name, "uid": ref.uid},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if reason in WARNING_REASONS else "Normal",
            "source": {"component": COMPONENT, **({"host": self.host} if self.host else {})},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.host or COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await call_json(self.core.create_namespaced_event, ref.namespace, body, verb="create", metrics=self.metrics)
            self._sent[key] = _Sent(name, 1, now, {message}, self.clock.now())
        except ApiCallError as exc:
            if exc.status != 409:
                raise
            # Sent by an earlier run or another replica: continue its count.
            existing = await call_json(self.core.read_namespaced_event, name, ref.namespace, verb="get",
                                       metrics=self.metrics)
            self._sent[key] = _Sent(name, int(existing.get("count") or 1), existing.get("firstTimestamp") or now,
                                    window=self.clock.now())
            await self.send(ref, reason, message)

    async def run(self) -> None:
        """Send queued Events until cancelled; a failed Event is logged and dropped."""
        while True:
            ref, reason, message = await self.queue.get()
            try:  # task_done once sent or dropped, so queue.join() waits for the send itself
                await self._take_token()
                await self.send(ref, reason, message)
                self.sent_count += 1
            except ApiCallError as exc:
                log.info("event %s on %s/%s not sent: %s", reason, ref.namespace, ref.name, exc)
            finally:
                self.queue.task_done()

    def forget(self, uid: str) -> None:
        """Drop aggregation state for a deleted pod."""
        for key in [k for k in self._sent if k[0].uid == uid]:
            del self._sent[key]


@dataclass
class _GangNotice:
    reason: str
    kind: str
    message: str
    at: float
    told: set[str] = field(default_factory=set)  # pod uids that heard this reason
    changes: int = -1  # the gang's Gang.changes when last told (-1: unknown)


@dataclass
class Notice:
    """What to do about a waiting gang this round: the pods to send its Event to, and whether
    the wait changed in kind (then it is logged at INFO/WARNING; a repeat only at DEBUG)."""

    pods: list[PodInfo]
    changed: bool


class WaitNotifier:
    """Chooses which pods get a waiting gang's Event, and when its wait is worth a log line.

    A wait is told when it changes in kind: its Event reason, or `Waiting.kind` (what it is
    about apart from its counts: "room", "nodes", "contended", "never:label", ...). A new reason
    goes to every pod; a new kind of the same reason to the gang's first pod and to pods that
    have not heard this reason yet; both are logged once. A repeat of the same kind (a count in
    the message moved: "room for 1", "room for 2"; or the same text) is logged only at DEBUG and
    folded into the first pod's Event, whose count the recorder bumps, as client-go's
    EventCorrelator folds repeats (k8s.io/client-go/tools/record/events_cache.go): at most every
    `aggregate_seconds` when its message moved, every `repeat_seconds` when it did not. A kind of
    "" stands for the message itself (every new text is a change).
    """

    def __init__(self, repeat_seconds: float = 300.0, aggregate_seconds: float = 30.0) -> None:
        self.repeat_seconds = repeat_seconds
        self.aggregate_seconds = aggregate_seconds
        self._notices: dict[tuple[str, str], _GangNotice] = {}

    def quiet(self, gang_key: tuple[str, str], reason: str, message: str, changes: int, now: float,
              kind: str = "") -> bool:
        """True when `tell` would choose no pod: the same reason and kind as last told, not due
        for a repeat or an aggregated update, and the gang's pods (`Gang.changes`) as they were
        then. A round asks it of every waiting gang before building the gang's pod list."""
        notice = self._notices.get(gang_key)
        if notice is None or notice.changes != changes or notice.reason != reason or notice.kind != (kind or message):
            return False
        wait = self.aggregate_seconds if notice.message != message else self.repeat_seconds
        return now - notice.at < wait

    def due(self, gang_key: tuple[str, str], now: float) -> bool:
        """True when the gang's unchanged message is due to be repeated on its first pod."""
        notice = self._notices.get(gang_key)
        return notice is not None and now - notice.at >= self.repeat_seconds

    def tell(self, gang_key: tuple[str, str], reason: str, message: str, pods: list[PodInfo], now: float,
             kind: str = "", changes: int = -1) -> Notice:
        """The Notice for this wait now; records the sending (and `changes`, the gang's
        Gang.changes, for `quiet`)."""
        notice = self._tell(gang_key, reason, message, pods, now, kind)
        if (kept := self._notices.get(gang_key)) is not None:
            kept.changes = changes
        return notice

    def _tell(self, gang_key: tuple[str, str], reason: str, message: str, pods: list[PodInfo], now: float,
              kind: str) -> Notice:
        if not pods:
            return Notice([], False)
        kind = kind or message
        ordered = sorted(pods, key=lambda p: (p.created, p.name))
        first = ordered[0]
        notice = self._notices.get(gang_key)
        if notice is None or notice.reason != reason:
            self._notices[gang_key] = _GangNotice(reason, kind, message, now, {p.uid for p in ordered})
            return Notice(ordered, True)
        out: list[PodInfo] = []
        changed = notice.kind != kind
        wait = self.aggregate_seconds if notice.message != message else self.repeat_seconds
        if changed or now - notice.at >= wait:
            out.append(first)
            notice.kind, notice.message, notice.at = kind, message, now
        for pod in ordered:
            if pod.uid not in notice.told:
                notice.told.add(pod.uid)
                if pod is not first or not out:
                    out.append(pod)
        return Notice(out, changed)

    def targets(self, gang_key: tuple[str, str], reason: str, message: str,
                pods: list[PodInfo], now: float, kind: str = "") -> list[PodInfo]:
        """The pods to send this (reason, message) to now (possibly none), oldest first."""
        return self.tell(gang_key, reason, message, pods, now, kind).pods

    def forget(self, gang_key: tuple[str, str]) -> None:
        """Drop the notice of a gang no longer waiting (told anew if it waits again)."""
        self._notices.pop(gang_key, None)

    def forget_except(self, live: Iterable[tuple[str, str]]) -> None:
        """Drop notices of gangs no longer waiting."""
        keep = set(live)
        for key in [k for k in self._notices if k not in keep]:
            del self._notices[key]
