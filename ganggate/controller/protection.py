"""Protection while running: a PodDisruptionBudget (policy/v1) per released gang.

For each gang with released pods, the controller keeps a budget `ganggate-<group-name>` in the
gang's namespace, labelled `ganggate.io/gang=<group-name>` (how it finds its own), selecting the
gang's pods by the same label (which the release patch adds), with `minAvailable` the gang's
min-available: a voluntary disruption (a drain, the Eviction API) may then not take the gang
below what it needs to run. Budgets of gangs that no longer exist are deleted. Everything is
idempotent (409 on create and 404 on delete are success) and a restarted leader lists its
budgets again, so nothing is left behind or made twice.

Owners: the budget's ownerReferences are the owning controllers of the gang's pods (a Job,
a JobSet's Jobs), or, for bare pods, the pods themselves; none of them with `controller: true`
(the budget has no controller) nor `blockOwnerDeletion`. The garbage collector deletes a
dependent only once *all* its owners are gone (docs "Owners and dependents"; kube-controller-
manager's garbagecollector attemptToDeleteItem keeps it while one owner is alive), which is
what a gang wants: the budget lives while any part of the gang's workload does. Owning it by
the controllers rather than by pods keeps it across a restart of the gang, whose pods are
recreated with new uids. The controller's own clean-up deletes it anyway when the gang is gone,
for clusters (and simulators) whose collector does not reach budgets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Coroutine

from ganggate.contract import GANG_LABEL, gang_label_value
from ganggate.core.cluster import ClusterState
from ganggate.core.gangs import Gang, GangKey
from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

MANAGED_BY = ("app.kubernetes.io/managed-by", "ganggate")
RESYNC_SECONDS = 60.0


def budget_name(gang_name: str) -> str:
    """The budget of a gang: `ganggate-<group-name>` (a group-name is a DNS-1123 label, so
    this is a valid object name)."""
    return f"ganggate-{gang_name}"


def _owners(gang: Gang) -> list[dict]:
    refs: dict[str, dict] = {}
    for pod in gang.pods.values():
        meta = pod.raw.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("controller") is True and ref.get("uid"):
                refs[ref["uid"]] = {k: ref[k] for k in ("apiVersion", "kind", "name", "uid") if k in ref}
    if not refs:  # bare pods: the live released ones own it
        for pod in gang.released_pods():
            refs[pod.uid] = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
    return [refs[uid] for uid in sorted(refs)]


def desired_budget(gang: Gang) -> dict | None:
    """The budget a gang should have: one when it has released pods and a spec."""
    if gang.spec is None or not gang.released_count:
        return None
    value = gang_label_value(gang.name)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": budget_name(gang.name),
            "namespace": gang.namespace,
            "labels": {GANG_LABEL: value, MANAGED_BY[0]: MANAGED_BY[1]},
            "ownerReferences": _owners(gang),
        },
        "spec": {"minAvailable": gang.spec.min_available, "selector": {"matchLabels": {GANG_LABEL: value}}},
    }


def plan_budgets(gangs: dict[GangKey, Gang], known: dict[tuple[str, str], str]) -> tuple[list[dict], list[tuple[str, str]]]:
    """Budgets to create (gangs with released pods and no budget known) and budgets to delete
    (ours, known, whose gang has no pods any more). known maps (namespace, budget name) -> the
    gang label value it carries. Pure."""
    create = []
    for gang in gangs.values():
        key = (gang.namespace, budget_name(gang.name))
        if key not in known and (body := desired_budget(gang)) is not None:
            create.append(body)
    delete = [key for key, gang_name in sorted(known.items()) if (key[0], gang_name) not in gangs]
    return create, delete


class Protection:
    """Keeps one budget per released gang; see the module docstring."""

    def __init__(self, api_client: Any, state: ClusterState, metrics: Any,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task]) -> None:
        from kubernetes_asyncio import client

        self.policy = client.PolicyV1Api(api_client)
        self.state = state
        self.metrics = metrics
        self.spawn = spawn
        self.known: dict[tuple[str, str], str] = {}
        self._listed_at: float | None = None
        self._busy = False

    def reconcile(self) -> None:
        """Start one pass (at most one at a time)."""
        if not self._busy:
            self._busy = True
            self.spawn(self._pass())

    async def _pass(self) -> None:
        try:
            now = time.monotonic()
            if self._listed_at is None or now - self._listed_at > RESYNC_SECONDS:
                await self._list()
                self._listed_at = now
            create, delete = plan_budgets(self.state.gangs, self.known)
            for body in create:
                await self._create(body)
            for namespace, name in delete:
                await self._delete(namespace, name)
        except ApiCallError as exc:
            log.warning("PodDisruptionBudgets: %s; retried next round", exc)
            self._listed_at = None
        finally:
            self._busy = False

    async def _list(self) -> None:
        body = await call_json(self.policy.list_pod_disruption_budget_for_all_namespaces,
                               label_selector=f"{GANG_LABEL},{MANAGED_BY[0]}={MANAGED_BY[1]}",
                               verb="list", metrics=self.metrics)
        self.known = {}
        for item in body.get("items") or []:
            meta = item.get("metadata") or {}
            value = (meta.get("labels") or {}).get(GANG_LABEL)
            if value and meta.get("name") == budget_name(value):
                self.known[(meta.get("namespace") or "default", meta["name"])] = value

    async def _create(self, body: dict) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        try:
            await call_json(self.policy.create_namespaced_pod_disruption_budget, meta["namespace"], body,
                            verb="create", metrics=self.metrics)
            log.info("PodDisruptionBudget %s/%s created: minAvailable %d of gang %s", *key,
                     body["spec"]["minAvailable"], meta["labels"][GANG_LABEL])
        except ApiCallError as exc:
            if exc.status != 409:
                raise
        self.known[key] = meta["labels"][GANG_LABEL]

    async def _delete(self, namespace: str, name: str) -> None:
        try:
            await call_json(self.policy.delete_namespaced_pod_disruption_budget, name, namespace,
                            verb="delete", metrics=self.metrics)
            log.info("PodDisruptionBudget %s/%s deleted: its gang is gone", namespace, name)
        except ApiCallError as exc:
            if exc.status != 404:
                raise
        self.known.pop((namespace, name), None)
