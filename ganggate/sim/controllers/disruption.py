"""kube-controller-manager's disruption controller stand-in: an HTTP client of the API server.

Like pkg/controller/disruption/disruption.go, it watches PodDisruptionBudgets and pods, and for
each budget touched by a change recomputes the status (ganggate.sim.helpers.disruption.compute_status)
and writes it through `poddisruptionbudgets/status` when it differs. A write that conflicts (an
eviction decremented the budget meanwhile) is retried from the watch's newer state. Budgets with
recent evictions (`disruptedPods`) are looked at again after DeletionTimeout, as the real
controller's recheck queue does.

Which pods a budget counts: the real controller lists the namespace's pods from its informer
cache with the budget's selector (getPodsForPdb: podLister.Pods(ns).List(selector)). Here the
pods are indexed by (namespace, label, value) as they change, and a budget with matchLabels is
judged on the pods carrying its rarest pair only (then by the full selector), not on every pod
of the cluster: the same pods, found without a scan that grew with every pod a replay keeps.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from ganggate.sim.client.informers import ReflectorLike, SharedInformers, object_key, reflector_for, run_synced
from ganggate.sim.client.workqueue import WorkQueue, put_status
from ganggate.sim.helpers import disruption

log = logging.getLogger(__name__)


class DisruptionController:
    """Keeps every PodDisruptionBudget's status up to date."""

    def __init__(self, base_url: str, *, retry_seconds: float = 0.5, shared: SharedInformers | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared = shared  # the process's shared informers (Components), or None: watches of its own
        self._session: aiohttp.ClientSession | None = None
        self._pdbs: ReflectorLike | None = None
        self._pods: ReflectorLike | None = None
        self._queue = WorkQueue(retry_seconds)
        # (namespace, label, value) -> keys of the pods carrying it (a dict: the store's order)
        self._by_label: dict[tuple[str, str, str], dict[str, None]] = {}
        self.ready = asyncio.Event()
        """Set once the pods and the budgets have been listed."""

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    def enqueue(self, key: str) -> None:
        self._queue.add(key)

    def on_pdb(self, kind: str, pdb: dict, old: dict | None) -> None:
        if kind != "DELETED":
            self.enqueue(object_key(pdb))

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        """Requeue the budgets covering the pod now or before (getPdbForPod)."""
        self._index(object_key(pod), old, None if kind == "DELETED" else pod)
        if self._pdbs is None:
            return
        for key, pdb in self._pdbs.store.items():
            if disruption.covers(pdb, pod) or (old is not None and disruption.covers(pdb, old)):
                self.enqueue(key)

    def _index(self, key: str, old: dict | None, new: dict | None) -> None:
        """Move the pod's (namespace, label, value) entries from its old labels to its new ones."""
        before, after = _label_pairs(old), _label_pairs(new)
        for pair in before - after:
            keys = self._by_label.get(pair)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._by_label[pair]
        for pair in after - before:
            self._by_label.setdefault(pair, {})[key] = None

    def _candidates(self, pdb: dict) -> list[dict]:
        """The pods the budget may select: those with its rarest matchLabels pair, or all."""
        store = self._pods.store if self._pods else {}
        match = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not match:
            return list(store.values())
        namespace = (pdb.get("metadata") or {}).get("namespace") or ""
        keys = min((self._by_label.get((namespace, k, str(v)), {}) for k, v in match.items()), key=len)
        return [store[k] for k in keys if k in store]

    async def sync(self, key: str) -> None:
        pdb = self._pdbs.store.get(key) if self._pdbs else None
        if pdb is None:
            return
        status = disruption.compute_status(pdb, self._candidates(pdb))
        if status.get("disruptedPods"):
            self._queue.add_after(disruption.DELETION_TIMEOUT.total_seconds() + 1, key)
        if status == (pdb.get("status") or {}):
            return
        meta = pdb["metadata"]
        url = f"{self.base_url}/apis/policy/v1/namespaces/{meta['namespace']}/poddisruptionbudgets/{meta['name']}/status"
        await put_status(self._http, url, pdb, status, key)

    async def _work(self) -> None:
        await self._queue.run(self.sync, log, "pdb")

    async def run(self) -> None:
        """Watch budgets and pods and sync budgets until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            self._pods = reflector_for(session, self.base_url, "/api/v1/pods", self.on_pod, self.shared)
            self._pdbs = reflector_for(session, self.base_url, "/apis/policy/v1/poddisruptionbudgets", self.on_pdb, self.shared)
            await run_synced(self._pods, self._pdbs, self._work, self.ready)


def _label_pairs(pod: dict | None) -> set[tuple[str, str, str]]:
    if pod is None:
        return set()
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return {(namespace, k, str(v)) for k, v in (meta.get("labels") or {}).items()}
