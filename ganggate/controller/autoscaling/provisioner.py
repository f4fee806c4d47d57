"""Asking the cluster autoscaler for nodes (`--autoscaling provisioning-request`): a thin shell over
core.policy.provisioning.

A gated pod is invisible to cluster-autoscaler, which acts only on pods the scheduler marked
unschedulable. So for a complete gang the round found no room for, ganggate creates one
ProvisioningRequest (autoscaling.x-k8s.io/v1) with a PodTemplate per pod shape, in the gang's
namespace. While it is pending the gang waits as before; once `Provisioned=True`, the new nodes
join, a round plans the gang on them and releases it whole, its pods carrying the consume
annotations so that the autoscaler counts them against the booked room. `Failed` or
`BookingExpired` before the gang starts: an Event, the request is deleted, and asked again after a
back-off. Once the gang has started, or is gone, the request and its templates are deleted. The
name is the gang's, so a restarted controller or a new leader finds the one request there is
(a create answers 409) instead of making a second.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.core.policy.provisioning import (
    condition,
    consume_annotations,
    owner_references,
    pod_sets,
    request_name,
    request_outcome,
    wants_room,
)
from ganggate.core.state.gangs import GangKey
from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
RETRY_SECONDS = 60.0  # after Failed / BookingExpired, or an error: ask again no sooner
POLL_SECONDS = 2.0  # how often a pending request's status is read


def tell_gang(state: Any, events: Any, key: GangKey, reason: str, message: str, warning: bool = False) -> None:
    """Log a line and put the Event on the gang's first live pod (what `kubectl describe` shows)."""
    gang = state.gangs.get(key)
    log.log(logging.WARNING if warning else logging.INFO, "%s %s/%s: %s", reason, *key, message)
    for pod in (gang.live_pods() if gang is not None else [])[:1]:
        events.emit(pod, reason, message, log_it=False)


@dataclass
class Asked:
    """One gang's request as the controller knows it."""

    name: str
    templates: list[str]
    state: str = "pending"  # pending | provisioned | failed
    next_poll: float = 0.0
    busy: bool = False
    answer: str = ""  # the autoscaler's last word: "Provisioned=False (CapacityIsNotFound: ...)"


