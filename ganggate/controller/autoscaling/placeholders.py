"""Placeholder pods (`--autoscaling placeholders`), for autoscalers without ProvisioningRequests
(Karpenter, or cluster-autoscaler without them), as YuniKorn's gang placeholders do.

For a complete gang the round found no room for, the controller creates one ungated placeholder
pod per gang pod: the pod's requests and node selection on a pause container, the lowest priority
(PriorityClass `ganggate-placeholder`, preemptionPolicy Never), labelled with the gang. The
scheduler marks them Unschedulable, which is what an autoscaler acts on. Once every placeholder is
bound, the controller deletes them and releases the gang pinned to their nodes, each pod where its
placeholder was, in one decision. Placeholders that do not all bind within the timeout are
deleted (a half-provisioned set never holds nodes for ever) and the gang asks again after a
back-off. While they wait or run they are ordinary pods to the planner: their room is never
counted as free for another gang.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ganggate.controller.autoscaling.provisioner import tell_gang
from ganggate.core.policy.provisioning import (
    placeholder_pods,
    placeholder_priority_class,
    placement_on_placeholders,
    wants_room,
)
from ganggate.core.state.gangs import GangKey
from ganggate.core.state.outcome import Decision
from ganggate.kube.calls import ApiCallError, call_json

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 900.0  # cluster-autoscaler's --max-node-provision-time is 15 minutes
RETRY_SECONDS = 60.0


@dataclass
class PlaceholderSet:
    """One gang's placeholders: (gang pod key, placeholder pod key), and when they were made."""

    pairs: list[tuple[str, str]]
    created: float
    busy: bool = False
    done: bool = False
    names: list[str] = field(default_factory=list)


class Placeholders:
    """Keeps one set of placeholders per gang that needs room; see the module docstring."""

    def __init__(self, core: Any, scheduling: Any, state: Any, events: Any, *, release: Callable[[Decision, float], None],
                 spawn: Callable[[Any], Any], may_act: Callable[[], bool], timeout_seconds: float = TIMEOUT_SECONDS) -> None:
        self.core = core
        self.scheduling = scheduling
        self.state = state
        self.events = events
        self.release = release
        self.spawn = spawn
        self.may_act = may_act
        self.timeout_seconds = timeout_seconds
        self.sets: dict[GangKey, PlaceholderSet] = {}
        self.retry_at: dict[GangKey, float] = {}
        self._class_ready = False

    def round(self, waitings: list[Any], now: float, released: set[GangKey]) -> None:
        if not self.may_act():
            return
        for waiting in waitings:
            gang = self.state.gangs.get(waiting.gang_key)
            if wants_room(waiting, gang) and waiting.gang_key not in self.sets \
                    and self.retry_at.get(waiting.gang_key, 0.0) <= now:
                self._create(gang, now)
        for key, held in list(self.sets.items()):
            if held.busy:
                continue
            gang = self.state.gangs.get(key)
            if gang is None or key in released or gang.state != "waiting":
                self._remove(key, held, "the gang started" if gang is not None else "the gang is gone")
                continue
            nodes = {p: (self.state.pods[p].node_name if p in self.state.pods else None) for _, p in held.pairs}
            placement = placement_on_placeholders(held.pairs, nodes)
            if placement is not None:
                self._tell(key, "PlaceholdersBound", f"every placeholder is bound; releasing the gang on their "
                           f"nodes ({', '.join(sorted(set(placement.values())))})")
                self._remove(key, held, "released on the placeholders' nodes")
                self.release(Decision(key, dict(placement), reason="on the nodes its placeholders were bound to"), now)
            elif now - held.created >= self.timeout_seconds:
                bound = sum(1 for node in nodes.values() if node)
                self._tell(key, "PlaceholdersTimedOut", f"only {bound} of {len(held.pairs)} placeholders were bound "
                           f"after {self.timeout_seconds:.0f}s; deleting them, asking again in {RETRY_SECONDS:.0f}s",
                           warning=True)
                self.retry_at[key] = now + RETRY_SECONDS
                self._remove(key, held, "timed out")

    def _create(self, gang: Any, now: float) -> None:
        pods = placeholder_pods(gang)
        held = PlaceholderSet([(pod_key, f"{gang.namespace}/{p['metadata']['name']}") for pod_key, p in pods], now,
                              busy=True, names=[p["metadata"]["name"] for _, p in pods])
        self.sets[gang.key] = held

        async def create() -> None:
            try:
                if not self._class_ready:
                    try:
                        await call_json(self.scheduling.create_priority_class, placeholder_priority_class(), verb="create")
                    except ApiCallError as exc:
                        if exc.status != 409:
                            raise
                    self._class_ready = True
                for _, pod in pods:
                    try:
                        await call_json(self.core.create_namespaced_pod, gang.namespace, pod, verb="create")
                    except ApiCallError as exc:
                        if exc.status != 409:  # made by an earlier leader: keep it
                            raise
                self._tell(gang.key, "PlaceholdersCreated", f"created {len(pods)} placeholder pods so that the "
                           f"autoscaler adds nodes for the gang; it starts when all are bound")
            except ApiCallError as exc:
                log.warning("gang %s/%s: cannot create placeholders: %s", *gang.key, exc)
                self.retry_at[gang.key] = now + RETRY_SECONDS
                self.sets.pop(gang.key, None)
                self.spawn(self._delete(gang.namespace, held.names))
            finally:
                held.busy = False
        self.spawn(create())

    def _remove(self, key: GangKey, held: PlaceholderSet, why: str) -> None:
        log.info("gang %s/%s: %s; deleting its placeholders", *key, why)
        self.sets.pop(key, None)
        self.spawn(self._delete(key[0], held.names))

    async def _delete(self, namespace: str, names: list[str]) -> None:
        for name in names:
            try:
                await call_json(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0, verb="delete")
            except ApiCallError as exc:
                if exc.status != 404:
                    log.warning("deleting placeholder %s/%s: %s", namespace, name, exc)

    def _tell(self, key: GangKey, reason: str, message: str, warning: bool = False) -> None:
        tell_gang(self.state, self.events, key, reason, message, warning)
