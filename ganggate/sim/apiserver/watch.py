"""Watch fan-out: one history ring of change events, one buffered queue per watcher.

Modelled on the watch cache of k8s.io/apiserver/pkg/storage/cacher: a bounded window of recent
events (watch_cache.go, `too old resource version` 410 below it), per-watcher filtering where an
object that stops matching a selector becomes a DELETED event carrying its previous state at the
event's resourceVersion (cacher.go cacheWatcher.convertToWatchEvent), and a watcher whose buffer
overflows is closed rather than slowing the store (cacher.go dispatchEvent / "Forcing ... watcher
close due to unresponsiveness"); the client then re-watches from the last resourceVersion it saw.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import expired

Predicate = Callable[[Mapping[str, Any]], bool]


def clone(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes, the one serializer of the server."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Stored:
    """A stored object and its serialized bytes, computed at most once (objects are never mutated)."""

    __slots__ = ("obj", "_raw")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self._raw: bytes | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = dumps(self.obj)
        return self._raw

    @property
    def item(self) -> bytes:
        """The object as a list item: without apiVersion and kind, as the real server lists them
        (kubernetes/kubernetes#3030); gets and watch events carry them."""
        raw = self.raw
        prefix = b'{"apiVersion":' + dumps(self.obj.get("apiVersion")) + b',"kind":' + dumps(self.obj.get("kind")) + b","
        if raw.startswith(prefix):
            return b"{" + raw[len(prefix):]
        return dumps({k: v for k, v in self.obj.items() if k not in ("apiVersion", "kind")})


class Event:
    """One change: ADDED, MODIFIED or DELETED of a resource's object at resourceVersion rv."""

    __slots__ = ("rv", "type", "key", "namespace", "current", "previous", "_line")

    def __init__(self, rv: int, type_: str, key: str, namespace: str, current: Stored, previous: Stored | None) -> None:
        self.rv = rv
        self.type = type_
        self.key = key
        self.namespace = namespace
        self.current = current
        self.previous = previous
        self._line: bytes | None = None

    @property
    def line(self) -> bytes:
        """The newline-delimited JSON watch event, shared by every watcher that gets it unchanged."""
        if self._line is None:
            self._line = event_line(self.type, self.current.raw)
        return self._line


def event_line(type_: str, raw_object: bytes) -> bytes:
    return b'{"type":"' + type_.encode() + b'","object":' + raw_object + b"}\n"


def _with_rv(obj: Mapping[str, Any], rv: int) -> dict[str, Any]:
    copy = dict(obj)
    copy["metadata"] = dict(obj.get("metadata") or {}, resourceVersion=str(rv))
    return copy


class Watcher:
    """One open watch: its filter and a bounded buffer of pending event lines."""

    def __init__(self, key: str, namespace: str | None, predicate: Predicate | None, max_buffer: int) -> None:
        self.key = key
        self.namespace = namespace
        self.predicate = predicate
        self.max_buffer = max_buffer
        self.lines: deque[bytes] = deque()
        self.closed = False
        self.error: bytes | None = None
        self._wakeup = asyncio.Event()

    def _matches(self, stored: Stored | None) -> bool:
        if stored is None:
            return False
        return self.predicate is None or self.predicate(stored.obj)

    def offer(self, event: Event) -> None:
        """Queue the event as this watcher should see it, or nothing when it is filtered out."""
        if self.closed or event.key != self.key:
            return
        if self.namespace is not None and event.namespace != self.namespace:
            return
        if self.predicate is None:
            self._push(event.line)
            return
        now = self._matches(event.current)
        if event.type == "DELETED":
            if now:
                self._push(event.line)
            return
        before = event.type == "MODIFIED" and self._matches(event.previous)
        if now and before:
            self._push(event.line)
        elif now:
            self._push(event_line("ADDED", event.current.raw))
        elif before and event.previous is not None:
            self._push(event_line("DELETED", dumps(_with_rv(event.previous.obj, event.rv))))

    def push_raw(self, line: bytes) -> None:
        self._push(line)

    def _push(self, line: bytes) -> None:
        if len(self.lines) >= self.max_buffer:
            # A watcher too slow to keep up is closed, as the cacher does, so the store never waits.
            self.close()
            return
        self.lines.append(line)
        self._wakeup.set()

    def close(self, error_line: bytes | None = None) -> None:
        if error_line is not None:
            self.error = error_line
        self.closed = True
        self._wakeup.set()

    async def wait(self, timeout: float) -> None:
        """Wait until something is queued or the watcher is closed, at most `timeout` seconds."""
        if self.lines or self.closed:
            return
        self._wakeup.clear()
        # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation (a server shutting
        # down) that comes as an event is queued (CPython gh-86296).
        try:
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def drain(self) -> list[bytes]:
        lines = list(self.lines)
        self.lines.clear()
        return lines


class WatchHub:
    """The history ring and the set of open watchers."""

    def __init__(self, history: int = 10000, max_buffer: int = 200_000) -> None:
        if history < 1:
            raise ValueError("watch history must hold at least one event")
        self.history: deque[Event] = deque(maxlen=history)
        self.max_buffer = max_buffer
        self.watchers: set[Watcher] = set()
        self.floor = 0
        """Every event with rv > floor is still in the history."""

    def publish(self, event: Event) -> None:
        if len(self.history) == self.history.maxlen:
            self.floor = self.history[0].rv
        self.history.append(event)
        for watcher in list(self.watchers):
            watcher.offer(event)
            if watcher.closed:
                self.watchers.discard(watcher)

    def compact(self, rv: int) -> None:
        """Forget history up to rv: older resourceVersions now answer 410 Expired."""
        self.floor = max(self.floor, rv)
        while self.history and self.history[0].rv <= rv:
            self.history.popleft()

    def check_rv(self, rv: int) -> None:
        """Raise 410 Expired when events after rv are no longer all known."""
        if rv < self.floor:
            raise expired(rv, self.floor + 1)

    def subscribe(
        self,
        key: str,
        namespace: str | None,
        predicate: Predicate | None,
        since_rv: int | None,
        initial: Iterable[Stored] = (),
    ) -> Watcher:
        """Open a watcher: replay initial objects as ADDED, or history after since_rv, then live events."""
        watcher = Watcher(key, namespace, predicate, self.max_buffer)
        if since_rv is None:
            for stored in initial:
                if predicate is None or predicate(stored.obj):
                    watcher.lines.append(event_line("ADDED", stored.raw))
        else:
            self.check_rv(since_rv)
            for event in self.history:
                if event.rv > since_rv:
                    watcher.offer(event)
        self.watchers.add(watcher)
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def close_all(self) -> int:
        """End every open watch (the client sees its stream end and re-watches)."""
        count = len(self.watchers)
        for watcher in list(self.watchers):
            watcher.close()
        self.watchers.clear()
        return count
