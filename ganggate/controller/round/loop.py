"""The gate controller's async shell: informers in, decisions out, releases, events, metrics.

Two informers keep the pure `ClusterState` in step with the API server. After events (at most
one round per `debounce_seconds`), the leader runs the core's `decide()` in a worker thread
(controller.round.offloop: the changes that arrive meanwhile are held and applied after the
round, so the planner never sees the state change under it), and its `Releases`
(controller.release.releases) promise each decision's placement in the state (before the first
patch) and release it. A gang whose release is in flight is not re-decided until the release has
finished and its effect is seen in the watch; a release cut short (crash, lost leadership,
exhausted retries) is finished by the core's roll-forward decision in a later round, under the
same decision id. Released pods that do not bind in time are controller.lifecycle.bindtimeout's;
the settings are controller.config's. Time comes from one clock (ganggate.kube.clock): the wall
clock, or a replay's simulated one; a round is also due when a deadline falls
(controller.round.timers). Only the lease keeps to real time (LeaderElector takes a clock of its
own, the wall clock by default).

`stop()` (SIGTERM, SIGINT) is a clean stop: no new round, releases not yet validated are not
applied, releases being applied get `shutdown_grace_seconds` to finish, then the lease is given up.

Why this module is long: it is where the shell's parts meet (informers, rounds, releases,
preemption, member loss); each part's logic lives in a module of its own, hooked in by a line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

from ganggate.controller.autoscaling.placeholders import Placeholders
from ganggate.controller.autoscaling.provisioner import Provisioner
from ganggate.controller.config import ControllerConfig, card_policy_named, whole_gpu_policy_named
from ganggate.controller.lifecycle.bindtimeout import BindTimeouts
from ganggate.controller.lifecycle.memberloss import attach_lifecycle
from ganggate.controller.lifecycle.preemptor import Preemptor
from ganggate.controller.release.dra_hold import DeviceHolder
from ganggate.controller.release.patches import Releaser
from ganggate.controller.release.releases import Releases
from ganggate.controller.reporting.bypass import BypassTracker, describe
from ganggate.controller.reporting.events import EventRecorder
from ganggate.controller.reporting.excess import ExcessReporter
from ganggate.controller.reporting.metrics import Metrics, serve_metrics
from ganggate.controller.reporting.topology_view import describe_levels, levels_annotation
from ganggate.controller.reporting.waitreport import WaitReport
from ganggate.controller.round.collector import Collector
from ganggate.controller.round.dra import DraWatches
from ganggate.controller.round.informer import Informer
from ganggate.controller.round.offloop import ChangeBuffer, plan, plan_in_thread, share_the_gil
from ganggate.core.incremental import IncrementalRounds
from ganggate.core.placement.explain import plural
from ganggate.core.policy.preemption import PreemptionOptions
from ganggate.core.state.cluster import ClusterState, NodeInfo, PodInfo
from ganggate.core.state.letgo import let_go
from ganggate.kube.calls import Backoff
from ganggate.kube.clock import WALL, Clock
from ganggate.kube.leader import LeaderElector

log = logging.getLogger(__name__)


class Controller:
    """Releases whole gangs when they fit; see the module docstring."""

    def __init__(self, api_client: Any, config: ControllerConfig, clock: Clock = WALL) -> None:
        from kubernetes_asyncio import client

        config.validate()
        self.config = config
        self.clock = clock
        self.api_client = api_client
        self.identity = config.identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.core = client.CoreV1Api(api_client)
        self.metrics = Metrics()
        self.state = ClusterState(scheduler_names=tuple(config.scheduler_names), max_pod_num=config.max_pod_num,
                                  bind_timeout_seconds=config.bind_timeout_seconds,
                                  topology_levels=config.topology_levels)
        self.events = EventRecorder(self.core, rate=config.event_rate, burst=int(config.event_rate * 4),
                                    metrics=self.metrics, host=self.identity, clock=clock)
        # the waiting gangs' Events: controller.reporting.waitreport
        self.waits = WaitReport(on_hold=self.metrics.hold_weighed, settle_seconds=config.incomplete_settle_seconds)
        self.notifier = self.waits.notifier
        self.card_policy = card_policy_named(config.card_policy)  # GPU sharing: core.gpushare
        self.whole_gpu_policy = whole_gpu_policy_named(config.card_policy)
        # Rounds that re-plan only what changed since the last (core.incremental), or full ones.
        self.incremental = IncrementalRounds(
            starvation_seconds=config.starvation_seconds, blind_seconds=config.starvation_blind_seconds,
            card_policy=self.card_policy, whole_gpu_policy=self.whole_gpu_policy,
        ) if config.rounds == "incremental" else None
        self.releaser = Releaser(self.core, max_in_flight=config.max_in_flight, metrics=self.metrics,
                                 backoff=Backoff(base=0.05, cap=5.0, attempts=12))
        self.releaser.should_continue = self._may_act
        self.releaser.may_apply = lambda: not self._stopping
        self.releaser.nominate = config.nominate
        # A pinned release's DRA claims allocated on their planned nodes before its gates go.
        self.releaser.devices = DeviceHolder(api_client, self.state, self.metrics)
        self.bind_timeouts = BindTimeouts(self.core, self.state, self.events, self.metrics,
                                          action=config.on_bind_timeout,
                                          timeout_seconds=config.bind_timeout_seconds, spawn=self._spawn)
        self.preemptor = None if config.preemption == "off" or config.policy != "plan" else Preemptor(
            self.core, client.PolicyV1Api(api_client), self.state, self.events, self.metrics,
            options=PreemptionOptions(bare_pods=config.preempt_bare_pods, ordinary_pods=config.preempt_ordinary_pods),
            timeout_seconds=config.preemption_timeout_seconds, spawn=self._spawn, may_act=self._may_act,
            capacity=self._kept_capacity)
        self.provisioner = None if config.autoscaling != "provisioning-request" else Provisioner(
            self.core, client.CustomObjectsApi(api_client), self.state, self.events,
            provisioning_class=config.provisioning_class, spawn=self._spawn, may_act=self._may_act)
        self.placeholders = None if config.autoscaling != "placeholders" else Placeholders(
            self.core, client.SchedulingV1Api(api_client), self.state, self.events, release=self._start_release,
            spawn=self._spawn, may_act=self._may_act)
        self.lifecycle = attach_lifecycle(self)  # member loss, timeouts, budgets: controller.lifecycle.memberloss
        self.waits.owners = self.lifecycle.owner_events  # the gang's Events on its Job: reporting.ownerevents
        self.bypass = BypassTracker(config.scheduler_names, settle_seconds=config.bypass_settle_seconds)
        self.collector = Collector()  # the picture kept out of the garbage collector's way (controller.round.collector)
        self.excess = ExcessReporter(self.events)  # pods beyond group-pod-num: controller.reporting.excess
        # No store of objects besides the state (issue #11): a list is read page by page into
        # NodeInfo and PodInfo, and replaces its kind in the state.
        max_pod_num = config.max_pod_num
        self.nodes = Informer(self.core.list_node, "nodes", on_list=self._relist_nodes,
                              on_event=self._on_node_event, metrics=self.metrics,
                              convert=NodeInfo.from_node, keep_store=False, freeze_pages=True)
        self.pods = Informer(self.core.list_pod_for_all_namespaces, "pods", on_list=self._relist_pods,
                             on_event=self._on_pod_event, metrics=self.metrics,
                             convert=lambda pod: PodInfo.from_pod(self._project(pod), max_pod_num), keep_store=False,
                             freeze_pages=True)
        self.podgroups: Any = None  # a PodGroupSource once run() finds PodGroups served (controller.round.podgroups)
        # DeviceClasses, ResourceSlices, ResourceClaims and their templates: DRA devices (controller.round.dra)
        self.dra = DraWatches(api_client, lambda *a: self.state.apply_dra(*a), lambda *a: self._changes.apply(*a),
                              lambda: self._poke(), self.metrics)
        self.leader: LeaderElector | None = None
        if config.leader_election:
            self.leader = LeaderElector(
                client.CoordinationV1Api(api_client), name=config.lease_name, namespace=config.lease_namespace,
                identity=self.identity, lease_duration=config.lease_duration_seconds,
                retry_period=config.renew_seconds, metrics=self.metrics, on_change=lambda _: self._poke(),
                annotations=levels_annotation(config.topology_levels),  # `ganggate status` reads them
                # The lease stays on real time whatever the controller's clock: it proves a live
                # process to the other replicas, and its renewals are real requests; on a
                # simulated clock that jumps hours a leader would lose it at every jump.
            )
        self.metrics_port: int | None = None  # the bound port once serving
        self.rounds = 0
        self._dirty: asyncio.Event | None = None
        self._release_tasks: set[asyncio.Task] = set()
        self._last_loop = time.monotonic()
        self._held = False
        self._changes = ChangeBuffer()  # holds state changes while a round plans off the loop
        # A round's decisions carried out: the room promised, the patches, the echo (release.releases)
        self.releases = Releases(self.state, config, self.releaser, self.metrics, self.events, self._changes,
                                 provisioner=self.provisioner, owner_events=self.lifecycle.owner_events,
                                 spawn=self._spawn, poke=self._poke, stopping=lambda: self._stopping)
        self.releaser.confirm = self.releases.confirm_plan
        # Held by whatever reads the whole state in a worker thread (a round, a relist's rebuild):
        # one at a time, each holding the changes that arrive meanwhile (self._changes).
        self._exclusive = asyncio.Lock()
        self._last_pass = float("-inf")  # time.monotonic() of the last pass (a round or the gauges)
        self._timer: asyncio.Task | None = None  # wakes the loop when a deadline falls (timers)
        self._timer_due: float | None = None
        self._stopping = False
        self._stop_requested: asyncio.Event | None = None
        if self.leader is None:
            self.metrics.leader.set(1)

    # ---- status --------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.nodes.synced and self.pods.synced and self.dra.synced

    @property
    def is_leader(self) -> bool:
        return self.leader is None or self.leader.is_leader

    def _may_act(self) -> bool:
        return self.is_leader

    def _kept_capacity(self) -> Any:
        """The incremental rounds' Capacity brought up to date (the preemption search reads it
        instead of building one from the whole state), or None."""
        return self.incremental.capacity_now(self.state) if self.incremental is not None else None

    def ready(self) -> bool | str:
        """True when synced and leading; else why not (the /readyz body)."""
        if not self.synced:
            return "informers not synced"
        if self._stopping:
            return "stopping"
        if self.leader is not None and not self.leader.is_leader:
            return self.leader.not_leading_reason()
        return True

    def stop(self) -> None:
        """Ask `run` for a clean stop (a second call stops releases in flight at once)."""
        if self._stop_requested is None:
            return
        if self._stop_requested.is_set():
            log.warning("stopping now: abandoning %s in flight (the next leader rolls them forward)",
                        plural(len(self._release_tasks), "release"))
            for task in list(self._release_tasks):
                task.cancel()
            return
        self._stop_requested.set()

    @property
    def idle(self) -> bool:
        """True when no round is due and no release is in flight (a driver's "settled")."""
        dirty = self._dirty is not None and self._dirty.is_set()
        return not dirty and not self._changes.planning and not self.releases.in_flight and not self._release_tasks

    def hold(self) -> None:
        """Run no decision round until `resume` (a replay lets one instant's changes land first,
        so that everything that happens at one simulated instant is decided on together)."""
        self._held = True

    def resume(self) -> None:
        """Undo `hold`, with a round for what happened meanwhile."""
        self._held = False
        self._poke()

    def healthy(self) -> bool:
        return time.monotonic() - self._last_loop < max(10.0, 5 * self.config.tick_seconds)

    # ---- informer callbacks --------------------------------------------------------------

    def _poke(self) -> None:
        if self._dirty is not None:
            self._dirty.set()

    def _on_node_list(self, nodes: list[NodeInfo]) -> None:
        # Applied in order with the events (held during a round): the pods kept are the ones
        # the events before this list made, as an informer's store would hold them.
        self._changes.apply(self._replace, nodes, None)
        self._poke()

    def _on_pod_list(self, pods: list[PodInfo]) -> None:
        self._changes.apply(self._replace, None, pods)
        self._poke()

    async def _relist_nodes(self, nodes: list[NodeInfo]) -> None:
        await self._relist(nodes, None)

    async def _relist_pods(self, pods: list[PodInfo]) -> None:
        await self._relist(None, pods)

    async def _relist(self, nodes: list[NodeInfo] | None, pods: list[PodInfo] | None) -> None:
        """A relist's picture rebuilt in a worker thread (with --planning=thread), the changes that
        arrive meanwhile held and applied after it, in order: at 100,000 pods the rebuild takes
        seconds, which on the loop would stall every watch, lease renewal and release."""
        if self.config.planning != "thread":
            self._changes.apply(self._replace, nodes, pods)
            self._poke()
            return
        async with self._exclusive:
            self._changes.planning = True
            try:
                state, bypass = self.state, self.bypass

                def rebuild() -> Any:
                    new = state.rebuilt(nodes, pods)
                    bypass.reset(new.pods.values())
                    return new

                new = await asyncio.to_thread(rebuild)
                old = dict(self.state.__dict__)  # the old picture, let go of off the loop (below)
                self.state.adopt(new)
                del new
                self.collector.synced()  # (see _replace)
            except BaseException:
                self._changes.flush()
                raise
            await self._changes.drain()
        self._poke()
        await asyncio.to_thread(let_go, old)

    def _replace(self, nodes: list[NodeInfo] | None, pods: list[PodInfo] | None) -> None:
        """A relist of one kind: the picture rebuilt with it and the other kind as it is."""
        self.state.replace(nodes, pods)
        self.bypass.reset(self.state.pods.values())
        # The picture a relist builds is long-lived: out of the collector's way (gc.freeze), else
        # every full collection walks all of it, holding the GIL for hundreds of milliseconds at
        # 20,000 nodes and stalling the loop whichever thread plans (bench/bench_loop_stall.py).
        self.collector.synced()

    def _on_node_event(self, kind: str, node: dict) -> None:
        self._changes.apply(self._apply_node, kind, node)
        self._poke()

    def _apply_node(self, kind: str, node: dict) -> None:
        self.state.apply_node(kind, node)
        self.collector.churned()

    def _project(self, pod: dict, kind: str = "") -> dict:
        """A PodGroup's pod as a member of its gang (controller.round.podgroups); others as they are."""
        return pod if self.podgroups is None else self.podgroups.project(pod, kind)

    def _on_pod_event(self, kind: str, pod: dict) -> None:
        self._changes.apply(self._apply_pod, kind, self._project(pod, kind))
        self._poke()

    def _apply_pod(self, kind: str, pod: dict) -> None:
        self.state.apply_pod(kind, pod)
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        self.bypass.update(key, None if kind == "DELETED" else self.state.pods.get(key))
        if kind == "DELETED":
            self.events.forget((pod.get("metadata") or {}).get("uid") or "")
        self.collector.churned()  # the young generation kept small (controller.round.collector)

    # ---- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """Run informers, leader election, events and the decision loop until cancelled."""
        if self.config.planning == "thread":
            share_the_gil()
        self._dirty = asyncio.Event()
        self._stop_requested = asyncio.Event()
        runner = None
        if self.config.metrics_port is not None:
            runner, self.metrics_port = await serve_metrics(
                self.metrics, self.config.metrics_port, self.healthy, self.ready, host=self.config.metrics_host
            )
        from ganggate.controller.round.podgroups import start as start_podgroups

        podgroups = await start_podgroups(self)  # before the pods are listed
        tasks = [asyncio.create_task(c) for c in (self.nodes.run(), self.pods.run(), self.events.run(),
                                                   self._loop(), self.dra.run())] + ([podgroups] if podgroups else [])
        if self.leader is not None:
            tasks.append(asyncio.create_task(self.leader.run()))
        if self.lifecycle.protection is not None:  # every PodDisruptionBudget: controller.lifecycle.protection
            tasks.append(asyncio.create_task(self.lifecycle.protection.informer.run()))
        log.info("controller %s started (policy=%s placement=%s leader_election=%s%s); topology levels: %s",
                 self.identity, self.config.policy, self.config.placement, self.config.leader_election,
                 f" lease={self.config.lease_namespace}/{self.config.lease_name}" if self.leader else "",
                 describe_levels(self.config.topology_levels))
        stopper = asyncio.create_task(self._stop_requested.wait())
        self.collector.start()  # no full collection of the garbage collector's own accord (controller.round.collector)
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            if stopper in done:
                await self._drain()
            else:
                for task in done:
                    task.result()  # a component failed: let its error out
        finally:
            stopper.cancel()
            if self._timer is not None:
                self._timer.cancel()
            # gather() has already cancelled its children when we were cancelled; a second
            # cancel would interrupt their clean-up (giving the lease up).
            for task in tasks + list(self._release_tasks):
                if not task.done() and not task.cancelling():
                    task.cancel()
            await asyncio.gather(*tasks, *self._release_tasks, return_exceptions=True)
            if runner is not None:
                await runner.cleanup()
            self.collector.stop()
            if stopper.done() and not stopper.cancelled():
                log.info("controller %s stopped", self.identity)

    async def _drain(self) -> None:
        """A clean stop: no new round or release; releases being applied finish within the grace."""
        self._stopping = True
        grace = self.config.shutdown_grace_seconds
        log.info("stopping: %s in flight may finish within %gs; then the lease is given up",
                 plural(len(self._release_tasks), "release"), grace)
        try:
            async with asyncio.timeout(grace):
                while self._release_tasks:
                    await asyncio.gather(*self._release_tasks, return_exceptions=True)
        except TimeoutError:
            log.warning("stopping: %s not finished within %gs; the next leader rolls them forward",
                        plural(len(self._release_tasks), "release"), grace)

    async def _loop(self) -> None:
        assert self._dirty is not None
        while True:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that comes as the
            # event is set (CPython gh-86296), and run() would then wait for this loop forever.
            try:
                async with asyncio.timeout(self.config.tick_seconds):
                    await self._dirty.wait()
            except TimeoutError:
                pass
            # At most one round per debounce interval; the first after a quiet spell at once (a
            # gang's last pod is released without waiting), a burst's changes batched.
            # A pass that makes no round (a standby, held or stopping controller) counts too:
            # else a standby would refresh its gauges once per watch event.
            wait = self._last_pass + self.config.debounce_seconds - time.monotonic()
            await asyncio.sleep(max(0.0, wait))
            self._dirty.clear()
            self._last_loop = self._last_pass = time.monotonic()
            if self._held or self._stopping or not self.synced or not self.is_leader:
                if self.synced:
                    await self._gauges()
                continue
            try:
                if self.config.planning == "thread":
                    await self.round_off_loop(self.clock.now())
                else:
                    self.round(self.clock.now())
            except Exception:  # a bug in one round must not stop the controller
                log.exception("decision round failed")

    def round(self, now: float) -> None:
        """One decision round on the event loop: decide, promise and start releases, report
        waits and timeouts."""
        self._before_round(now)
        started = time.perf_counter()
        decisions, waitings, due = plan(self.state, now, **self._plan_settings())
        self.metrics.decide_seconds.observe(time.perf_counter() - started)
        self._after_round(decisions, waitings, due, now)
        self.collector.settle()  # what the watch and the round left alive, frozen (controller.round.collector)

    async def round_off_loop(self, now: float) -> None:
        """`round`, with `decide()` in a worker thread: the loop stays free while it plans, and
        the state changes that arrive meanwhile are applied after the round. A leader whose
        lease lapsed while it planned (or a controller told to stop) acts on nothing."""
        async with self._exclusive:  # (not while a relist is rebuilt)
            await self._round_off_loop(now)

    async def _round_off_loop(self, now: float) -> None:
        self._before_round(now, timeouts=False, budgets=False)
        started = time.perf_counter()
        self._changes.planning = True
        timed_out: list[Any] = []
        protection = self.lifecycle.protection
        budgets = protection.snapshot() if protection is not None else None
        budget_plans: list[Any] = []

        def also() -> None:  # more reads of the whole state, in the same thread
            timed_out.extend(self.lifecycle.due_timeouts(now))
            self._update_gauges()
            if protection is not None and budgets is not None:  # the budgets' pass: controller.lifecycle.protection
                budget_plans.append(protection.plan(now, budgets))

        try:
            decisions, waitings, due = await plan_in_thread(self.state, now, then=also, **self._plan_settings())
            self.metrics.decide_seconds.observe(time.perf_counter() - started)
            if self._stopping or not self.is_leader:
                log.info("round planned but not acted on: %s", "stopping" if self._stopping else "not leading")
            else:
                self.lifecycle.report_timeouts(timed_out)
                if protection is not None and budget_plans:
                    protection.act(budget_plans[0])
                await self._start_releases_in_slices(decisions, now)
                if self.preemptor is not None:  # its search in a worker thread too (the state's changes still held)
                    found = await asyncio.to_thread(self.preemptor.search, waitings, now)
                    waitings = self.preemptor.act(waitings, found, now)
                waitings = self._after_round(decisions, waitings, due, now, gauges=False, report=False,
                                             released=True)  # (the thread did the gauges); the waiting
                # report lets the loop run between slices of it
                await self.waits.report_in_slices(waitings, now, self.state.gangs, self._emit_waiting)
        except BaseException:
            self._changes.flush()  # at once: nothing held may be lost, even when cancelled
            raise
        await self._changes.drain()
        self.collector.settle()  # what the watch and the round left alive, frozen (controller.round.collector)

    async def _gauges(self) -> None:
        """Update the gauges (the state's tallies: cheap, on the loop)."""
        self._update_gauges()

    def _plan_settings(self) -> dict[str, Any]:
        return {"policy": self.config.policy, "starvation_seconds": self.config.starvation_seconds,
                "blind_seconds": self.config.starvation_blind_seconds,
                "timed_out": self.lifecycle.timed_out_gangs(),
                "card_policy": self.card_policy, "whole_gpu_policy": self.whole_gpu_policy,
                "rounds": self.incremental, "node_lost_after": self.config.node_lost_after_seconds}

    def _before_round(self, now: float, timeouts: bool = True, budgets: bool = True) -> None:
        self.rounds += 1
        self.lifecycle.handle(now, timeouts, budgets)  # first: a gang being restarted is not rolled forward

    def _start_releases(self, decisions: list[Any], now: float) -> None:
        """Start the round's releases (their promises are made at once)."""
        for _ in self._release_steps(decisions, now):
            pass

    async def _start_releases_in_slices(self, decisions: list[Any], now: float, slice_seconds: float = 0.002) -> None:
        """`_start_releases`, letting the event loop run every `slice_seconds`: the first round
        after a start can release thousands of gangs (a promise per pod)."""
        deadline = time.perf_counter() + slice_seconds
        for _ in self._release_steps(decisions, now):
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + slice_seconds

    def _release_steps(self, decisions: list[Any], now: float) -> Iterator[None]:
        for decision in decisions:
            if decision.gang_key in self.releases.in_flight or not decision.placement \
                    or self.lifecycle.restarting(decision.gang_key):
                continue
            self._start_release(decision, now)
            yield

    def _start_release(self, decision: Any, now: float) -> None:
        """Promise one decision's room and start its release (release.releases)."""
        self.releases.start(decision, now)

    def _after_round(self, decisions: list[Any], waitings: list[Any], due: float | None, now: float,
                     gauges: bool = True, report: bool = True, released: bool = False) -> list[Any]:
        """Act on a round: releases, a preemption, the reports, the timers; returns the waitings
        (with the preemption search's notes), to report when `report` is False. `released`:
        the caller started the releases and ran the preemption search already."""
        if not released:
            self._start_releases(decisions, now)
            if self.preemptor is not None:  # after the releases' promises: controller.lifecycle.preemptor
                waitings = self.preemptor.round(waitings, now)
        if self.provisioner is not None:  # ask cluster-autoscaler for the room: controller.autoscaling.provisioner
            self.provisioner.round(waitings, now)
        if self.placeholders is not None:  # or make it add nodes for placeholders: controller.autoscaling.placeholders
            self.placeholders.round(waitings, now, {d.gang_key for d in decisions})
        if report:
            self._report_waiting(waitings, now)
        self.bind_timeouts.handle_expired(now)
        self._report_bypassed()
        self.excess.report(self.state)
        if gauges:
            self._update_gauges()
        self._wake_at(due)
        return waitings

    def _wake_at(self, due: float | None) -> None:
        """Have a round when `due` comes on the clock (controller.round.timers), unless one is set
        for then already; a replay's simulated clock jumps there."""
        if due == self._timer_due and self._timer is not None and not self._timer.done():
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_due = None, due
        if due is not None and self._dirty is not None:  # only under run()
            self._timer = asyncio.get_running_loop().create_task(self._sleep_then_poke(due))

    async def _sleep_then_poke(self, due: float) -> None:
        await self.clock.sleep_until(due)
        self._timer_due = None
        self._poke()

    def _update_gauges(self) -> None:
        self.metrics.observe_cluster(self.state, set(self.bypass.gangs))

    def _report_bypassed(self) -> None:
        """Say once per gang that some of its pods bypassed the gate; never touch those pods."""
        for report in self.bypass.due(self.state.gangs):
            message = describe(report)
            self.metrics.not_gated.inc()
            log.warning("GangNotGated %s: %s", report.gang, message)
            for pod in report.pods:
                self.events.emit(pod, "GangNotGated", message, log_it=False)

    def _spawn(self, work: Any) -> asyncio.Task:
        """Run a release or a deletion as a task that a clean stop waits for."""
        task = asyncio.create_task(work)
        self._release_tasks.add(task)
        task.add_done_callback(self._release_tasks.discard)
        return task

    # ---- waiting ------------------------------------------------------------------------

    def _report_waiting(self, waitings: list[Any], now: float) -> None:
        """GangWaiting / GangUnschedulable Events for what is new (controller.reporting.waitreport)."""
        self.waits.report(waitings, now, self.state.gangs, self._emit_waiting)

    def _emit_waiting(self, pod: Any, reason: str, message: str) -> None:
        self.events.emit(pod, reason, message, log_it=False)
        if self.podgroups is not None:
            self.podgroups.waiting(pod, reason, message)  # its PodGroup's condition, if it has one
