"""Protection while running: a PodDisruptionBudget (policy/v1) per released gang.

For each gang with released pods, the controller keeps a budget `ganggate-<group-name>` in the
gang's namespace, labelled `ganggate.io/gang=<group-name>` (how it finds its own), selecting the
gang's pods by the same label (which the release patch adds), with `minAvailable` the gang's
min-available: a voluntary disruption (a drain, the Eviction API) may then not take the gang
below what it needs to run. Budgets of gangs that no longer exist, or whose every pod has ended
(Succeeded or Failed), are deleted: the eviction subresource lets a terminal pod go whatever its
budgets say (pkg/registry/core/pod/storage/eviction.go canIgnorePDB), so such a budget protects
nothing, while every budget left behind costs the disruption controller a selector match on
every pod change in the namespace (a finished Job's pods stay until deleted). Everything is
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

Which gangs get none (`plan_budgets`, pure):
- a gang some live pod of which a budget not made by ganggate already covers (selector match,
  same namespace, as the eviction subresource judges it, `ganggate.core.policy.budgets`): two budgets
  over one pod make every eviction of that pod fail with 500, so ganggate leaves it to the
  user's budget and deletes its own if it had one; it says so once per gang (Event
  `GangProtectedByUserBudget` on the gang's oldest released pod, naming the budget, and a log
  line);
- a victim of a preemption in flight or reserved (`ganggate.io/preemption` on the preemptor's
  pods names its victims): the preemptor deleted the budget to evict the gang whole;
- a gang with pods being deleted (it is being torn down or restarted);
- a GPU-sharing pod the webhook gated alone (annotation `ganggate.io/gang-of-one`): without
  ganggate it would have had no budget, and a drain must still be able to move it.
Existing budgets of the last two are left alone; they are only not (re)created.

The controller watches every PodDisruptionBudget (list + watch, `informer.Informer`), so a
user's budget made after ganggate's is seen at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ganggate.contract import GANG_LABEL, gang_label_value
from ganggate.core.policy.budgets import MANAGED_BY, budget_name, foreign_budgets_over, is_ours
from ganggate.core.policy.reservation import active_reservations
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

__all__ = ["MANAGED_BY", "budget_name", "desired_budget", "plan_budgets", "preemption_victims", "Protection"]


def _owners(gang: Gang) -> list[dict]:
    refs: dict[str, dict] = {}
    for pod in gang.pods.values():
        ref = pod.controller_ref
        if ref is not None and ref.get("uid"):
            refs[ref["uid"]] = dict(ref)
    if not refs:  # bare pods: the live released ones own it
        for pod in gang.released_pods():
            refs[pod.uid] = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
    return [refs[uid] for uid in sorted(refs)]


def desired_budget(gang: Gang) -> dict | None:
    """The budget a gang should have: one when it has released pods and a spec, unless it is a
    GPU-sharing pod the webhook made a gang of one (SOLO_ANNOTATION): that stays drainable."""
    if gang.spec is None or not gang.released_count:
        return None
    if all(p.solo for p in gang.pods.values()):
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


def preemption_victims(state: ClusterState, now: float, in_flight: Iterable[str] = ()) -> set[GangKey]:
    """Gangs a preemption is evicting: named by an active reservation (`ganggate.io/preemption`
    on a waiting preemptor's pods) or by the preemption in flight (`in_flight`, "ns/gang")."""
    names = set(in_flight) | {v for r in active_reservations(state, now).values() for v in r.victims}
    return {key for key in state.gangs if f"{key[0]}/{key[1]}" in names}


def _tearing_down(gang: Gang) -> bool:
    """Some pod of the gang is being deleted (and has not ended): it is going, or restarting."""
    return any(p.terminating and not p.terminated for p in gang.pods.values())


def _finished(gang: Gang | None) -> bool:
    """The gang is gone, or every pod of it has ended (Succeeded/Failed): nothing left to protect."""
    if gang is None:
        return True
    return gang.live_count == 0 and all(p.terminated for p in gang.pods.values())


@dataclass
class BudgetPlan:
    """What a pass does: budgets to create, ours to delete, and the gangs a user's budget covers
    (gang -> the names of those budgets)."""

    create: list[dict] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)
    covered: dict[GangKey, list[str]] = field(default_factory=dict)
    to_create: list[Gang] = field(default_factory=list)  # (plan_budgets with bodies=False)


