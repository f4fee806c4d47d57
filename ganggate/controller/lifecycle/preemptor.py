"""Carrying out a gang preemption the core planned (core.preemption): reserve, evict whole, say so.

For one `PreemptionPlan` at a time, in this order:
1. **Reserve.** The reservation (core.reservation's annotation: the planned nodes, the victims,
   a deadline `--preemption-timeout` ahead) is written on every pod of the preemptor by a JSON
   patch with a uid test. From the next round on the freed room is held for the preemptor only,
   also across a controller restart, and `ganggate status` shows it. If that fails, nothing is
   evicted.
2. **Budgets.** A PodDisruptionBudget ganggate made for a victim gang at its release (label
   `ganggate.io/gang` = the gang's name, in its namespace) is deleted first: ganggate itself
   decided the gang goes whole, and its own budget would refuse every eviction after the first.
   A budget someone else made is honoured: if one covering a victim's pods allows fewer
   disruptions than that victim has pods under it, nothing at all is evicted, and that victim is
   left out of plans for `--preemption-timeout`.
3. **Evict.** Every live pod of every victim: POST pods/<name>/eviction (policy/v1 Eviction with
   a uid precondition; the API server marks the pod DisruptionTarget, reason EvictionByEvictionAPI,
   before it deletes it: pkg/registry/core/pod/storage/eviction.go addConditionAndDeletePod, so a
   Job's podFailurePolicy rule that ignores DisruptionTarget covers preemption too); 429 (a budget, or an API
   server under load) and 5xx are retried with
   backoff, honouring Retry-After; 404 and 409 (gone, or a new pod of that name) count as gone.
4. **Say so.** Events `GangPreempted` on each victim pod (naming the preemptor) and `Preempting`
   on each preemptor pod (`PreemptionBlocked` when a foreign budget refused);
   `ganggate_preemptions_total` counts preemptions carried out.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ganggate.contract import GANG_LABEL, gang_label_value
from ganggate.core.placement.explain import plural
from ganggate.core.policy.budgets import covers
from ganggate.core.policy.preemption import (
    NoPreemption,
    PreemptionOptions,
    PreemptionPlan,
    Victim,
    VictimMemo,
    plan_preemption,
)
from ganggate.core.policy.reservation import active_reservations, annotation_value
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.outcome import Waiting
from ganggate.core.state.pods import PREEMPTION_ANNOTATION, PodInfo
from ganggate.kube.calls import ApiCallError, Backoff, call_json, rfc3339, with_retries

log = logging.getLogger(__name__)

#: Reasons a waiting gang gives for preempting nothing that are worth adding to its Event.
_QUIET_PREFIX = "no whole gang of priority below"


class Preemptor:
    """Plans at most one preemption per round and carries it out (see the module docstring)."""

    def __init__(self, core_api: Any, policy_api: Any, state: ClusterState, events: Any, metrics: Any, *,
                 options: PreemptionOptions, timeout_seconds: float, spawn: Callable[[Any], Any],
                 may_act: Callable[[], bool] = lambda: True,
                 capacity: Callable[[], Any] = lambda: None,
                 backoff: Backoff = Backoff(base=0.1, cap=5.0, attempts=10)) -> None:
        self.core = core_api
        self.policy = policy_api
        self.state = state
        self.events = events
        self.metrics = metrics
        self.options = options
        self.timeout_seconds = timeout_seconds
        self.spawn = spawn
        self.may_act = may_act
        self.capacity = capacity  # the kept Capacity, up to date (core.incremental), or None
        self.backoff = backoff
        self.in_flight: PreemptionPlan | None = None
        self._protected: dict[str, float] = {}  # victim name -> until (a foreign budget refused)
        self._last_search: tuple[tuple, list[NoPreemption]] | None = None  # its inputs and reasons
        self._victims = VictimMemo()  # the running gangs as victims, kept between searches

    def round(self, waitings: list[Waiting], now: float) -> list[Waiting]:
        """Start a preemption if one helps; returns the waitings, with why gangs preempt nothing."""
        return self.act(waitings, self.search(waitings, now), now)

    def search(self, waitings: list[Waiting], now: float) -> tuple[PreemptionPlan | None, list[NoPreemption]] | None:
        """The search of `round` alone: reads the state and the kept capacity (gives back all it
        takes), starts nothing, so it may run in a worker thread while the controller holds the
        state's changes; None when a preemption is in flight (nothing searched)."""
        if self.in_flight is not None:
            return None
        self._protected = {k: t for k, t in self._protected.items() if t > now}
        # The search reads the state, the round's waitings (themselves a reading of the state),
        # the victims kept out and the reservations still running: when none of these changed
        # since a search that found nothing, it would find nothing again, for the same reasons.
        inputs = (self.state.version, len(waitings), frozenset(self._protected),
                  frozenset(active_reservations(self.state, now)))
        if self._last_search is not None and self._last_search[0] == inputs:
            reasons = self._last_search[1]
            plan = None
        else:
            self._victims.forget_gone(self.state)
            plan, reasons = plan_preemption(self.state, waitings, now, self.options, busy=set(self._protected),
                                            base=self.capacity(), memo=self._victims)
            self._last_search = None if plan is not None else (inputs, reasons)
        return plan, reasons

    def act(self, waitings: list[Waiting], found: tuple[PreemptionPlan | None, list[NoPreemption]] | None,
            now: float) -> list[Waiting]:
        """Start the preemption `search` found, if any (on the event loop); the waitings, with
        why gangs preempt nothing."""
        if found is None or self.in_flight is not None:
            return waitings
        plan, reasons = found
        if plan is not None:
            self.in_flight = plan
            self.spawn(self._run(plan, now))
        notes = {r.gang_key: r.reason for r in reasons if not r.reason.startswith(_QUIET_PREFIX)}
        if not notes:
            return waitings
        return [Waiting(w.gang_key, w.event_reason, f"{w.message}; no preemption: {notes[w.gang_key]}", w.kind)
                if w.gang_key in notes and w.event_reason == "GangUnschedulable" else w for w in waitings]

    async def _run(self, plan: PreemptionPlan, now: float) -> None:
        name = f"{plan.preemptor[0]}/{plan.preemptor[1]}"
        try:
            own, refused = await self._budgets_of(plan.victims)
            if refused:
                victim, budget = refused
                self._protected[victim.name] = now + self.timeout_seconds
                message = (f"not preempting {victim.name}: its PodDisruptionBudget {budget} refuses; "
                           f"it is left out of preemptions for {self.timeout_seconds:g}s")
                log.warning("PreemptionBlocked %s: %s", name, message)
                for pod in self._preemptor_pods(plan):
                    self.events.emit(pod, "PreemptionBlocked", message, log_it=False)
                return
            if not self.may_act():
                return
            preemption_id = uuid.uuid4().hex[:12]
            if not await self._reserve(plan, preemption_id, now):
                return
            await self._delete_budgets(own)
            self.metrics.preemptions.inc()
            log.info("Preempting %s: %s (preemption %s)", name, plan.message, preemption_id)
            for pod in self._preemptor_pods(plan):
                self.events.emit(pod, "Preempting", f"{plan.message} (preemption {preemption_id})", log_it=False)
            await asyncio.gather(*(self._evict_gang(v, plan, name, own) for v in plan.victims))
        except ApiCallError as exc:
            log.warning("preemption for gang %s stopped: %s", name, exc)
        except Exception:  # a bug here must not stop the controller
            log.exception("preemption for gang %s failed", name)
        finally:
            self.in_flight = None

    def _preemptor_pods(self, plan: PreemptionPlan) -> list[PodInfo]:
        gang = self.state.gangs.get(plan.preemptor)
        return list(gang.live_pods()) if gang is not None else []

    async def _reserve(self, plan: PreemptionPlan, preemption_id: str, now: float) -> bool:
        """Write the reservation on every pod of the preemptor; False (and a log) if any failed."""
        victims = [v.name for v in plan.victims]
        value = annotation_value(preemption_id, rfc3339(now), rfc3339(now + self.timeout_seconds),
                                 plan.placement, victims)
        pods = self._preemptor_pods(plan)
        path = "/metadata/annotations/" + PREEMPTION_ANNOTATION.replace("~", "~0").replace("/", "~1")

        async def one(pod: PodInfo) -> None:
            body = [{"op": "test", "path": "/metadata/uid", "value": pod.uid},
                    {"op": "add", "path": path, "value": value}]
            await with_retries(lambda: call_json(self.core.patch_namespaced_pod, pod.name, pod.namespace,
                                                 body, verb="patch", metrics=self.metrics), self.backoff)

        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed or not pods:
            log.warning("not preempting for gang %s/%s: reserving failed (%s)", *plan.preemptor,
                        failed[0] if failed else "no pods")
            return False
        return True

    async def _budgets_of(self, victims: Iterable[Victim]
                          ) -> tuple[list[tuple[str, str]], tuple[Victim, str] | None]:
        """ganggate's own budgets of the victim gangs (namespace, name); and a victim with the
        foreign budget that would refuse its eviction, if any."""
        own: list[tuple[str, str]] = []
        for victim in victims:
            namespace = victim.pods[0].namespace
            for budget in await self._budgets(namespace):
                meta = budget.get("metadata") or {}
                if victim.gang_key is not None and _labels_own(meta, victim.gang_key[1]):
                    own.append((namespace, meta.get("name") or ""))
                    continue
                covered = sum(1 for p in victim.pods if selects(budget, p))
                allowed = int((budget.get("status") or {}).get("disruptionsAllowed") or 0)
                if covered > allowed:
                    return own, (victim, f"{namespace}/{meta.get('name')} (allows {allowed}, would take {covered})")
        return own, None

    async def _delete_budgets(self, own: list[tuple[str, str]]) -> None:
        """Delete ganggate's own budgets of gangs being preempted (404: gone already)."""
        for namespace, budget_name in own:
            try:
                await with_retries(functools.partial(call_json, self.policy.delete_namespaced_pod_disruption_budget,
                                                     budget_name, namespace, verb="delete", metrics=self.metrics),
                                   self.backoff)
                log.info("deleted budget %s/%s of a gang being preempted", namespace, budget_name)
            except ApiCallError as exc:
                if exc.status != 404:
                    raise

    async def _budgets(self, namespace: str) -> list[dict]:
        try:
            body = await with_retries(lambda: call_json(self.policy.list_namespaced_pod_disruption_budget, namespace,
                                                        verb="list", metrics=self.metrics), self.backoff)
        except ApiCallError as exc:
            if exc.status == 404:  # policy/v1 not served: no budgets
                return []
            raise
        return body.get("items") or []

    async def _evict_gang(self, victim: Victim, plan: PreemptionPlan, preemptor: str,
                          own: list[tuple[str, str]]) -> None:
        message = (f"preempted whole by gang {preemptor} (priority {plan.priority}) to make room for "
                   f"{plural(len(plan.placement), 'pod')}")
        log.info("GangPreempted %s: %s", victim.name, message)
        mine = [b for b in own if victim.gang_key is not None and b[0] == victim.gang_key[0]]
        results = await asyncio.gather(*(self._evict(p, mine) for p in victim.pods), return_exceptions=True)
        for pod, result in zip(victim.pods, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("evicting %s (%s): %s", pod.key, victim.name, result)
            else:
                self.events.emit(pod, "GangPreempted", message, log_it=False)

    async def _evict(self, pod: PodInfo, own_budgets: list[tuple[str, str]]) -> None:
        """Evict one pod; a 429 that may be ganggate's own budget come back (the budget keeper
        recreates it for a gang still running) deletes that budget again before the retry."""
        name, namespace = pod.name, pod.namespace
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": pod.uid or None}}}

        async def attempt() -> dict:
            try:
                return await call_json(self.core.create_namespaced_pod_eviction, name, namespace, body,
                                       verb="evict", metrics=self.metrics)
            except ApiCallError as exc:
                if exc.status == 429 and own_budgets:
                    await self._delete_budgets(own_budgets)
                raise

        try:
            await with_retries(attempt, self.backoff)
        except ApiCallError as exc:
            if exc.status not in (404, 409):
                raise


def _labels_own(meta: Mapping, gang_name: str) -> bool:
    """A budget ganggate made for this gang (controller.lifecycle.protection: ganggate.io/gang=<name>)."""
    return (meta.get("labels") or {}).get(GANG_LABEL) == gang_label_value(gang_name)


def selects(budget: Mapping, pod: PodInfo) -> bool:
    """The eviction subresource counts the budget for the pod (`ganggate.core.policy.budgets.covers`:
    same namespace, a valid non-empty selector matching its labels)."""
    return covers(budget, pod)
