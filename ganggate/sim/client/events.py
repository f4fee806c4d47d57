"""kubesim's event recorder, as client-go's tools/record: a component's Events about an object.

`EventCorrelator` decides, without I/O, what one recorded event becomes (events_cache.go
NewEventCorrelator with its defaults): dropped by the spam filter (a source may burst 25 events
about one object, then 1 every 5 minutes: EventSourceObjectSpamFilter), combined with similar
ones (the 10th distinct message of one reason about one object within 10 minutes becomes
"(combined from similar events): <message>": EventAggregator), or counted into an Event already
written (the same event again is a PATCH of count and lastTimestamp: eventLogger). The Event
itself is made as event.go makeEvent makes it (name `<object>.<unix nanoseconds in hex>`, source
and reportingController the component). `EventRecorder` writes them in the background, in order,
best effort (the broadcaster's sink: a failed write is logged and dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ganggate.sim.apimachinery.timestamps import now_rfc3339

log = logging.getLogger(__name__)

#: events_cache.go: defaultAggregateMaxEvents, defaultAggregateIntervalInSeconds,
#: defaultSpamBurst, defaultSpamQPS.
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL_SECONDS = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED_PREFIX = "(combined from similar events): "


def object_reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """reference.GetReference: the involvedObject of an Event about `obj`."""
    meta = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind"), "namespace": meta.get("namespace"), "name": meta.get("name"),
           "uid": meta.get("uid"), "apiVersion": obj.get("apiVersion"), "resourceVersion": meta.get("resourceVersion")}
    return {k: v for k, v in ref.items() if v}


def make_event(ref: Mapping[str, Any], component: str, event_type: str, reason: str, message: str,
               now_ns: int, stamp: str) -> dict[str, Any]:
    """event.go makeEvent and generateEvent: a core/v1 Event, count 1."""
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{ref.get('name')}.{now_ns:x}", "namespace": ref.get("namespace") or "default"},
        "involvedObject": dict(ref), "reason": reason, "message": message, "type": event_type,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "source": {"component": component}, "reportingComponent": component,  # reportingInstance: the host, none
    }


def _object_key(event: Mapping[str, Any]) -> tuple:
    ref = event["involvedObject"]
    return (event["source"].get("component"), event["source"].get("host"), ref.get("kind"), ref.get("namespace"),
            ref.get("name"), ref.get("uid"), ref.get("apiVersion"))


@dataclass
class _Bucket:
    """flowcontrol's token bucket: `tokens` left at `at` (seconds)."""

    tokens: float
    at: float


@dataclass
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last: float = float("-inf")


@dataclass
class Outcome:
    """What to write for one recorded event: nothing (skip), a new Event, or a patch of `name`."""

    skip: bool = False
    event: dict[str, Any] | None = None
    patch_name: str | None = None
    patch: dict[str, Any] | None = None
    namespace: str = "default"


class EventCorrelator:
    """events_cache.go EventCorrelator with its default options; `now` is seconds (monotonic)."""

    def __init__(self) -> None:
        self._spam: dict[tuple, _Bucket] = {}
        self._aggregates: dict[tuple, _Aggregate] = {}
        self._seen: dict[tuple, tuple[int, str, str]] = {}  # event key -> (count, firstTimestamp, name)

    def correlate(self, event: dict[str, Any], now: float) -> Outcome:
        """EventCorrelate: aggregate, then observe (dedupe), then the spam filter."""
        event, key = self._aggregate(event, now)
        seen = self._seen.get(key)
        if seen is not None:
            count, first, name = seen
            event = dict(event, count=count + 1, firstTimestamp=first, metadata=dict(event["metadata"], name=name))
        self._seen[key] = (event["count"], event["firstTimestamp"], event["metadata"]["name"])
        if self._filtered(event, now):
            return Outcome(skip=True)
        if seen is not None:
            return Outcome(patch_name=event["metadata"]["name"], namespace=event["metadata"]["namespace"], patch={
                "count": event["count"], "lastTimestamp": event["lastTimestamp"], "message": event["message"]})
        return Outcome(event=event)

    def _aggregate(self, event: dict[str, Any], now: float) -> tuple[dict[str, Any], tuple]:
        """EventAggregate (EventAggregatorByReasonFunc, EventAggregatorByReasonMessageFunc)."""
        event_key = _object_key(event) + (event["involvedObject"].get("fieldPath"), event["type"], event["reason"],
                                          event["message"])
        aggregate_key = _object_key(event) + (event["type"], event["reason"], event.get("reportingComponent"),
                                              event.get("reportingInstance"))
        record = self._aggregates.get(aggregate_key)
        if record is None or now - record.last > AGGREGATE_INTERVAL_SECONDS:
            record = self._aggregates[aggregate_key] = _Aggregate()
        record.messages.add(event["message"])
        record.last = now
        if len(record.messages) < AGGREGATE_MAX_EVENTS:
            return event, event_key
        record.messages.pop()  # do not grow the set beyond the maximum
        combined = dict(event, message=COMBINED_PREFIX + event["message"], count=1)
        return combined, aggregate_key

    def _filtered(self, event: Mapping[str, Any], now: float) -> bool:
        """EventSourceObjectSpamFilter.Filter: a token bucket per source and object."""
        key = _object_key(event)
        bucket = self._spam.get(key)
        if bucket is None:
            bucket = self._spam[key] = _Bucket(float(SPAM_BURST), now)
        bucket.tokens = min(float(SPAM_BURST), bucket.tokens + (now - bucket.at) * SPAM_QPS)
        bucket.at = now
        if bucket.tokens < 1.0:
            return True
        bucket.tokens -= 1.0
        return False


class EventRecorder:
    """A component's recorder: `event()` never waits; `run()` writes the Events in order."""

    def __init__(self, base_url: str, component: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.component = component
        self.correlator = EventCorrelator()
        self._pending: asyncio.Queue[Outcome] = asyncio.Queue()

    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record an Event about `obj` (recorder.Event): correlated now, written by run()."""
        made = make_event(object_reference(obj), self.component, event_type, reason, message,
                          time.time_ns(), now_rfc3339())
        outcome = self.correlator.correlate(made, time.monotonic())
        if not outcome.skip:
            self._pending.put_nowait(outcome)

    @property
    def idle(self) -> bool:
        return self._pending.empty()

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Write recorded Events until cancelled (StartRecordingToSink, best effort)."""
        while True:
            outcome = await self._pending.get()
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                await self._write(session, outcome)

    async def _write(self, session: aiohttp.ClientSession, outcome: Outcome) -> None:
        if outcome.event is not None:
            namespace = outcome.event["metadata"]["namespace"]
            async with session.post(f"{self.base_url}/api/v1/namespaces/{namespace}/events", json=outcome.event) as r:
                if r.status >= 300:
                    log.info("event %s: HTTP %s", outcome.event["reason"], r.status)
                await r.read()
            return
        # The sink's Patch: a strategic merge patch of count, lastTimestamp and message.
        url = f"{self.base_url}/api/v1/namespaces/{outcome.namespace}/events/{outcome.patch_name}"
        headers = {"Content-Type": "application/strategic-merge-patch+json"}
        async with session.patch(url, json=outcome.patch, headers=headers) as r:
            if r.status >= 300:
                log.info("event %s: HTTP %s", outcome.patch_name, r.status)
            await r.read()
