"""The pods/eviction subresource: a delete that respects PodDisruptionBudgets.

Follows pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create):
- a pod that is Pending, Succeeded, Failed or already being deleted is deleted without looking
  at budgets (canIgnorePDB);
- more than one budget covering the pod is 500 "This pod has more than one
  PodDisruptionBudget, which the eviction subresource does not support.";
- a pod that is not Ready may be deleted without spending the budget when its
  unhealthyPodEvictionPolicy is AlwaysAllow, or (IfHealthyBudget, the default) when the
  budget has currentHealthy >= desiredHealthy > 0; the delete then carries the pod's
  resourceVersion as a precondition, and a conflict is answered 429;
- otherwise checkAndDecrement: a budget whose status is older than its spec
  (observedGeneration < generation) is 429 with "The disruption budget X is still being
  processed by the server.", one with disruptionsAllowed 0 is 429 "Cannot evict pod as it would
  violate the pod's disruption budget." with the DisruptionBudget cause "The disruption budget X
  needs N healthy pods and has M currently"; on success disruptionsAllowed is decremented and
  the pod recorded in status.disruptedPods (written through the budget's status);
- then addConditionAndDeletePod: the DisruptionTarget condition (reason EvictionByEvictionAPI)
  is written to the pod, and the pod is deleted through the same graceful path as DELETE, with
  the Eviction's deleteOptions (a resourceVersion precondition moved to the condition write's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.errors import Cause
from ganggate.sim.apiserver.watch import clone
from ganggate.sim.helpers import disruption

EVICTION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"  # policy/v1 DisruptionBudgetCause
MAX_DISRUPTED_POD_SIZE = 2000

Delete = Callable[[dict[str, Any]], Any]
"""delete(deleteOptions): the API server's pod delete path."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def too_many_requests(detail: str, retry_after: int) -> errors.ApiError:
    """NewTooManyRequests with the DisruptionBudget cause (Retry-After only when positive)."""
    return errors.ApiError(429, "TooManyRequests", EVICTION_MESSAGE, retry_after=retry_after or None,
                           causes=[Cause("", DISRUPTION_BUDGET_CAUSE, detail)])


def _still_processing(name: str) -> errors.ApiError:
    """createTooManyRequestsError."""
    return too_many_requests(f"The disruption budget {name} is still being processed by the server.", 10)


def can_ignore_pdb(pod: Mapping[str, Any]) -> bool:
    """canIgnorePDB: terminal and pending pods, and pods being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _forbidden_pdb(name: str, detail: str) -> errors.ApiError:
    return errors.ApiError(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: {detail}',
                           name=name, group="policy", kind="poddisruptionbudget")


def check_and_decrement(store: Any, pod_name: str, pdb: Mapping[str, Any], dry_run: bool) -> None:
    """checkAndDecrement: refuse, or spend one disruption and record the pod as disrupted."""
    meta, status = pdb["metadata"], clone(pdb.get("status") or {})
    if status.get("observedGeneration", 0) < meta.get("generation", 1):
        raise _still_processing(meta["name"])
    allowed = status.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise _forbidden_pdb(meta["name"], "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        raise _forbidden_pdb(meta["name"], "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise too_many_requests(f"The disruption budget {meta['name']} needs {status.get('desiredHealthy', 0)} healthy "
                                f"pods and has {status.get('currentHealthy', 0)} currently", 0)
    status["disruptionsAllowed"] = allowed - 1
    if status["disruptionsAllowed"] == 0:
        disruption.set_allowed_condition(status)
    if dry_run:
        return
    status.setdefault("disruptedPods", {})[pod_name] = _now()
    store.update(disruption.KEY, dict(clone(pdb), status=status), expect_rv=meta["resourceVersion"])


def add_condition_and_delete(store: Any, pod: Mapping[str, Any], options: dict[str, Any], delete: Delete,
                             dry_run: bool) -> None:
    """addConditionAndDeletePod: DisruptionTarget=True (EvictionByEvictionAPI), then the graceful delete."""
    if not dry_run:
        meta = pod["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise errors.conflict("pods", meta["name"], f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                                                        f"UID in object meta: {meta.get('uid')}")
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.conflict("pods", meta["name"], "Precondition failed: ResourceVersion in precondition: "
                                                        f"{preconditions['resourceVersion']}, ResourceVersion in object "
                                                        f"meta: {meta.get('resourceVersion')}")
        updated = set_pod_condition(clone(pod), {"type": "DisruptionTarget", "status": "True",
                                                 "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"})
        if updated is not None:
            written = store.update("pods", updated, expect_rv=meta["resourceVersion"])
            if preconditions.get("resourceVersion"):
                options = dict(options, preconditions=dict(preconditions, resourceVersion=written["metadata"]["resourceVersion"]))
    delete(options)


def set_pod_condition(pod: dict[str, Any], condition: dict[str, Any]) -> dict[str, Any] | None:
    """podutil.UpdatePodCondition: the pod with the condition set, or None when nothing changes."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            same = all(existing.get(k) == v for k, v in condition.items())
            if same:
                return None
            stamp = existing.get("lastTransitionTime") if existing.get("status") == condition["status"] else _now()
            conditions[index] = dict(condition, lastProbeTime=None, lastTransitionTime=stamp or _now())
            return pod
    conditions.append(dict(condition, lastProbeTime=None, lastTransitionTime=_now()))
    return pod


def evict(store: Any, namespace: str, name: str, eviction: Mapping[str, Any], delete: Delete, dry_run: bool) -> None:
    """EvictionREST.Create; returns on success (the caller answers 201 Success), raises ApiError otherwise."""
    stored = store.lookup("pods", namespace, name)
    if stored is None:
        raise errors.not_found("pods", name)
    pod = stored.obj
    options: dict[str, Any] = dict(eviction.get("deleteOptions") or {})
    if dry_run:
        options["dryRun"] = ["All"]
    if can_ignore_pdb(pod):
        add_condition_and_delete(store, pod, options, delete, dry_run)
        return
    pdbs = [s.obj for _, s in store.iter(disruption.KEY, namespace) if disruption.guards(s.obj, pod)]
    if len(pdbs) > 1:
        raise errors.ApiError(500, "", MULTIPLE_PDBS)
    unhealthy_ok = False
    if pdbs:
        pdb = pdbs[0]
        spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
        if not disruption.is_pod_ready(pod):
            if spec.get("unhealthyPodEvictionPolicy") == disruption.ALWAYS_ALLOW:
                unhealthy_ok = True
            elif status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0:
                unhealthy_ok = True
        if not unhealthy_ok:
            check_and_decrement(store, name, pdb, dry_run)
    if unhealthy_ok and not (options.get("preconditions") or {}).get("resourceVersion"):
        # The pod must not have become Ready since it was judged: delete only this version of it.
        options["preconditions"] = dict(options.get("preconditions") or {},
                                        resourceVersion=pod["metadata"]["resourceVersion"])
        try:
            add_condition_and_delete(store, pod, options, delete, dry_run)
        except errors.ApiError as exc:
            if exc.code == 409:
                raise _still_processing(pdbs[0]["metadata"]["name"]) from exc
            raise
        return
    add_condition_and_delete(store, pod, options, delete, dry_run)
