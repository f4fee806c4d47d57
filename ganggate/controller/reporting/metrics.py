"""The controller's Prometheus metrics and its small HTTP server (/metrics, /healthz, /readyz).

Each Controller owns its own CollectorRegistry, so that several controllers in one process
(tests, two replicas) do not share or collide on metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

GANG_STATES = ("incomplete", "conflict", "waiting", "partial", "started", "released", "running", "not-gated")
_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
_RELEASE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_GAIN_BUCKETS = (600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600, 3 * 86400, 7 * 86400)


class Metrics:
    """The controller's metrics in a private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gangs = Gauge("ganggate_gangs", "Gangs by state.", ["state"], registry=self.registry)
        self.wait_seconds = Histogram(
            "ganggate_gang_wait_seconds",
            "Time from a gang being complete to its release.",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.release_seconds = Histogram(
            "ganggate_release_duration_seconds",
            "Time to remove the gates of a whole decision (validation and patches).",
            buckets=_RELEASE_BUCKETS,
            registry=self.registry,
        )
        self.api_errors = Counter(
            "ganggate_api_errors_total", "API errors by verb and HTTP code (0 = transport).",
            ["verb", "code"], registry=self.registry,
        )
        self.releases = Counter(
            "ganggate_releases_total", "Decisions released, by kind (new or roll_forward).",
            ["kind"], registry=self.registry,
        )
        self.pods_released = Counter(
            "ganggate_pods_released_total", "Pods whose gate this controller removed.", registry=self.registry
        )
        self.preemptions = Counter(
            "ganggate_preemptions_total", "Preemptions carried out (lower-priority gangs evicted whole).",
            registry=self.registry,
        )
        self.release_failures = Counter(
            "ganggate_release_failures_total", "Decisions whose release did not finish.", registry=self.registry
        )
        self.plans_lost_before_release = Counter(
            "ganggate_plans_lost_before_release_total",
            "Releases given up before any gate went, because pods bound after the plan took its room "
            "(the gang is planned again).", registry=self.registry,
        )
        self.bind_timeouts = Counter(
            "ganggate_bind_timeouts_total", "Released pods not bound within the bind timeout, by action.",
            ["action"], registry=self.registry,
        )
        self.member_losses = Counter(
            "ganggate_gang_member_losses_total",
            "Released gang members lost (that took their gang below min-available or not), by cause.",
            ["cause"], registry=self.registry,
        )
        self.timeouts = Counter(
            "ganggate_gangs_timed_out_total", "Gangs that waited longer than their group-timeout-seconds.",
            registry=self.registry,
        )
        self.events_dropped = Counter(
            "ganggate_events_dropped_total", "Events not sent because the rate limit queue was full.",
            registry=self.registry,
        )
        self.leader = Gauge("ganggate_leader", "1 while this replica is the leader.", registry=self.registry)
        self.gpus_free = Gauge(
            "ganggate_gpus_free", "GPUs free on ready, schedulable nodes (allocatable minus bound and promised).",
            registry=self.registry,
        )
        self.gpus_promised = Gauge(
            "ganggate_gpus_promised", "GPUs promised to pods ganggate released that are not bound yet.",
            registry=self.registry,
        )
        self.gpus_held_idle = Gauge(
            "ganggate_gpus_held_idle", "GPUs of bound pods whose gang is not fully bound yet (held, waiting "
            "for the rest of their gang).", registry=self.registry,
        )
        self.not_gated = Counter(
            "ganggate_gangs_not_gated_total", "Gangs found with pods that bypassed the gate (reported once each).",
            registry=self.registry,
        )
        self.decide_seconds = Histogram(
            "ganggate_decide_seconds", "Time of one decision round of the core.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=self.registry,
        )

        self.hold_gain_seconds = Histogram(
            "ganggate_hold_gain_seconds",
            "Starvation guard: per hold taken for a starving gang, how many seconds sooner it was predicted to "
            "start with the room held than without (30 days: it would not start at all without).",
            buckets=_GAIN_BUCKETS, registry=self.registry,
        )
        self.holds_refused = Counter(
            "ganggate_holds_refused_total",
            "Starvation guard: holds weighed and refused (or let go) because they did not bring the starving "
            "gang's predicted start closer by the margin.", registry=self.registry,
        )

    def hold_weighed(self, waiting: Any) -> None:
        """Count a hold the starvation guard weighed (a Waiting with `hold_gain`): its gain if taken."""
        if waiting.hold_refused:
            self.holds_refused.inc()
        else:
            self.hold_gain_seconds.observe(waiting.hold_gain)

    def set_gang_states(self, counts: Mapping[str, int]) -> None:
        """Set the gangs-by-state gauge; states absent from counts read 0."""
        for state in set(GANG_STATES) | set(counts):
            self.gangs.labels(state=state).set(counts.get(state, 0))

    def observe_cluster(self, state: Any, not_gated: Collection[tuple[str, str]] = ()) -> None:
        """Gangs by state (gangs in not_gated count as not-gated) and the GPU gauges, from a
        ClusterState's tallies (core.tallies: kept by the watch events, so this costs O(not_gated),
        not a walk over every gang and node)."""
        tallies = state.tallies
        counts = dict(tallies.states)
        for key in not_gated:
            gang = state.gangs.get(key)
            if gang is not None:  # a gang with no valid pod has no core gang: counted once below
                counts[gang.state] -= 1
            counts["not-gated"] = counts.get("not-gated", 0) + 1
        self.set_gang_states(counts)
        self.gpus_free.set(tallies.free_gpus // 1000)
        self.gpus_promised.set(tallies.promised_gpus // 1000)
        self.gpus_held_idle.set(tallies.held_idle // 1000)

    def api_error(self, verb: str, code: int) -> None:
        self.api_errors.labels(verb=verb, code=str(code)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def serve_metrics(
    metrics: Metrics,
    port: int,
    healthy: Callable[[], bool],
    ready: Callable[[], bool | str],
    host: str = "0.0.0.0",
) -> tuple[web.AppRunner, int]:
    """Start the metrics/health server; returns (runner, bound port). The caller cleans up the runner.

    ready() answers True when ready, else False or a text saying why (the 503 body)."""
    from aiohttp import web

    async def handle_metrics(_request: web.Request) -> web.Response:
        resp = web.Response(body=metrics.render())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def handle_healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n") if healthy() else web.Response(status=503, text="decision loop stalled\n")

    async def handle_readyz(_request: web.Request) -> web.Response:
        answer = ready()
        if answer is True:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"{answer or 'not ready'}\n")

    app = web.Application()
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        bound = server.sockets[0].getsockname()[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return runner, bound
