"""A gang's life after release, the shell: members lost, and gangs that wait too long.

Member loss (the core records each loss, `ganggate.core.policy.lifecycle` judges it): when a released
gang drops below min-available (a pod Failed, was deleted, preempted, evicted, lost with its
node) or did not bind within the bind timeout, `--on-member-loss=restart` (default) deletes
its remaining released pods that have an owning controller, with a uid precondition, so that
the owner (a Job) recreates them: they come back gated and the gang is admitted whole again.
Bare pods and gated pods are never deleted. `none` only reports. A released member pinned to
a node whose room pods bound after the plan took (`ganggate.core.policy.planloss`, cause `PlanLost`)
is such a loss at once: the whole gang restarts, or, while the gang keeps min-available
without it, only that member is deleted (a re-plan). Either way each loss gets one
Warning Event `GangBroken` on the lost pod naming it and the cause, a log line, and
`ganggate_gang_member_losses_total{cause}`.

A gang going away is not broken: a pod deleted (cause `Deleted`, no DisruptionTarget) whose
controller owner is gone or being deleted (`controller.lifecycle.owners`: a user deleted the Job, the
garbage collector takes its pods) is no loss: no Event, no restart, a log line only. While that
is being checked the gang counts as restarting (no roll forward into it).

Timeouts: a gang waiting longer than its `scheduling.k8s.io/group-timeout-seconds` gets one
Warning Event `GangTimedOut` (on its oldest pod) and a WARNING line; nothing is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ganggate.controller.lifecycle.drain import NodeDrains
from ganggate.controller.lifecycle.owners import OwnerLookup
from ganggate.controller.lifecycle.protection import Protection
from ganggate.controller.lifecycle.restart import JobAdvice, delete_member
from ganggate.controller.reporting.events import EventRecorder, PodRef
from ganggate.controller.reporting.ownerevents import OwnerEvents
from ganggate.core.policy.lifecycle import judge_loss, nodes_lost
from ganggate.core.policy.planloss import plans_lost
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import GangKey
from ganggate.core.state.losses import MemberLoss
from ganggate.kube.calls import ApiCallError
from ganggate.kube.clock import WALL, Clock

log = logging.getLogger(__name__)

POLICIES = ("restart", "none")
_REMEMBER = 100_000  # uids of losses and deletions remembered (oldest forgotten first)


def attach_lifecycle(controller: Any) -> GangLifecycle:
    """The GangLifecycle of a Controller (its budgets too, unless protect_running_gangs is
    off), wired to receive its bind timeouts as losses."""
    config = controller.config
    preemptor = getattr(controller, "preemptor", None)

    def in_flight() -> list[str]:
        plan = preemptor.in_flight if preemptor is not None else None
        return [v.name for v in plan.victims] if plan is not None else []

    protection = (Protection(controller.api_client, controller.state, controller.metrics, controller._spawn,
                             events=controller.events, poke=controller._poke, in_flight=in_flight)
                  if config.protect_running_gangs else None)
    lifecycle = GangLifecycle(controller.core, controller.state, controller.events, controller.metrics,
                              policy=config.on_member_loss, spawn=controller._spawn, protection=protection,
                              owners=OwnerLookup(controller.api_client, controller.metrics),
                              advice=JobAdvice(controller.api_client, controller.events, controller._spawn,
                                               controller.metrics),
                              clock=controller.clock)
    controller.bind_timeouts.advice = lifecycle.advice
    lifecycle.node_lost_after = config.node_lost_after_seconds
    controller.bind_timeouts.on_loss = lifecycle.handle_losses
    lifecycle.drains = NodeDrains(controller.state, controller.events, lifecycle.owner_events,
                                  policy=config.on_node_drain, restart=lifecycle.restart_whole,
                                  busy=lifecycle.restarting)  # cordoned nodes: controller.lifecycle.drain
    return lifecycle


class _Seen(OrderedDict):
    def add(self, key: Any) -> bool:
        """True the first time a key is seen."""
        if key in self:
            return False
        self[key] = True
        while len(self) > _REMEMBER:
            self.popitem(last=False)
        return True


class GangLifecycle:
    """Acts on member losses and timeouts; `spawn` runs deletions as tracked tasks."""

    def __init__(self, core: Any, state: ClusterState, events: EventRecorder, metrics: Any, *, policy: str,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task], protection: Protection | None = None,
                 owners: OwnerLookup | None = None, advice: JobAdvice | None = None, clock: Clock = WALL) -> None:
        if policy not in POLICIES:
            raise ValueError(f"on_member_loss must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.core = core
        self.state = state
        self.events = events
        self.metrics = metrics
        self.policy = policy
        self.spawn = spawn
        self.protection = protection
        self.owners = owners
        self.advice = advice  # once per Job whose podFailurePolicy would count a restart: controller.lifecycle.restart
        self.node_lost_after: float | None = None  # --node-lost-after (attach_lifecycle sets it)
        self.clock = clock
        self.owner_events = OwnerEvents(events)  # the gang's Events on its Job (controller.reporting.ownerevents)
        self.drains: NodeDrains | None = None  # gangs on cordoned nodes (attach_lifecycle sets it)
        self._checking: dict[GangKey, int] = {}  # gangs with losses whose owner is being looked up
        self._reported = _Seen()  # loss uids reported
        self._deleting = _Seen()  # uids this controller deleted (their own loss is no news)
        self._timed_out: dict[GangKey, float] = {}  # gang -> the created time it timed out from
        self._restarting: set[GangKey] = set()

    def restarting(self, key: GangKey) -> bool:
        """True while a restart of the gang is under way (owned released members remain):
        its replacements must not be released into the old run (a roll forward). Also while
        a loss of the gang waits for its owner to be looked up."""
        if self._checking.get(key):
            return True
        if key not in self._restarting:
            return False
        gang = self.state.gangs.get(key)
        if gang is not None and any(p.owned for p in gang.released_pods()):
            return True
        self._restarting.discard(key)
        return False

    def timed_out_gangs(self) -> list[GangKey]:
        """Gangs already reported as timed out (no second report: nothing is due for them)."""
        return list(self._timed_out)

    def handle_losses(self, losses: Iterable[MemberLoss]) -> None:
        for loss in losses:
            self._on_loss(loss)

    def handle(self, now: float, timeouts: bool = True, budgets: bool = True) -> None:
        """Act on the losses the state recorded, then on timeouts (unless the caller looks for
        them off the loop: `due_timeouts`, `report_timeouts`); keep the budgets in step (unless
        the caller plans their pass off the loop: Protection.snapshot, plan, act)."""
        self.handle_losses(self.state.take_losses())
        self.handle_losses(plans_lost(self.state))
        if self.node_lost_after is not None:  # opt-in: controller.config NODE_LOST_HELP
            self.handle_losses(nodes_lost(self.state, now, self.node_lost_after))
        if self.drains is not None:
            self.drains.handle(now)
        if timeouts:
            self.report_timeouts(self.due_timeouts(now))
        if self.protection is not None and budgets:
            self.protection.reconcile(now)

    def _on_loss(self, loss: MemberLoss) -> None:
        if loss.uid in self._deleting or not self._reported.add((loss.uid, loss.cause)):
            return
        if loss.cause == "Deleted" and loss.owner is not None and self.owners is not None:
            self._checking[loss.gang_key] = self._checking.get(loss.gang_key, 0) + 1
            self.spawn(self._unless_going(loss))
            return
        self._act(loss)

    async def _unless_going(self, loss: MemberLoss) -> None:
        """Act on a deleted pod's loss unless its owner is gone or being deleted."""
        assert loss.owner is not None and self.owners is not None
        api_version, kind, name, uid = loss.owner
        going: bool | None = None
        try:
            going = await self.owners.going(loss.gang_key[0], {"apiVersion": api_version, "kind": kind,
                                                                "name": name, "uid": uid})
        except Exception:  # cannot tell: a loss, as before
            log.exception("looking up the owner of %s", loss.pod_key)
        finally:
            left = self._checking.get(loss.gang_key, 1) - 1
            if left > 0:
                self._checking[loss.gang_key] = left
            else:
                self._checking.pop(loss.gang_key, None)
        if going:
            log.info("gang %s/%s: pod %s deleted with its owner %s %s (gone or being deleted): the gang is "
                     "going away, not broken", *loss.gang_key, loss.pod_key, kind, name)
            return
        self._act(loss)

    def _act(self, loss: MemberLoss) -> None:
        breakage = judge_loss(self.state, loss)
        message = breakage.message(self.policy)
        self.metrics.member_losses.labels(cause=loss.cause).inc()
        namespace, name = loss.pod_key.split("/", 1)
        pod = self.state.pods.get(loss.pod_key)
        ref = PodRef.of(pod) if pod is not None and pod.uid == loss.uid else PodRef(namespace, name, loss.uid)
        if not breakage.below_min and not breakage.replan:
            log.info("gang %s/%s: %s", *loss.gang_key, message)
            return
        self.events.emit(ref, "GangBroken", message)
        gang = self.state.gangs.get(loss.gang_key)
        owned = list(gang.pods.values()) if gang is not None else list(breakage.to_delete)
        self.owner_events.tell(loss.gang_key, owned, "GangBroken", message, kind=loss.cause)
        if self.policy != "restart":
            return
        if breakage.to_delete and not breakage.replan:  # a re-plan's replacements join the running gang
            self._restarting.add(loss.gang_key)
            if self.advice is not None:
                self.advice.restarting(f"{loss.gang_key[0]}/{loss.gang_key[1]}", breakage.to_delete)
        why = (f"ganggate: gang {loss.gang_key[0]}/{loss.gang_key[1]} lost pod {loss.pod_key.split('/', 1)[1]} "
               f"({loss.cause}); restarting the gang whole")
        done = f"gang {loss.gang_key[0]}/{loss.gang_key[1]} lost {loss.pod_key} ({loss.cause}), --on-member-loss=restart"
        for victim in breakage.to_delete:
            if self._deleting.add(victim.uid):
                self.spawn(self._delete(victim.key, victim.uid, why, done))

    def restart_whole(self, key: GangKey, pods: list, why: str) -> None:
        """Restart a gang whole by deleting these released pods, each with an owning controller
        (controller.lifecycle.drain for a cordoned node): its replacements are admitted whole again."""
        pods = [p for p in pods if p.owned]  # never a pod without an owning controller
        if not pods:
            return
        self._restarting.add(key)
        if self.advice is not None:
            self.advice.restarting(f"{key[0]}/{key[1]}", pods)
        done = f"gang {key[0]}/{key[1]} restarted off a cordoned node, --on-node-drain=restart"
        for pod in pods:
            if self._deleting.add(pod.uid):
                self.spawn(self._delete(pod.key, pod.uid, f"ganggate: {why}"[:1024], done))

    async def _delete(self, pod_key: str, uid: str, why: str, done: str) -> None:
        """DisruptionTarget, then the delete (controller.lifecycle.restart), so a Job can ignore it."""
        try:
            if await delete_member(self.core, pod_key, uid, why, metrics=self.metrics, clock=self.clock):
                log.info("deleted %s: %s", pod_key, done)
        except ApiCallError as exc:
            log.warning("deleting %s: %s", pod_key, exc)

    def due_timeouts(self, now: float) -> list[tuple[GangKey, int]]:
        """Gangs past their timeout and not reported yet (from the state's heap of timeouts,
        core.tallies; it may run in a round's worker thread)."""
        skip = [k for k, created in list(self._timed_out.items())
                if k in self.state.gangs and self.state.gangs[k].created == created]
        return self.state.tallies.timed_out(self.state, now, skip)  # O(gangs past their timeout)

    def report_timeouts(self, found: list[tuple[GangKey, int]]) -> None:
        """One GangTimedOut Event and a WARNING per gang found by `due_timeouts`."""
        for key in [k for k in self._timed_out if k not in self.state.gangs]:
            del self._timed_out[key]
        for key, timeout in found:
            gang = self.state.gangs.get(key)
            if gang is None:
                continue
            self._timed_out[key] = gang.created
            pods = sorted(gang.live_pods(), key=lambda p: (p.created, p.key))
            message = (f"gang {key[0]}/{key[1]} has waited more than {timeout}s "
                       f"(scheduling.k8s.io/group-timeout-seconds) and is still {gang.state}; nothing is deleted")
            log.warning("GangTimedOut %s/%s: %s", *key, message)
            self.metrics.timeouts.inc()
            if pods:
                self.events.emit(pods[0], "GangTimedOut", message, log_it=False)
                self.owner_events.tell(key, pods, "GangTimedOut", message)
