"""The webhook's async shell: aiohttp apps, metrics, serving (TLS: ganggate.admission.tls).

`make_app(config)` builds the admission application (/mutate, /healthz, /readyz);
`make_metrics_app(metrics, health)` the plain-HTTP one (/metrics, /healthz, /readyz).
`start_webhook(config)` serves the first over HTTPS on a host/port (port 0 picks a free one) and,
when `config.metrics_port` is set, the second on its own port, so the CLI, the demo and tests can
run the webhook in-process. `RunningWebhook.close()` stops listening, lets the reviews in flight
finish (at most `shutdown_grace_seconds`), then returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from ganggate.admission.review import (
    DENIED,
    MALFORMED,
    OUTCOMES,
    MalformedReview,
    ReviewPolicy,
    decide,
    describe,
    parse_body,
    response_for,
)
from ganggate.admission.tls import CertReloader, file_stamp, make_ssl_context
from ganggate.contract import DEFAULT_MAX_POD_NUM, DEFAULT_SCHEDULER_NAMES, DEFAULT_SHARED_RESOURCES

log = logging.getLogger("ganggate.webhook")

# An AdmissionReview carries the pod twice on UPDATE; objects in etcd are at most ~1.5 MiB.
MAX_BODY_BYTES = 8 * 1024 * 1024
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class WebhookConfig:
    """Everything the webhook server needs; cert_file/key_file None serves plain HTTP (tests only)."""

    cert_file: str | None = None
    key_file: str | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    max_pod_num: int = DEFAULT_MAX_POD_NUM
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    cert_reload_seconds: float = 5.0
    # Plain-HTTP /metrics, /healthz, /readyz: None serves no such port, 0 picks a free one.
    metrics_port: int | None = None
    metrics_host: str | None = None  # default: host
    # On close: how long reviews in flight may take to finish before they are cut off.
    shutdown_grace_seconds: float = 10.0
    # Shared GPU resources whose pods are gated (as gangs of one without gang annotations).
    shared_resources: tuple[str, ...] = DEFAULT_SHARED_RESOURCES
    # PodGroup pods (ganggate.podgroups): --podgroups and --native-gang-scheduling
    podgroups: str = "auto"
    native_gang_scheduling: bool = False

    @property
    def policy(self) -> ReviewPolicy:
        return ReviewPolicy(max_pod_num=self.max_pod_num, scheduler_names=frozenset(self.scheduler_names),
                            shared_resources=frozenset(self.shared_resources), podgroups=self.podgroups,
                            native_gang_scheduling=self.native_gang_scheduling)


@dataclass
class Metrics:
    """The webhook's Prometheus metrics, in a registry of their own so several apps can coexist."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "ganggate_webhook_requests",
            "AdmissionReview requests answered, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        # Every series exists from the start, at 0; each kept, not looked up per review.
        self.by_outcome = {outcome: self.requests.labels(outcome=outcome) for outcome in OUTCOMES}
        self.latency = Histogram(
            "ganggate_webhook_request_duration_seconds",
            "Time to answer one /mutate request",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cert_reloads = Counter(
            "ganggate_webhook_certificate_reloads",
            "Serving certificate reloads from disk, by result",
            ["result"],
            registry=self.registry,
        )


@dataclass
class Health:
    """Readiness shared by the admission and the metrics apps, and the reviews in flight."""

    ready: bool = False
    in_flight: int = 0
    _idle: asyncio.Event | None = field(default=None, repr=False)

    @contextlib.contextmanager
    def reviewing(self) -> Iterator[None]:
        """Count one review in flight for as long as the block runs."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0 and self._idle is not None:
                self._idle.set()

    async def drained(self) -> None:
        """Return once no review is in flight."""
        while self.in_flight:
            self._idle = asyncio.Event()
            await self._idle.wait()


METRICS_KEY = web.AppKey("metrics", Metrics)
POLICY_KEY = web.AppKey("policy", ReviewPolicy)
HEALTH_KEY = web.AppKey("health", Health)


def _bad_request(message: str) -> web.Response:
    """HTTP 400 with a Status body, as the API server answers a malformed request."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "BadRequest",
            "code": 400, "message": message}
    return web.json_response(body, status=400)


async def handle_mutate(request: web.Request) -> web.Response:
    """POST /mutate: answer one AdmissionReview."""
    with request.app[HEALTH_KEY].reviewing():
        return await _mutate(request)


async def _mutate(request: web.Request) -> web.Response:
    metrics = request.app[METRICS_KEY]
    started = time.perf_counter()
    outcome = MALFORMED
    try:
        try:
            body = await request.read()
            checked = parse_body(body)
            decision = decide(checked["request"], request.app[POLICY_KEY])
        except MalformedReview as exc:
            log.warning("malformed AdmissionReview from %s: %s", request.remote, exc)
            return _bad_request(str(exc))
        outcome = decision.outcome
        if outcome == DENIED:
            log.info("denied %s: %s", describe(checked), decision.message)
        return web.Response(body=orjson.dumps(response_for(checked, decision)), content_type="application/json")
    finally:
        (metrics.by_outcome.get(outcome) or metrics.requests.labels(outcome=outcome)).inc()
        metrics.latency.observe(time.perf_counter() - started)


