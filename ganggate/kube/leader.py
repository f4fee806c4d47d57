"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Follows k8s.io/client-go/tools/leaderelection/leaderelection.go (tryAcquireOrRenew): a
candidate takes the lease when it does not exist, when it already holds it, or when the
record it observed has not changed for leaseDurationSeconds (timed with the local monotonic
clock, so clock skew between replicas does not matter); writes use the lease's
resourceVersion, so of two candidates racing only one wins (409 for the other). acquireTime
and leaseTransitions change only when the holder changes. A leader that has not renewed within
its renew deadline (2/3 of the lease duration, client-go's 10 s of 15 s) stops leading at once,
before any other replica can take over. On a clean stop the lease is given up (ReleaseOnCancel).

The lease's namespace must exist (the deploy manifests create ganggate-system).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime, timezone
from typing import Any, Callable

from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)


def micro_time(epoch: float | None = None) -> str:
    """metav1.MicroTime in RFC3339 with microseconds."""
    moment = datetime.fromtimestamp(time.time() if epoch is None else epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires and renews a Lease; `is_leader` is true only while the lease is fresh."""

    def __init__(self, coordination_api: Any, *, name: str, namespace: str, identity: str,
                 lease_duration: float = 15.0, retry_period: float = 5.0, renew_deadline: float | None = None,
                 metrics: Any = None, on_change: Callable[[bool], None] | None = None) -> None:
        self.api = coordination_api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.retry_period = min(retry_period, lease_duration / 3)
        self.renew_deadline = renew_deadline if renew_deadline is not None else lease_duration * 2 / 3
        self.metrics = metrics
        self.on_change = on_change
        self._renewed_at: float | None = None  # monotonic time of our last successful write
        self._observed_record: tuple | None = None
        self._observed_at = 0.0  # monotonic time the observed record last changed
        self._lease: dict | None = None
        self._was_leader = False

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and renewed it within the renew deadline."""
        return self._renewed_at is not None and time.monotonic() - self._renewed_at < self.renew_deadline

    @property
    def holder(self) -> str | None:
        return ((self._lease or {}).get("spec") or {}).get("holderIdentity") or None

    def _notify(self) -> None:
        now_leader = self.is_leader
        if now_leader != self._was_leader:
            self._was_leader = now_leader
            log.info("%s %s leadership of %s/%s", self.identity, "acquired" if now_leader else "lost",
                     self.namespace, self.name)
            if self.metrics is not None:
                self.metrics.leader.set(1 if now_leader else 0)
            if self.on_change is not None:
                self.on_change(now_leader)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards."""
        now_wall = time.time()
        try:
            lease = await call_json(self.api.read_namespaced_lease, self.name, self.namespace,
                                    verb="get", metrics=self.metrics, timeout=self.renew_deadline)
        except ApiCallError as exc:
            if exc.status != 404:
                log.warning("reading lease %s/%s: %s", self.namespace, self.name, exc)
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": int(self.lease_duration),
                    "acquireTime": micro_time(now_wall),
                    "renewTime": micro_time(now_wall),
                    "leaseTransitions": 0,
                },
            }
            try:
                self._lease = await call_json(self.api.create_namespaced_lease, self.namespace, body,
                                              verb="create", metrics=self.metrics, timeout=self.renew_deadline)
            except ApiCallError as exc2:
                log.info("creating lease %s/%s: %s", self.namespace, self.name, exc2)
                return False
            self._renewed_at = time.monotonic()
            return True

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("acquireTime"), spec.get("leaseTransitions"))
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = time.monotonic()
        self._lease = lease
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by someone else and not expired

        new_spec = dict(spec)
        new_spec["holderIdentity"] = self.identity
        new_spec["leaseDurationSeconds"] = int(self.lease_duration)
        new_spec["renewTime"] = micro_time(now_wall)
        if holder != self.identity:
            new_spec["acquireTime"] = micro_time(now_wall)
            # client-go counts every acquisition by a new holder, also of a released (empty) lease.
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = dict(lease)
        body["spec"] = new_spec  # metadata keeps resourceVersion: optimistic concurrency
        try:
            self._lease = await call_json(self.api.replace_namespaced_lease, self.name, self.namespace, body,
                                          verb="update", metrics=self.metrics, timeout=self.renew_deadline)
        except ApiCallError as exc:
            log.info("updating lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._renewed_at = time.monotonic()
        return True

    async def run(self) -> None:
        """Acquire, then renew every retry period, until cancelled; gives the lease up on cancel."""
        try:
            while True:
                await self.try_acquire_or_renew()
                self._notify()
                jitter = 0 if self.is_leader else random.uniform(0, self.retry_period * 0.2)
                # Wake up in time to notice a missed renew deadline at once.
                await asyncio.sleep(self.retry_period + jitter)
                self._notify()
        finally:
            await self._give_up()

    async def _give_up(self) -> None:
        if not self.is_leader or self._lease is None:
            self._renewed_at = None
            self._notify()
            return
        self._renewed_at = None
        self._notify()
        body = dict(self._lease)
        spec = dict(body.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()})
        body["spec"] = spec
        try:
            await call_json(self.api.replace_namespaced_lease, self.name, self.namespace, body,
                            verb="update", metrics=self.metrics, timeout=2.0)
        except ApiCallError as exc:
            log.info("giving up lease %s/%s: %s", self.namespace, self.name, exc)
