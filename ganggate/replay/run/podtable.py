"""The replay's running table of kubesim's pods, kept from the API server's change log.

The engine looks at the pods every 2 ms while it waits for an instant to settle, and a replay
keeps every pod it ever made (a finished job's pods stay Succeeded, as bare pods do until
deleted). Reading the whole store each time made a 500-job replay spend a fifth of its CPU
there. `PodTable` instead applies only the pod events the store's watch history holds since
its last look (kubesim's store emits one per write, in resourceVersion order), and reads the
whole store again only when that history no longer reaches back (it is a bounded ring).

What it answers is what a full read would: the replay's pods in key order (namespace, name)
as `PodView`s, the highest resourceVersion among the pods that exist, their count, and how
many are bound but not started yet (the kubelet's turn).
"""

from __future__ import annotations

import bisect
from typing import Any

from ganggate.replay.run.observe import PodView, view

Key = tuple[str, str]


class PodTable:
    """The pods of one kubesim store, brought up to date by `sync`."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.revision = -1  # the store revision the table reflects; -1: never read
        self.views: dict[Key, tuple[int, PodView | None]] = {}  # key -> (resourceVersion, view)
        self.keys: list[Key] = []  # sorted
        self.max_rv = 0
        #: The highest resourceVersion of a bound pod: all the kubelet, which watches bound pods
        #: only (spec.nodeName!=), has to have seen.
        self.max_bound_rv = 0
        self._bound: dict[Key, int] = {}  # bound pod -> its resourceVersion
        self.starting = 0  # bound, still Pending
        self._listed: list[PodView] | None = None

    @staticmethod
    def _starts(pod_view: PodView | None) -> int:
        return 1 if pod_view is not None and pod_view.node and pod_view.phase == "Pending" else 0

    def sync(self) -> bool:
        """Bring the table up to the store's revision; True when a pod changed."""
        revision = self.store.resource_version
        if revision == self.revision:
            return False
        hub = self.store.hub
        if self.revision < 0 or hub.floor > self.revision:
            self._reread()
            changed = True
        else:
            changed = self._apply(hub.history)
        self.revision = revision
        if changed:  # (writes of other kinds leave the pods' list as it was)
            self._listed = None
        return changed

    def _reread(self) -> None:
        self.views, self.keys, self.max_rv, self.starting = {}, [], 0, 0
        self._bound, self.max_bound_rv = {}, 0
        for key, stored in self.store.iter("pods"):  # in key order
            self.keys.append(key)
            self._put(key, stored.obj)

    def _apply(self, history: Any) -> bool:
        """The pod events after self.revision, oldest first (the history is in rv order);
        whether there were any."""
        fresh = []
        for event in reversed(history):
            if event.rv <= self.revision:
                break
            if event.key == "pods":
                fresh.append(event)
        recount = False
        for event in reversed(fresh):
            meta = event.current.obj.get("metadata") or {}
            key = (event.namespace or "", meta.get("name") or "")
            if event.type == "DELETED":
                old = self.views.pop(key, None)
                if old is not None:
                    self.starting -= self._starts(old[1])
                    self.keys.pop(bisect.bisect_left(self.keys, key))
                    recount = recount or old[0] >= self.max_rv
                self._unbind(key)
            else:
                if key not in self.views:
                    bisect.insort(self.keys, key)
                self._put(key, event.current.obj)
        if recount:  # the newest pod went: the highest resourceVersion of those left
            self.max_rv = max((rv for rv, _ in self.views.values()), default=0)
        return bool(fresh)

    def _put(self, key: Key, obj: dict) -> None:
        old = self.views.get(key)
        if old is not None:
            self.starting -= self._starts(old[1])
        rv = int(obj["metadata"]["resourceVersion"])
        pod_view = view(obj)
        self.views[key] = (rv, pod_view)
        self.starting += self._starts(pod_view)
        if rv > self.max_rv:
            self.max_rv = rv
        if (obj.get("spec") or {}).get("nodeName"):
            self._bound[key] = rv
            self.max_bound_rv = max(self.max_bound_rv, rv)
        else:  # (a pod is never unbound; a table is told anything)
            self._unbind(key)

    def _unbind(self, key: Key) -> None:
        """Stop counting a pod as bound (gone, or not bound); the highest bound resourceVersion anew
        if it was that pod's."""
        if self._bound.pop(key, -1) >= self.max_bound_rv:
            self.max_bound_rv = max(self._bound.values(), default=0)

    def listed(self) -> list[PodView]:
        """The replay's pods (those carrying its job label) in key order."""
        if self._listed is None:
            views = self.views
            self._listed = [v for v in (views[k][1] for k in self.keys) if v is not None]
        return self._listed

    @property
    def count(self) -> int:
        return len(self.keys)