def plan_budgets(gangs: Mapping[GangKey, Gang], known: Mapping[tuple[str, str], str], *,
                 foreign: Iterable[Mapping] = (), skip: Collection[GangKey] = (), bodies: bool = True) -> BudgetPlan:
    """Which gangs get a budget. Pure.

    known maps ganggate's own budgets (namespace, budget name) -> the gang label value each
    carries; foreign are the budgets not made by ganggate; skip are gangs not to protect now
    (preemption victims). A gang with released pods gets a budget unless it has one, a foreign
    budget covers one of its live pods (then ours, if any, is deleted), it is skipped, or some
    of its pods are being deleted. Ours whose gang has no pods any more, or only pods that ended,
    are deleted. With bodies=False the gangs to give a budget are in `to_create` (their bodies,
    desired_budget, made one at a time as they are sent: the first pass after a large release
    would build thousands at once) and `create` stays empty."""
    by_namespace: dict[str, list[Mapping]] = {}
    for budget in foreign:
        if not is_ours(budget):
            by_namespace.setdefault((budget.get("metadata") or {}).get("namespace") or "default", []).append(budget)
    plan = BudgetPlan()
    doomed: set[tuple[str, str]] = set()
    for key in sorted(k for k, g in gangs.items() if g.spec is not None and g.released_count):
        gang = gangs[key]
        ours = (gang.namespace, budget_name(gang.name))
        names = foreign_budgets_over(gang, by_namespace.get(gang.namespace, ()))
        if names:
            plan.covered[key] = names
            if ours in known:
                doomed.add(ours)
            continue
        if ours in known or key in skip or _tearing_down(gang):
            continue
        if not bodies:
            plan.to_create.append(gang)
        elif (body := desired_budget(gang)) is not None:
            plan.create.append(body)
    doomed |= {k for k, gang_name in known.items() if _finished(gangs.get((k[0], gang_name)))}
    plan.delete = sorted(doomed)
    return plan


def _known(created: Mapping[tuple[str, str], str], budgets: Iterable[Mapping]) -> dict[tuple[str, str], str]:
    """ganggate's own budgets among `budgets`, and those it created and has not seen yet."""
    out = dict(created)
    for budget in budgets:
        if is_ours(budget):
            meta = budget["metadata"]
            out[(meta.get("namespace") or "default", meta["name"])] = meta["labels"][GANG_LABEL]
    return out


