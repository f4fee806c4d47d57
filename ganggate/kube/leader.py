"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Follows k8s.io/client-go/tools/leaderelection/leaderelection.go (tryAcquireOrRenew): a
candidate takes the lease when it does not exist, when it already holds it, or when the
record it observed has not changed for leaseDurationSeconds (timed with the local monotonic
clock, so clock skew between replicas does not matter); writes use the lease's
resourceVersion, so of two candidates racing only one wins (409 for the other). acquireTime
and leaseTransitions change only when the holder changes. A leader that has not renewed within
its renew deadline (2/3 of the lease duration, client-go's 10 s of 15 s) stops leading at once,
before any other replica can take over. On a clean stop the lease is given up as client-go's
release() does (ReleaseOnCancel): holderIdentity empty, leaseDurationSeconds 1, renewTime and
acquireTime now, leaseTransitions kept, so that another candidate acquires it at once.

The lease's namespace must exist; in a cluster it defaults to the controller's own namespace
(`default_lease_namespace`). A missing namespace is a WARNING naming the remedy, repeated with
exponential backoff (up to a minute) while the elector keeps trying every retry period.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
OUT_OF_CLUSTER_NAMESPACE = "ganggate-system"


def default_lease_namespace(env: Mapping[str, str] | None = None, sa_file: str = SA_NAMESPACE_FILE) -> str:
    """POD_NAMESPACE, else the service account's namespace (in a cluster), else ganggate-system."""
    env = os.environ if env is None else env
    if (env.get("POD_NAMESPACE") or "").strip():
        return env["POD_NAMESPACE"].strip()
    try:
        with open(sa_file, encoding="utf-8") as handle:
            namespace = handle.read().strip()
    except OSError:
        namespace = ""
    return namespace or OUT_OF_CLUSTER_NAMESPACE


def lease_namespace(flag: str | None) -> str:
    """The --lease-namespace flag, else the controller's own namespace, else ganggate-system;
    here so that `ganggate controller` and `ganggate status` name the same lease."""
    return flag or default_lease_namespace()


def missing_namespace_remedy(namespace: str) -> str:
    """What to do when the lease namespace does not exist."""
    return (f"create it (kubectl create namespace {namespace}), point --lease-namespace at an existing "
            "namespace, or run a single replica with --no-leader-election")


def micro_time(epoch: float | None = None) -> str:
    """metav1.MicroTime in RFC3339 with microseconds."""
    moment = datetime.fromtimestamp(time.time() if epoch is None else epoch, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires and renews a Lease; `is_leader` is true only while the lease is fresh."""

    def __init__(self, coordination_api: Any, *, name: str, namespace: str, identity: str,
                 lease_duration: float = 15.0, retry_period: float = 5.0, renew_deadline: float | None = None,
                 metrics: Any = None, on_change: Callable[[bool], None] | None = None,
                 annotations: dict[str, str] | None = None) -> None:
        self.api = coordination_api
        #: Written on the lease while we hold it (the holder's settings others read, e.g. its topology levels).
        self.annotations = dict(annotations or {})
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
        self._standing_by_for: str | None = None  # the other holder this replica said it waits for
        #: Why we do not lead, when we know better than "another replica holds the lease".
        self.problem: str | None = None
        self._warn_every = retry_period  # backoff of the missing-namespace WARNING
        self._next_warn = 0.0

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and renewed it within the renew deadline."""
        return self._renewed_at is not None and time.monotonic() - self._renewed_at < self.renew_deadline

    @property
    def holder(self) -> str | None:
        return ((self._lease or {}).get("spec") or {}).get("holderIdentity") or None

    def not_leading_reason(self) -> str:
        """Why this replica does not lead (for /readyz)."""
        where = f"{self.namespace}/{self.name}"
        if self.problem:
            return f"not leading: {self.problem}"
        if self.holder and self.holder != self.identity:
            return f"not leading: lease {where} is held by {self.holder}"
        if self._renewed_at is not None:
            return f"not leading: lease {where} not renewed within the renew deadline"
        return f"not leading: acquiring lease {where}"

    def _missing_namespace(self, exc: ApiCallError) -> None:
        """The lease namespace is gone: WARNING with the remedy, backing off up to a minute."""
        self.problem = (f"lease namespace {self.namespace} does not exist; "
                        f"{missing_namespace_remedy(self.namespace)}")
        now = time.monotonic()
        if now >= self._next_warn:
            log.warning("no gang is released: cannot create lease %s/%s: %s", self.namespace, self.name,
                        self.problem)
            self._next_warn = now + self._warn_every
            self._warn_every = min(60.0, self._warn_every * 2)
        else:
            log.debug("creating lease %s/%s: %s", self.namespace, self.name, exc)

    def _notify(self, giving_up: bool = False) -> None:
        now_leader = self.is_leader
        if now_leader != self._was_leader:
            self._was_leader = now_leader
            verb = "acquired" if now_leader else "is handing over" if giving_up else "lost"
            log.info("%s %s leadership of %s/%s", self.identity, verb, self.namespace, self.name)
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
                self.problem = f"cannot read lease {self.namespace}/{self.name}: {exc}"
                log.warning("reading lease %s/%s: %s", self.namespace, self.name, exc)
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "annotations": dict(self.annotations)},
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
                if exc2.status == 404:
                    self._missing_namespace(exc2)
                else:
                    log.info("creating lease %s/%s: %s", self.namespace, self.name, exc2)
                return False
            self._found_namespace()
            self._renewed_at = time.monotonic()
            return True
        self._found_namespace()

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("acquireTime"), spec.get("leaseTransitions"))
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = time.monotonic()
        self._lease = lease
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            if holder != self._standing_by_for:  # said once per holder, so an operator sees who leads
                self._standing_by_for = holder
                log.info("lease %s/%s is held by %s: this replica stands by and takes over when the "
                         "lease is given up or expires", self.namespace, self.name, holder)
            return False  # held by someone else and not expired
        self._standing_by_for = None

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
        if self.annotations:
            meta = dict(lease.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
            body["metadata"] = meta
        try:
            self._lease = await call_json(self.api.replace_namespaced_lease, self.name, self.namespace, body,
                                          verb="update", metrics=self.metrics, timeout=self.renew_deadline)
        except ApiCallError as exc:
            log.info("updating lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._renewed_at = time.monotonic()
        return True

    def _found_namespace(self) -> None:
        if self.problem is not None:
            log.info("lease %s/%s is reachable now", self.namespace, self.name)
        self.problem = None
        self._warn_every = self.retry_period
        self._next_warn = 0.0

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
        """client-go's release(): empty holder, 1 s duration, renew and acquire time now."""
        if not self.is_leader or self._lease is None:
            self._renewed_at = None
            self._notify()
            return
        self._renewed_at = None
        self._notify(giving_up=True)
        body = dict(self._lease)
        spec = dict(body.get("spec") or {})
        now = micro_time()
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now})
        body["spec"] = spec
        try:
            self._lease = await call_json(self.api.replace_namespaced_lease, self.name, self.namespace, body,
                                          verb="update", metrics=self.metrics, timeout=2.0)
            log.info("%s gave up lease %s/%s", self.identity, self.namespace, self.name)
        except ApiCallError as exc:
            log.warning("giving up lease %s/%s: %s; the next leader waits for it to expire",
                        self.namespace, self.name, exc)
