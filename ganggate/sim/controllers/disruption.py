"""kube-controller-manager's disruption controller stand-in: an HTTP client of the API server.

Like pkg/controller/disruption/disruption.go, it watches PodDisruptionBudgets and pods, and for
each budget touched by a change recomputes the status (ganggate.sim.helpers.disruption.compute_status)
and writes it through `poddisruptionbudgets/status` when it differs. A write that conflicts (an
eviction decremented the budget meanwhile) is retried from the watch's newer state. Budgets with
recent evictions (`disruptedPods`) are looked at again after DeletionTimeout, as the real
controller's recheck queue does.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from ganggate.sim.helpers import disruption
from ganggate.sim.client.informers import Reflector, SharedInformers, object_key, reflector_for, run_synced
from ganggate.sim.client.workqueue import WorkQueue, put_status

log = logging.getLogger(__name__)


class DisruptionController:
    """Keeps every PodDisruptionBudget's status up to date."""

    def __init__(self, base_url: str, *, retry_seconds: float = 0.5, shared: SharedInformers | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared = shared  # the process's shared informers (Components), or None: watches of its own
        self._session: aiohttp.ClientSession | None = None
        self._pdbs: Reflector | None = None
        self._pods: Reflector | None = None
        self._queue = WorkQueue(retry_seconds)
        self.ready = asyncio.Event()
        """Set once the pods and the budgets have been listed."""

    def enqueue(self, key: str) -> None:
        self._queue.add(key)

    def on_pdb(self, kind: str, pdb: dict, old: dict | None) -> None:
        if kind != "DELETED":
            self.enqueue(object_key(pdb))

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        """Requeue the budgets covering the pod now or before (getPdbForPod)."""
        if self._pdbs is None:
            return
        for key, pdb in self._pdbs.store.items():
            if disruption.covers(pdb, pod) or (old is not None and disruption.covers(pdb, old)):
                self.enqueue(key)

    async def sync(self, key: str) -> None:
        pdb = self._pdbs.store.get(key) if self._pdbs else None
        if pdb is None:
            return
        status = disruption.compute_status(pdb, self._pods.store.values())
        if status.get("disruptedPods"):
            self._queue.add_after(disruption.DELETION_TIMEOUT.total_seconds() + 1, key)
        if status == (pdb.get("status") or {}):
            return
        meta = pdb["metadata"]
        url = f"{self.base_url}/apis/policy/v1/namespaces/{meta['namespace']}/poddisruptionbudgets/{meta['name']}/status"
        await put_status(self._session, url, pdb, status, key)  # type: ignore[arg-type]

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