class Protection:
    """Keeps one budget per released gang; see the module docstring.

    `informer` (list + watch of every PodDisruptionBudget) must be run by the controller;
    nothing is created or deleted before its first list. `in_flight` names the victims of the
    preemption being carried out ("ns/gang")."""

    def __init__(self, api_client: Any, state: ClusterState, metrics: Any,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task], *, events: Any = None,
                 poke: Callable[[], None] = lambda: None,
                 in_flight: Callable[[], Iterable[str]] = lambda: ()) -> None:
        from kubernetes_asyncio import client

        from ganggate.controller.round.informer import Informer

        self.policy = client.PolicyV1Api(api_client)
        self.state = state
        self.metrics = metrics
        self.spawn = spawn
        self.events = events
        self.in_flight = in_flight
        self.informer = Informer(self.policy.list_pod_disruption_budget_for_all_namespaces, "poddisruptionbudgets",
                                 on_list=lambda _items: poke(), on_event=self._on_event, metrics=metrics)
        self._poke = poke
        self._created: dict[tuple[str, str], str] = {}  # created by us, not yet seen by the watch
        self._told: dict[GangKey, tuple[str, ...]] = {}  # gangs said to be covered, by what
        self._busy = False

    @property
    def known(self) -> dict[tuple[str, str], str]:
        """ganggate's own budgets: (namespace, name) -> the gang label value."""
        return _known(self._created, self.informer.store.values())

    def snapshot(self) -> tuple[dict[tuple[str, str], str], list[dict]] | None:
        """What a pass reads of the budgets, copied on the event loop (the watch changes them
        there) for a pass planned in a worker thread (`plan`); None when no pass may start."""
        if self._busy or not self.informer.synced:
            return None
        return dict(self._created), list(self.informer.store.values())

    def plan(self, now: float, snapshot: tuple[dict[tuple[str, str], str], list[dict]]) -> BudgetPlan:
        """A pass's plan from a `snapshot`: reads the state (in the round's worker thread, while
        the controller holds the state's changes), changes nothing; `act` carries it out."""
        created, budgets = snapshot
        skip = preemption_victims(self.state, now, self.in_flight())
        return plan_budgets(self.state.gangs, _known(created, budgets), foreign=budgets, skip=skip, bodies=False)

    def act(self, plan: BudgetPlan) -> None:
        """Carry out a pass planned off the loop (at most one pass at a time)."""
        if not self._busy:
            self._busy = True
            self.spawn(self._carry_out(plan))

    def _on_event(self, _kind: str, budget: dict) -> None:
        meta = budget.get("metadata") or {}
        self._created.pop((meta.get("namespace") or "default", meta.get("name") or ""), None)
        self._poke()

    def reconcile(self, now: float) -> None:
        """Start one pass (at most one at a time), once the budgets have been listed."""
        if not self._busy and self.informer.synced:
            self._busy = True
            self.spawn(self._pass(now))

    async def _pass(self, now: float) -> None:
        try:
            skip = preemption_victims(self.state, now, self.in_flight())
            plan = plan_budgets(self.state.gangs, self.known,
                                foreign=list(self.informer.store.values()), skip=skip, bodies=False)
        except BaseException:
            self._busy = False
            raise
        await self._carry_out(plan)

    async def _carry_out(self, plan: BudgetPlan) -> None:
        try:
            self._tell(plan.covered)
            for gang in plan.to_create:  # each body made as it is sent: the loop runs between
                if (body := desired_budget(gang)) is not None:
                    await self._create(body)
            for namespace, name in plan.delete:
                await self._delete(namespace, name)
        except ApiCallError as exc:
            log.warning("PodDisruptionBudgets: %s; retried next round", exc)
        finally:
            self._busy = False

    def _tell(self, covered: Mapping[GangKey, list[str]]) -> None:
        """Say once per gang (again when the budgets change) that a user's budget covers it."""
        for key in [k for k in self._told if k not in covered]:
            del self._told[key]
        for key, names in covered.items():
            if self._told.get(key) == tuple(names):
                continue
            self._told[key] = tuple(names)
            gang = self.state.gangs.get(key)
            shown = ", ".join(names)
            message = (f"gang {key[0]}/{key[1]} is covered by PodDisruptionBudget {shown}, not made by ganggate: "
                       f"ganggate makes no budget of its own for it (with two budgets over one pod every "
                       f"eviction of it fails); evictions of its pods follow {shown}")
            log.info("GangProtectedByUserBudget %s/%s: %s", *key, message)
            if self.events is not None and gang is not None:
                pods = sorted(gang.released_pods(), key=lambda p: (p.created, p.key))
                if pods:
                    self.events.emit(pods[0], "GangProtectedByUserBudget", message, log_it=False)

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
        if key not in self.known:
            self._created[key] = meta["labels"][GANG_LABEL]

    async def _delete(self, namespace: str, name: str) -> None:
        try:
            await call_json(self.policy.delete_namespaced_pod_disruption_budget, name, namespace,
                            verb="delete", metrics=self.metrics)
            log.info("PodDisruptionBudget %s/%s deleted: its gang is gone or covered by another budget",
                     namespace, name)
        except ApiCallError as exc:
            if exc.status != 404:
                raise
        self._created.pop((namespace, name), None)
