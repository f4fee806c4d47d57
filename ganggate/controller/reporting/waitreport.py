"""The round's report of the gangs that wait: an Event to the pods that have not heard why yet,
at the cost of what changed, not of every waiting gang.

`WaitNotifier` (controller.reporting.events) chooses which pods hear a (reason, message); a round used to
ask it of every waiting gang, building and sorting each gang's pod list: about 70 ms at 100,000
pods. The incremental rounds (core.incremental) hand back the very same `Waiting` object for a
gang nothing changed for (a gang whose pods change is planned again and gets a new one), so a
Waiting told last round and given again is skipped at the price of one lookup; what is new is
told as before. The notifier's repeat of an unchanged message every `repeat_seconds` comes from
a heap of the instants it falls due.

A gang still incomplete (GangWaiting, kind "incomplete") is told only once its pods have not
changed for `settle_seconds`: while a Job's pods are being created its gang is not waiting for
anything but them, and one Event per arriving pod (a 1,000-pod gang of bare pods: 1,000 API
writes on the way to its release) would say only that the creates are still coming. A gang that
completes meanwhile is never told it was incomplete; one whose pods stop arriving short of its
size is told as before, `settle_seconds` later.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import compress
from operator import not_
from typing import Any

from ganggate.controller.reporting.events import WaitNotifier
from ganggate.core.policy.holdgain import UNBOUNDED_GAIN_SECONDS

log = logging.getLogger(__name__)

GangKey = tuple[str, str]


class WaitReport:
    """Tells the pods of waiting gangs why they wait (see the module docstring)."""

    def __init__(self, notifier: WaitNotifier | None = None, on_hold: Callable[[Any], None] | None = None,
                 settle_seconds: float = 0.0) -> None:
        self.notifier = notifier or WaitNotifier()
        #: Called with a Waiting whose gang the starvation guard weighed a hold for (`hold_gain`
        #: set), once per change of its kind: a hold taken, refused, taken again (the metrics).
        self.on_hold = on_hold
        self.settle_seconds = settle_seconds
        #: incomplete gangs not told yet: gang -> (its Gang.changes, since when unchanged, the Waiting)
        self._arriving: dict[GangKey, tuple[int, float, Any]] = {}
        self._settles: list[tuple[float, GangKey]] = []  # (when an arriving gang falls due, gang)
        #: controller.reporting.ownerevents.OwnerEvents: a gang whose pods have an owning controller tells
        #: its owner (once per change) and its oldest pod, not a copy on every pod.
        self.owners: Any = None
        self._told: dict[GangKey, Any] = {}  # gang -> the Waiting last handed to the notifier
        self._told_ids: dict[int, Any] = {}  # id() -> the same Waitings (held, so ids stay theirs)
        self._repeats: list[tuple[float, GangKey]] = []  # (when a repeat falls due, gang)
        self._last: Sequence[Any] | None = None  # the list told last (held: its id stays its own)
        self._last_len = 0

    def report(self, waitings: Sequence[Any], now: float, gangs: Mapping[GangKey, Any],
               emit: Callable[[Any, str, str], None]) -> None:
        """Tell what is new in this round's `waitings` (emit(pod, reason, message) per pod);
        forget the gangs that no longer wait."""
        for _ in self._steps(waitings, now, gangs, emit):
            pass

    async def report_in_slices(self, waitings: Sequence[Any], now: float, gangs: Mapping[GangKey, Any],
                               emit: Callable[[Any, str, str], None], slice_seconds: float = 0.002) -> None:
        """`report`, letting the event loop run every `slice_seconds`: the first round after a
        start or a relist tells every pod of every waiting gang (100,000 Events queued at 100,000
        pods: a second of work). The caller holds the state's changes meanwhile."""
        deadline = time.perf_counter() + slice_seconds
        for _ in self._steps(waitings, now, gangs, emit):
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + slice_seconds

    def _steps(self, waitings: Sequence[Any], now: float, gangs: Mapping[GangKey, Any],
               emit: Callable[[Any, str, str], None]) -> Iterator[None]:
        """The report, one gang told per step."""
        told, told_ids = self._told, self._told_ids
        if waitings is self._last and len(waitings) == self._last_len:
            self._repeat(now, gangs, emit)  # the very list told last round (core.incremental: no change)
            return
        self._last, self._last_len = waitings, len(waitings)
        ids = list(map(id, waitings))
        # What was not told as is (in the round's order) and what was told and is not given
        # again: set and iterator operations, no Python step per waiting gang.
        fresh = list(compress(waitings, map(not_, map(told_ids.__contains__, ids))))
        stale = [told_ids.pop(i) for i in told_ids.keys() - set(ids)]
        for waiting in fresh:
            self._tell(waiting, now, gangs, emit)
            yield
        for waiting in stale:  # not given this round: replaced by a fresh one, or no longer waiting
            key = waiting.gang_key
            if told.get(key) is waiting:
                del told[key]
                self.notifier.forget(key)
        self._repeat(now, gangs, emit)

    def _repeat(self, now: float, gangs: Mapping[GangKey, Any], emit: Callable[[Any, str, str], None]) -> None:
        """Repeat the unchanged messages that fall due (WaitNotifier.repeat_seconds), and tell the
        incomplete gangs whose pods stopped arriving (`settle_seconds`)."""
        settles = self._settles
        while settles and settles[0][0] <= now:
            _, key = heapq.heappop(settles)
            arriving = self._arriving.get(key)
            gang = gangs.get(key)
            if arriving is None or gang is None or gang.changes != arriving[0]:
                self._arriving.pop(key, None)  # told, gone, or changed since (a fresh Waiting comes with the change)
                continue
            if key not in self._told:
                self._tell(arriving[2], now, gangs, emit)
        told, repeats = self._told, self._repeats
        while repeats and repeats[0][0] <= now:
            _, key = heapq.heappop(repeats)
            waiting = told.get(key)
            if waiting is not None and self.notifier.due(key, now):
                self._tell(waiting, now, gangs, emit)

    def _tell(self, waiting: Any, now: float, gangs: Mapping[GangKey, Any],
              emit: Callable[[Any, str, str], None]) -> bool:
        """Hand one Waiting to the notifier; False when its gang is gone."""
        key = waiting.gang_key
        old = self._told.pop(key, None)
        if old is not None and old is not waiting:
            self._told_ids.pop(id(old), None)
        gang = gangs.get(key)
        if gang is None:
            self.notifier.forget(key)
            self._arriving.pop(key, None)
            return False
        if self._settling(waiting, gang, now):
            return True  # not told (nor remembered as told) until its pods stop arriving
        self._told[key] = waiting
        self._told_ids[id(waiting)] = waiting
        kind = getattr(waiting, "kind", "")
        if self.notifier.quiet(key, waiting.event_reason, waiting.message, gang.changes, now, kind):
            return True  # told already, and nothing new to tell: no pod list built
        pods = [p for p in gang.pods.values() if not p.terminated]
        if self.owners is not None and pods:
            self.owners.tell(key, pods, waiting.event_reason, waiting.message, kind)
            if _owned(pods):
                pods = [min(pods, key=lambda p: (p.created, p.name))]
        notice = self.notifier.tell(key, waiting.event_reason, waiting.message, pods, now, kind, gang.changes)
        if notice.changed:  # once per change in kind; a count that moved is a DEBUG line
            level = logging.INFO if waiting.event_reason == "GangWaiting" else logging.WARNING
            log.log(level, "%s %s/%s: %s", waiting.event_reason, *key, waiting.message)
            gain = getattr(waiting, "hold_gain", None)
            if gain is not None:
                log.info("starvation guard %s/%s: hold %s, predicted gain %s", *key,
                         "refused" if waiting.hold_refused else "taken",
                         "unbounded (no room frees at once for it without)" if gain >= UNBOUNDED_GAIN_SECONDS
                         else f"{gain:.0f} s")
                if self.on_hold is not None:
                    self.on_hold(waiting)
        elif notice.pods:
            log.debug("%s %s/%s (again): %s", waiting.event_reason, *key, waiting.message)
        if notice.pods:
            heapq.heappush(self._repeats, (now + self.notifier.repeat_seconds, key))
        for pod in notice.pods:
            emit(pod, waiting.event_reason, waiting.message)
        return True

    def _settling(self, waiting: Any, gang: Any, now: float) -> bool:
        """True while an incomplete gang's pods still arrive (see the module docstring)."""
        key = waiting.gang_key
        if self.settle_seconds <= 0 or getattr(waiting, "kind", "") != "incomplete":
            self._arriving.pop(key, None)
            return False
        arriving = self._arriving.get(key)
        if arriving is None or arriving[0] != gang.changes:
            arriving = (gang.changes, now, waiting)
            heapq.heappush(self._settles, (now + self.settle_seconds, key))
        elif now - arriving[1] >= self.settle_seconds:
            del self._arriving[key]
            return False
        self._arriving[key] = (arriving[0], arriving[1], waiting)
        return True


def _owned(pods: Sequence[Any]) -> bool:
    """Every pod has an owning controller (a Job...), where the gang's Events also go."""
    return all(p.controller_ref for p in pods)
