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

How many of them are healthy: the real controller counts them again on each sync
(trySync -> countHealthyPods over getPodsForPdb's list, each pod's DeletionTimestamp and
podutil.IsPodReady). Here each budget keeps the pods it covers by name with their health
(being deleted, Ready), and how many are Ready and not being deleted, updated from the pod and
budget events that already decide which budgets to requeue; a sync then reads the count and the
few recently evicted pods (`disruption.compute_status_counted`) instead of every pod of a gang at
each of its changes. The status is the same, written at the same moments. A budget whose status
needs its pods' controllers (maxUnavailable, a percentage) is still computed from the pods.
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
        # budget key -> the pods it covers (name -> health) and how many are healthy
        self._covered: dict[str, _Covered] = {}
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
        key = object_key(pdb)
        if kind == "DELETED":
            self._covered.pop(key, None)
            return
        if key not in self._covered or old is None or _scope(old) != _scope(pdb):
            self._covered[key] = _Covered.of(pdb, self._candidates(pdb))
        self.enqueue(key)

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        """Requeue the budgets covering the pod now or before (getPdbForPod)."""
        self._index(object_key(pod), old, None if kind == "DELETED" else pod)
        if self._pdbs is None:
            return
        health: disruption.Health | None = None
        for key, pdb in self._pdbs.store.items():
            covers = disruption.covers(pdb, pod)
            if covers or (old is not None and disruption.covers(pdb, old)):
                self.enqueue(key)
                covered = self._covered.get(key)
                if covered is None:
                    continue
                if old is not None:  # the pod as the budget last counted it, if it did
                    covered.remove(old["metadata"]["name"])
                if covers and kind != "DELETED":
                    health = health or disruption.pod_health(pod)
                    covered.add(pod["metadata"]["name"], health)

    def _index(self, key: str, old: dict | None, new: dict | None) -> None:
        """Move the pod's (namespace, label, value) entries from its old labels to its new ones."""
        if old is not None and new is not None and old["metadata"].get("labels") == new["metadata"].get("labels"):
            return  # most changes (status, nomination, gates, binding) leave the labels as they were
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
        covered = self._covered.get(key)
        if covered is not None and disruption.counts_itself(pdb):
            status = disruption.compute_status_counted(pdb, covered.pods, covered.healthy)
        else:
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


def _scope(pdb: dict) -> tuple[object, object]:
    """What decides which pods a budget covers (disruption.covers): its namespace and selector."""
    return (pdb.get("metadata") or {}).get("namespace"), (pdb.get("spec") or {}).get("selector")


class _Covered:
    """The pods one budget covers, by name, with their health, and how many are healthy (Ready, not being deleted)."""

    __slots__ = ("healthy", "pods")

    def __init__(self) -> None:
        self.pods: dict[str, disruption.Health] = {}
        self.healthy = 0

    @classmethod
    def of(cls, pdb: dict, candidates: list[dict]) -> _Covered:
        covered = cls()
        for pod in candidates:
            if disruption.covers(pdb, pod):
                covered.add(pod["metadata"]["name"], disruption.pod_health(pod))
        return covered

    def add(self, name: str, health: disruption.Health) -> None:
        self.remove(name)
        self.pods[name] = health
        self.healthy += not health[0] and health[1]

    def remove(self, name: str) -> None:
        health = self.pods.pop(name, None)
        if health is not None:
            self.healthy -= not health[0] and health[1]