class Provisioner:
    """Keeps one ProvisioningRequest per gang that needs room; see the module docstring."""

    def __init__(self, core: Any, custom: Any, state: Any, events: Any, *, provisioning_class: str,
                 spawn: Callable[[Any], Any], may_act: Callable[[], bool]) -> None:
        self.core = core
        self.custom = custom
        self.state = state
        self.events = events
        self.provisioning_class = provisioning_class
        self.spawn = spawn
        self.may_act = may_act
        self.asked: dict[GangKey, Asked] = {}
        self.retry_at: dict[GangKey, float] = {}
        self._clock_now = 0.0

    # ---- called by the controller's round ------------------------------------------------
    def round(self, waitings: list[Any], now: float) -> None:
        """Ask for the gangs that need room, read what was asked, let go of what is no longer needed."""
        self._clock_now = now
        if not self.may_act():
            return
        for waiting in waitings:
            gang = self.state.gangs.get(waiting.gang_key)
            if wants_room(waiting, gang):
                if waiting.gang_key not in self.asked and self.retry_at.get(waiting.gang_key, 0.0) <= now:
                    self._ask(gang)
        for key, asked in list(self.asked.items()):
            gang = self.state.gangs.get(key)
            if asked.busy:
                continue
            if gang is None or gang.state not in ("waiting", "incomplete"):
                self._let_go(key, asked, "the gang started" if gang is not None else "the gang is gone")
            elif asked.state == "pending" and now >= asked.next_poll:
                asked.next_poll = now + POLL_SECONDS
                self._run(asked, self._poll(key, asked, now))

    def annotate(self, decision: Any) -> None:
        """Add the consume annotations to a release of a gang that asked for room: also when the
        nodes joined before this controller read the request's Provisioned (it polls), so that the
        autoscaler counts the pods against the room it booked for them, not as new demand."""
        asked = self.asked.get(decision.gang_key)
        if asked is None or asked.state == "failed":
            return
        extra = consume_annotations(asked.name, self.provisioning_class)
        for pod_key in decision.placement:
            decision.annotations[pod_key] = {**decision.annotations.get(pod_key, {}), **extra}

    # ---- the API calls -------------------------------------------------------------------
    def _run(self, asked: Asked, work: Any) -> None:
        asked.busy = True

        async def wrapped() -> None:
            try:
                await work
            finally:
                asked.busy = False
        self.spawn(wrapped())

    def _ask(self, gang: Any) -> None:
        name = request_name(gang)
        sets = pod_sets(gang, name)
        asked = Asked(name, [s.template_name for s in sets])
        self.asked[gang.key] = asked
        self._run(asked, self._create(gang, asked, sets))

    async def _create(self, gang: Any, asked: Asked, sets: list[Any]) -> None:
        namespace = gang.namespace
        labels = {"app.kubernetes.io/managed-by": "ganggate", "ganggate.io/gang": gang.name[:63]}
        owners = owner_references(gang)  # garbage collection removes them with the gang's Job
        try:
            for pod_set in sets:
                body = {"apiVersion": "v1", "kind": "PodTemplate",
                        "metadata": {"name": pod_set.template_name, "labels": labels, "ownerReferences": owners},
                        "template": {"metadata": {"labels": labels}, "spec": dict(pod_set.spec)}}
                await self._create_or_keep(call_json(self.core.create_namespaced_pod_template, namespace, body,
                                                     verb="create"))
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProvisioningRequest",
                    "metadata": {"name": asked.name, "labels": labels, "ownerReferences": owners},
                    "spec": {"provisioningClassName": self.provisioning_class,
                             "podSets": [{"podTemplateRef": {"name": s.template_name}, "count": s.count} for s in sets]}}
            created = await self._create_or_keep(call_json(self.custom.create_namespaced_custom_object, GROUP,
                                                           VERSION, namespace, PLURAL, body, verb="create"))
        except ApiCallError as exc:
            log.warning("gang %s/%s: cannot create ProvisioningRequest %s: %s", *gang.key, asked.name, exc)
            self.asked.pop(gang.key, None)
            self.retry_at[gang.key] = self._clock_now + RETRY_SECONDS
            return
        pods = sum(s.count for s in sets)
        message = (f"asked the cluster autoscaler for room: ProvisioningRequest {asked.name} "
                   f"({self.provisioning_class}, {pods} pods in {len(sets)} shape{'s' if len(sets) != 1 else ''})"
                   if created else f"waits on ProvisioningRequest {asked.name}, made before")
        self._tell(gang.key, "ProvisioningRequested", message)

    async def _create_or_keep(self, call: Any) -> bool:
        """Create; an object of that name already there (409) is the one made before: keep it."""
        try:
            await call
            return True
        except ApiCallError as exc:
            if exc.status == 409:
                return False
            raise

    async def _poll(self, key: GangKey, asked: Asked, now: float) -> None:
        try:
            request = await call_json(self.custom.get_namespaced_custom_object, GROUP, VERSION, key[0], PLURAL,
                                      asked.name, verb="get")
        except ApiCallError as exc:
            if exc.status == 404:  # deleted by someone: ask again
                self.asked.pop(key, None)
            return
        result = request_outcome(request)
        if result == "pending":
            self._note_pending(key, asked, request)
        if result == asked.state:
            return
        if result == "provisioned":
            self._provisioned(key, asked, "the gang starts when the new nodes join")
        elif result == "failed":
            conditions = {c.get("type"): c for c in (request.get("status") or {}).get("conditions") or []}
            why = conditions.get("Failed") or conditions.get("BookingExpired") or {}
            self._tell(key, "ProvisioningFailed",
                       f"ProvisioningRequest {asked.name}: {why.get('type')} ({why.get('reason')}: "
                       f"{why.get('message')}); asking again in {RETRY_SECONDS:.0f}s", warning=True)
            self.retry_at[key] = now + RETRY_SECONDS
            await self._delete(key[0], asked)
            self.asked.pop(key, None)

    def _provisioned(self, key: GangKey, asked: Asked, then: str) -> None:
        asked.state = "provisioned"
        self._tell(key, "ProvisioningProvisioned", f"ProvisioningRequest {asked.name} is provisioned: {then}")

    def _note_pending(self, key: GangKey, asked: Asked, request: Mapping[str, Any]) -> None:
        """Tell once per answer why a request is not provisioned yet (check-capacity on a full
        cluster, an atomic scale-up the node groups cannot hold)."""
        found = condition(request, "Provisioned")
        if not found or found.get("status") != "False":
            return
        answer = f"Provisioned=False ({found.get('reason')}: {found.get('message')})"
        if answer != asked.answer:
            asked.answer = answer
            self._tell(key, "ProvisioningPending", f"ProvisioningRequest {asked.name}: the autoscaler answers "
                       f"{answer}; the gang keeps waiting, holding nothing")

    def _let_go(self, key: GangKey, asked: Asked, why: str) -> None:
        log.info("gang %s/%s: %s; deleting ProvisioningRequest %s", *key, why, asked.name)
        self.asked.pop(key, None)
        self.spawn(self._last_look_and_delete(key, asked))

    async def _last_look_and_delete(self, key: GangKey, asked: Asked) -> None:
        """Delete the request, once read a last time if it was still pending as far as we knew:
        the nodes can join, and the gang start, between two polls, and the gang's Events should
        still say that the autoscaler provisioned its room (ProvisioningProvisioned)."""
        if asked.state == "pending" and key in self.state.gangs:  # (a gang that is gone hears nothing)
            try:
                request = await call_json(self.custom.get_namespaced_custom_object, GROUP, VERSION, key[0], PLURAL,
                                          asked.name, verb="get")
            except ApiCallError:
                request = None  # gone, or not readable now: nothing more to say
            if request is not None and request_outcome(request) == "provisioned":
                self._provisioned(key, asked, "the gang has started")
        await self._delete(key[0], asked)

    async def _delete(self, namespace: str, asked: Asked) -> None:
        calls = [functools.partial(call_json, self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace,
                                   PLURAL, asked.name, verb="delete")]
        calls += [functools.partial(call_json, self.core.delete_namespaced_pod_template, name, namespace, verb="delete")
                  for name in asked.templates]
        for call in calls:
            try:
                await call()
            except ApiCallError as exc:
                if exc.status != 404:
                    log.warning("deleting %s: %s", asked.name, exc)

    def _tell(self, key: GangKey, reason: str, message: str, warning: bool = False) -> None:
        tell_gang(self.state, self.events, key, reason, message, warning)