async def handle_healthz(request: web.Request) -> web.Response:
    """GET /healthz: the process is alive and its event loop answers."""
    return web.Response(text="ok")


async def handle_readyz(request: web.Request) -> web.Response:
    """GET /readyz: ready to answer reviews (started and not shutting down)."""
    if request.app[HEALTH_KEY].ready:
        return web.Response(text="ok")
    return web.Response(text="not ready", status=503)


async def handle_metrics(request: web.Request) -> web.Response:
    """GET /metrics: Prometheus text exposition of this app's registry."""
    data = generate_latest(request.app[METRICS_KEY].registry)
    return web.Response(body=data, headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(config: WebhookConfig, metrics: Metrics | None = None, health: Health | None = None) -> web.Application:
    """The admission application; TLS is the server's business (see start_webhook)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[METRICS_KEY] = metrics or Metrics()
    app[POLICY_KEY] = config.policy
    app[HEALTH_KEY] = shared = health or Health()

    async def on_startup(_: web.Application) -> None:
        shared.ready = True

    async def on_shutdown(_: web.Application) -> None:
        shared.ready = False

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.router.add_post("/mutate", handle_mutate)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    return app


def make_metrics_app(metrics: Metrics, health: Health) -> web.Application:
    """The plain-HTTP application for Prometheus and probes: /metrics, /healthz, /readyz."""
    app = web.Application()
    app[METRICS_KEY] = metrics
    app[HEALTH_KEY] = health
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    return app


@dataclass
class RunningWebhook:
    """A webhook being served; `close()` stops it."""

    runner: web.AppRunner
    port: int
    host: str
    ssl_context: ssl.SSLContext | None
    metrics: Metrics
    health: Health = field(default_factory=Health)
    reloader_task: asyncio.Task | None = None
    metrics_runner: web.AppRunner | None = None
    metrics_port: int | None = None
    metrics_host: str | None = None
    shutdown_grace_seconds: float = 10.0

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{self.metrics_host}:{self.metrics_port}"

    async def close(self) -> None:
        """Turn unready, stop listening, let the reviews in flight finish, then stop the rest.

        aiohttp's own graceful shutdown stops reading from open connections, so a review whose
        body is still arriving would never finish: the connections stay open until the reviews
        in flight are done, or the grace runs out.
        """
        self.health.ready = False
        for site in list(self.runner.sites):
            await site.stop()
        try:
            async with asyncio.timeout(self.shutdown_grace_seconds):
                await self.health.drained()
        except TimeoutError:
            log.warning("%d review(s) still in flight after %gs: cut off", self.health.in_flight,
                        self.shutdown_grace_seconds)
        if self.reloader_task is not None:
            self.reloader_task.cancel()
            try:
                await self.reloader_task
            except asyncio.CancelledError:
                pass
        await self.runner.cleanup()
        if self.metrics_runner is not None:
            await self.metrics_runner.cleanup()

    async def __aenter__(self) -> RunningWebhook:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _serve(app: web.Application, host: str, port: int, context: ssl.SSLContext | None,
                 grace: float) -> tuple[web.AppRunner, int]:
    """Start serving an app; returns its runner and the bound port."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=grace)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context, backlog=512)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        port = server.sockets[0].getsockname()[1]
    return runner, port


async def start_webhook(config: WebhookConfig) -> RunningWebhook:
    """Serve the webhook on config.host/config.port (0: a free port); returns the bound port."""
    metrics = Metrics()
    health = Health()
    app = make_app(config, metrics, health)
    context = None
    stamp = None
    if config.cert_file and config.key_file:
        stamp = file_stamp(config.cert_file, config.key_file)
        context = make_ssl_context(config.cert_file, config.key_file)
    elif config.cert_file or config.key_file:
        raise ValueError("--cert-file and --key-file go together")
    metrics_runner = metrics_port = None
    metrics_host = config.metrics_host or config.host
    if config.metrics_port is not None:
        metrics_runner, metrics_port = await _serve(make_metrics_app(metrics, health), metrics_host,
                                                    config.metrics_port, None, 1.0)
    try:
        runner, port = await _serve(app, config.host, config.port, context, 1.0)
    except BaseException:
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        raise
    running = RunningWebhook(runner=runner, port=port, host=config.host, ssl_context=context, metrics=metrics,
                             health=health, metrics_runner=metrics_runner, metrics_port=metrics_port,
                             metrics_host=metrics_host, shutdown_grace_seconds=config.shutdown_grace_seconds)
    if context is not None and config.cert_file and config.key_file and config.cert_reload_seconds > 0:
        reloader = CertReloader(context, config.cert_file, config.key_file, config.cert_reload_seconds, metrics,
                                stamp)
        running.reloader_task = asyncio.create_task(reloader.run(), name="ganggate-cert-reloader")
    log.info("webhook serving on %s", running.url)
    return running
