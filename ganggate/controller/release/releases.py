"""The controller's releases, from a round's decision to the gates removed: promise the room
first, record the decision on the pods, patch them (release.patches), then wait for the watch
to show the gates gone. `Releases` is one part of the Controller (round.loop), which starts a
release for each decision of a round and skips the gangs whose release is in flight."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ganggate.controller.release.patches import Releaser, ReleaseRequest
from ganggate.core.fit.gpushare import cards_of
from ganggate.core.placement.explain import plural
from ganggate.core.policy.planloss import contesting_pods, lost_nodes, unseen_nominations
from ganggate.kube.calls import ApiCallError, rfc3339

if TYPE_CHECKING:
    from ganggate.controller.autoscaling.provisioner import Provisioner
    from ganggate.controller.config import ControllerConfig
    from ganggate.controller.reporting.events import EventRecorder
    from ganggate.controller.reporting.metrics import Metrics
    from ganggate.controller.reporting.ownerevents import OwnerEvents
    from ganggate.controller.round.offloop import ChangeBuffer
    from ganggate.core.state.cluster import ClusterState
    from ganggate.core.state.pods import PodInfo

log = logging.getLogger(__name__)


def _decision_of_gang(gang: Any) -> dict | None:
    """The decision recorded on the gang's released pods (for a roll-forward), if any."""
    for pod in sorted(gang.pods.values(), key=lambda p: p.key):
        if pod.member and not pod.gated and isinstance(pod.decision, dict) and pod.decision.get("id"):
            return pod.decision
    return None


def _infos(request: ReleaseRequest) -> dict[str, PodInfo]:
    """The request's pods, which are the controller's PodInfos: a release starts from its picture
    (a ReleaseRequest may hold pod objects too, for callers other than the controller)."""
    return cast("dict[str, PodInfo]", request.pods)


