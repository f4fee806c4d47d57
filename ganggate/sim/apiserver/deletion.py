"""Graceful deletion of pods: deletionTimestamp, deletionGracePeriodSeconds, then the kubelet's final delete.

Written from pkg/registry/core/pod/strategy.go (podStrategy.CheckGracefulDelete: the grace is
DeleteOptions.gracePeriodSeconds, else spec.terminationGracePeriodSeconds; 0 for a pod not yet
bound or already terminal; a negative one becomes 1),
staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go (BeforeDelete: deletionTimestamp =
now + grace, now being metav1.Now(), the API server's own clock, the one that stamps
creationTimestamp: here the store's clock, simulated in a replay; a second delete may only shorten
the grace, moving the timestamp back by the difference; a longer or absent one leaves the pending
deletion alone) and
staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go (Delete and
updateForGracefulDeletionAndFinalizers: the timestamp is written first, so watchers see
MODIFIED, and the object is removed at once only when the grace is 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver.store import Store
from ganggate.sim.apiserver.watch import clone

TERMINAL_PHASES = ("Succeeded", "Failed")


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def requested_grace(options: Mapping[str, Any], query: Mapping[str, str]) -> int | None:
    """DeleteOptions.gracePeriodSeconds from the body or the query, or None."""
    value = options.get("gracePeriodSeconds")
    if value is None and query.get("gracePeriodSeconds") not in (None, ""):
        value = query["gracePeriodSeconds"]
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise errors.bad_request(f"invalid gracePeriodSeconds: {value}") from exc


def check_graceful_delete(pod: Mapping[str, Any], requested: int | None) -> int:
    """podStrategy.CheckGracefulDelete: the grace period this delete gets."""
    spec = pod.get("spec") or {}
    period = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName"):
        period = 0  # not scheduled: delete immediately
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        period = 0  # already terminated: delete immediately
    return 1 if period < 0 else period


def _check_preconditions(pod: Mapping[str, Any], preconditions: Mapping[str, Any], name: str) -> None:
    meta = pod.get("metadata") or {}
    uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid and uid != meta.get("uid"):
        raise errors.conflict("pods", name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}")
    if rv and rv != meta.get("resourceVersion"):
        raise errors.conflict("pods", name, f"Precondition failed: ResourceVersion in precondition: {rv}, "
                                            f"ResourceVersion in object meta: {meta.get('resourceVersion')}")


def delete_pod(store: Store, namespace: str, name: str, options: Mapping[str, Any],
               query: Mapping[str, str] | None = None, dry_run: bool = False) -> tuple[dict[str, Any], bool]:
    """Delete a pod as the generic registry does: (the object returned, whether it is gone now)."""
    stored = store.lookup("pods", namespace, name)
    if stored is None:
        raise errors.not_found("pods", name)
    current = stored.obj
    _check_preconditions(current, options.get("preconditions") or {}, name)
    requested = requested_grace(options, query or {})
    meta = current["metadata"]
    now = _parse(store.timestamp())  # the API server's clock, as for creationTimestamp (BeforeDelete: metav1.Now())
    if meta.get("deletionTimestamp"):
        pending = meta.get("deletionGracePeriodSeconds")
        if pending:
            if requested is None or max(requested, 0) >= pending:
                return clone(current), False  # graceful deletion is pending: nothing to do
            shorter = max(requested, 0)
            moved = _parse(meta["deletionTimestamp"]) - timedelta(seconds=pending) + timedelta(seconds=shorter)
            return _write_deletion(store, current, moved, shorter, dry_run)
        # A grace of 0 was written but the removal did not happen: remove now (BeforeDelete's recovery).
        if dry_run:
            return clone(current), False
        return store.delete("pods", namespace, name, expect_uid=meta.get("uid")), True
    grace = check_graceful_delete(current, requested)
    return _write_deletion(store, current, now + timedelta(seconds=grace), grace, dry_run,
                           bump_generation=meta.get("generation", 0) > 0)


def _write_deletion(store: Store, current: Mapping[str, Any], when: datetime, grace: int, dry_run: bool,
                    bump_generation: bool = False) -> tuple[dict[str, Any], bool]:
    """Write deletionTimestamp and deletionGracePeriodSeconds (and, on a first delete of an object
    with a generation, bump it: BeforeDelete); with a grace of 0 the object then goes at once:
    the timestamp was written (MODIFIED), then the object is removed (DELETED)."""
    meta = current["metadata"]
    new = clone(current)
    new["metadata"]["deletionTimestamp"] = _rfc3339(when)
    new["metadata"]["deletionGracePeriodSeconds"] = grace
    if bump_generation:
        new["metadata"]["generation"] = meta["generation"] + 1
    if dry_run:
        return new, False
    written = store.update("pods", new, expect_rv=meta["resourceVersion"])
    if grace > 0:
        return written, False
    return store.delete("pods", meta["namespace"], meta["name"], expect_uid=meta.get("uid")), True