class Releases:
    """Starting, applying and confirming releases: each is a task (`spawn`) that promises the
    room in `state` at once, runs the `releaser`'s patches, says so (`events`, `owner_events`),
    and gives the promises back (through `changes`, after a round being planned) when it fails.
    `in_flight`: the gangs whose release has started and not finished."""

    def __init__(self, state: ClusterState, config: ControllerConfig, releaser: Releaser, metrics: Metrics,
                 events: EventRecorder, changes: ChangeBuffer, *, provisioner: Provisioner | None,
                 owner_events: OwnerEvents, spawn: Callable[[Any], Any], poke: Callable[[], None],
                 stopping: Callable[[], bool]) -> None:
        self.state = state
        self.config = config
        self.releaser = releaser
        self.metrics = metrics
        self.events = events
        self.changes = changes  # the Controller's ChangeBuffer
        self.provisioner = provisioner  # (None unless --autoscaling=provisioning-request)
        self.owner_events = owner_events
        self.spawn = spawn  # run as a task that a clean stop waits for
        self.poke = poke  # ask for a round
        self.stopping = stopping  # the controller is stopping cleanly
        self.in_flight: set[tuple[str, str]] = set()

    def start(self, decision: Any, now: float) -> None:
        """Promise the decision's room and start its release (a task)."""
        gang = self.state.gangs.get(decision.gang_key)
        if gang is None:
            return
        if self.provisioner is not None:  # the consume annotations of a provisioned gang
            self.provisioner.annotate(decision)
        recorded = _decision_of_gang(gang) if decision.roll_forward else None
        if recorded is not None:
            decision_id = str(recorded["id"])
            when = str(recorded.get("time") or rfc3339(now))
            count = int(recorded.get("pods") or len(decision.placement))
        else:
            decision_id = uuid.uuid4().hex[:16]
            when = rfc3339(now)
            count = len(decision.placement)
            if gang.complete_since is not None and gang.state == "waiting":
                self.metrics.wait_seconds.observe(max(0.0, now - gang.complete_since))
        # Promise before the first patch, so the next round already counts this capacity.
        placement = dict(decision.placement)  # one copy, the promise's and the release's
        self.state.promise(decision.gang_key, placement, now + self.config.bind_timeout_seconds,
                           cards=cards_of(decision.annotations))
        hostnames = {name: self.state.nodes[name].hostname for name in set(decision.placement.values())
                     if name is not None and name in self.state.nodes}
        request = ReleaseRequest(
            decision_id=decision_id, time=when, gang=f"{decision.gang_key[0]}/{decision.gang_key[1]}",
            pod_count=count, placement=placement,
            pods={k: self.state.pods[k] for k in decision.placement if k in self.state.pods},
            # A pod given a GPU card is pinned even with --placement=free: the card is its node's.
            hostnames=hostnames, pinned=self.config.placement == "pinned" or bool(decision.annotations),
            annotations=dict(decision.annotations),
        )
        self.in_flight.add(decision.gang_key)
        log.info("releasing gang %s: %s, decision %s%s (%s)", request.gang,
                 plural(len(request.placement), "pod"), decision_id, " (roll forward)" if decision.roll_forward else "", decision.reason)
        self.spawn(self._release(decision, request))

    async def _release(self, decision: Any, request: ReleaseRequest) -> None:
        key = decision.gang_key
        started = time.monotonic()
        try:
            outcome = await self.releaser.release(request)
            self.metrics.release_seconds.observe(time.monotonic() - started)
            if outcome.validation_failed and self.stopping():
                log.info("gang %s not released: stopping before its release started", request.gang)
                self._cancel_promises(request.placement)
                return
            if outcome.plan_lost is not None:
                self.metrics.plans_lost_before_release.inc()
                log.info("gang %s not released: %s; nothing applied, planning it again", request.gang, outcome.plan_lost)
                self._cancel_promises(request.placement)
                return
            if outcome.validation_failed:
                self.metrics.release_failures.inc()
                log.warning("gang %s not released: validation failed (%s; vanished: %s); nothing applied",
                            request.gang, outcome.failed, outcome.vanished)
                self._cancel_promises(request.placement)
                return
            self.metrics.releases.labels(kind="roll_forward" if decision.roll_forward else "new").inc()
            if not outcome.complete:
                self.metrics.release_failures.inc()
                log.warning("gang %s: release cut short (%s); it will be rolled forward", request.gang,
                            outcome.failed)
                # Pods still gated lose their promise, so the next round rolls the decision
                # forward instead of waiting for the bind timeout; released ones keep theirs.
                self._cancel_promises(request.placement)
            if outcome.vanished:
                log.warning("gang %s: pods gone before their release: %s", request.gang, ", ".join(outcome.vanished))
            log.info("GangReleased %s: %s released by decision %s", request.gang,
                     plural(len(outcome.released), "pod"), request.decision_id)
            many = request.pod_count > 1
            # The gang's first pod hears it (and its owner, a Job, below), not each pod: every
            # released pod carries the decision (id, node) in its ganggate.io/decision annotation
            # and the scheduler's Scheduled Event names its node, so an Event per pod would only
            # repeat them, at one more API write per pod on the path to Running.
            told = outcome.released
            if told:
                told = [min(told, key=lambda k: (_infos(request)[k].created, k))]
            for pod_key in told:
                node = request.placement.get(pod_key)
                where = (f"{' together, this one' if many else ','} onto node {node}" if node and request.pinned
                         else (" together" if many else ""))
                where += f" in {decision.domain}" if decision.domain else ""
                self.events.emit(request.pods[pod_key], "GangReleased",
                                 f"gang {request.gang} released: {plural(request.pod_count, 'pod')}{where} "
                                 f"(decision {request.decision_id})", log_it=False)
            if outcome.released:  # the owner (a Job) hears it once: controller.reporting.ownerevents
                nodes = sorted({n for k in outcome.released if (n := request.placement.get(k))})
                onto = f" onto {plural(len(nodes), 'node')} ({', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''})" \
                    if nodes and request.pinned else ""
                self.owner_events.tell(
                    decision.gang_key, [request.pods[k] for k in outcome.released], "GangReleased",
                    f"gang {request.gang} released: {plural(request.pod_count, 'pod')}{' together' if many else ''}"
                    f"{onto} (decision {request.decision_id})", kind=request.decision_id)
            await self._await_echo(request, outcome.released)
        except ApiCallError as exc:
            self.metrics.release_failures.inc()
            log.warning("gang %s: release failed: %s; it will be retried or rolled forward", request.gang, exc)
            self._cancel_promises(request.placement)
            await asyncio.sleep(0.5)
        finally:
            self.in_flight.discard(key)
            self.poke()

    def _cancel_promises(self, placement: dict[str, str | None]) -> None:
        """Give back the capacity promised to pods that were not released (after the round
        being planned, if any)."""
        self.changes.apply(self.state.cancel_promises, list(placement))

    async def _await_echo(self, request: ReleaseRequest, released: list[str], limit: float = 30.0) -> None:
        """Wait (bounded) until the watch shows the released pods without their gate."""
        deadline = time.monotonic() + limit
        infos = _infos(request)
        while time.monotonic() < deadline and not self.stopping():
            pending = [k for k in released if (p := self.state.pods.get(k)) is not None and p.gated
                       and p.uid == infos[k].uid]
            if not pending:
                return
            await asyncio.sleep(0.02)

    async def confirm_plan(self, request: ReleaseRequest, nominated: dict[str, str]) -> str | None:
        """The releaser's `confirm`: once the members are nominated, wait (at most
        `confirm_seconds`) until the watch shows the nominations, so that the picture holds every
        pod bound before the scheduler could see them, and until the pods that appeared since
        the plan and could take its room have been tried by the scheduler; then None when the
        plan still holds, else why not. See docs/controller.md, "Released gangs that cannot bind"."""
        deadline = time.monotonic() + self.config.confirm_seconds
        while not self.stopping():
            unseen = unseen_nominations(self.state, nominated)
            untried = contesting_pods(self.state, request.placement)
            if not unseen and not untried:
                break
            if time.monotonic() >= deadline:
                log.info("gang %s: checking its plan after %.1f s with %s not yet shown by the watch and %s "
                         "not yet tried by the scheduler", request.gang, self.config.confirm_seconds,
                         plural(len(unseen), "nomination"), plural(len(untried), "pod"))
                break
            await asyncio.sleep(0.01)
        lost = lost_nodes(self.state, request.placement)
        if not lost:
            return None
        return (f"its plan was lost before the gates went: pods bound after the plan took room it counted on "
                f"(node{'s' if len(lost) > 1 else ''} {', '.join(lost)})")

