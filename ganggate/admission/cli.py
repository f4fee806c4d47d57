"""`ganggate webhook`: serve the mutating admission webhook over HTTPS until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ganggate.contract import DEFAULT_MAX_POD_NUM

if TYPE_CHECKING:
    from ganggate.admission.server import WebhookConfig


DEFAULT_METRICS_PORT = 8081  # not the controller's 8080, so both can run on one machine


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0 to 65535)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `webhook` subcommand."""
    parser = subparsers.add_parser(
        "webhook",
        help="serve the mutating admission webhook (gates gang pods)",
        description=(
            "Serve POST /mutate (AdmissionReview admission.k8s.io/v1), /healthz and /readyz over "
            "HTTPS, and /metrics, /healthz, /readyz over plain HTTP on --metrics-port. Pods carrying "
            "valid gang annotations get the scheduling gate scheduling.k8s.io/group-gate; invalid "
            "ones are denied. New certificate files on disk are picked up without a restart. On "
            "SIGTERM or SIGINT it stops accepting connections, lets the reviews in flight finish "
            "(at most --shutdown-grace-seconds) and exits 0."
        ),
    )
    parser.add_argument("--cert-dir", metavar="DIR",
                        help="directory holding tls.crt and tls.key (as `certs generate` or a TLS Secret writes them)")
    parser.add_argument("--cert-file", help="PEM serving certificate (chain); instead of --cert-dir")
    parser.add_argument("--key-file", help="PEM private key of the serving certificate; instead of --cert-dir")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    parser.add_argument("--port", type=_port, default=8443, help="HTTPS port for /mutate (default: 8443)")
    parser.add_argument("--metrics-port", type=_port, default=DEFAULT_METRICS_PORT,
                        help=f"plain-HTTP port for /metrics, /healthz, /readyz (default: {DEFAULT_METRICS_PORT}; "
                        "0: any free port)")
    parser.add_argument("--metrics-host", help="address of the metrics port (default: --host)")
    parser.add_argument("--shutdown-grace-seconds", type=_seconds, default=10.0, metavar="SECONDS",
                        help="on SIGTERM, how long reviews in flight may take to finish (default: 10)")
    parser.add_argument(
        "--max-pod-num",
        type=_positive_int,
        default=DEFAULT_MAX_POD_NUM,
        help=f"largest accepted scheduling.k8s.io/group-pod-num (default: {DEFAULT_MAX_POD_NUM})",
    )
    parser.add_argument(
        "--scheduler-name",
        action="append",
        dest="scheduler_names",
        metavar="NAME",
        help="a spec.schedulerName ganggate serves; repeatable (default: default-scheduler)",
    )
    parser.add_argument(
        "--shared-resource",
        action="append",
        dest="shared_resources",
        metavar="NAME",
        help="a shared GPU resource whose pods are gated, as gangs of one when they have no gang annotations "
        "(repeatable; default: aliyun.com/gpu-mem; --shared-resource= none). The MutatingWebhookConfiguration's "
        "matchConditions must send such pods too: see docs/gpu-sharing.md",
    )
    from ganggate.podgroups import add_arguments as add_podgroup_arguments

    add_podgroup_arguments(parser)
    parser.add_argument(
        "--cert-reload-seconds",
        type=float,
        default=5.0,
        help="how often to check the certificate files for a new certificate (default: 5)",
    )
    parser.set_defaults(func=run)


def _shared(values: list[str] | None) -> tuple[str, ...]:
    """--shared-resource values: the default when none; an empty value alone means none."""
    from ganggate.contract import DEFAULT_SHARED_RESOURCES

    if values is None:
        return DEFAULT_SHARED_RESOURCES
    return tuple(v for v in values if v)


def cert_paths(args: argparse.Namespace) -> tuple[str, str]:
    """The certificate and key files from --cert-dir or --cert-file/--key-file; ValueError if unclear."""
    import os

    if args.cert_dir and (args.cert_file or args.key_file):
        raise ValueError("give either --cert-dir or --cert-file and --key-file, not both")
    if args.cert_dir:
        return os.path.join(args.cert_dir, "tls.crt"), os.path.join(args.cert_dir, "tls.key")
    if not (args.cert_file and args.key_file):
        raise ValueError("the serving certificate is needed: --cert-dir DIR, or --cert-file and --key-file")
    return args.cert_file, args.key_file


def run(args: argparse.Namespace) -> int:
    """Serve until a termination signal arrives."""
    import asyncio
    import sys

    from ganggate.admission.server import WebhookConfig

    try:
        cert_file, key_file = cert_paths(args)
    except ValueError as exc:
        print(f"ganggate webhook: {exc}", file=sys.stderr)
        return 2
    config = WebhookConfig(
        cert_file=cert_file,
        key_file=key_file,
        host=args.host,
        port=args.port,
        max_pod_num=args.max_pod_num,
        scheduler_names=tuple(args.scheduler_names or ("default-scheduler",)),
        cert_reload_seconds=args.cert_reload_seconds,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        shutdown_grace_seconds=args.shutdown_grace_seconds,
        shared_resources=_shared(args.shared_resources),
        podgroups=args.podgroups,
        native_gang_scheduling=args.native_gang_scheduling,
    )
    try:
        return asyncio.run(serve(config))
    except (OSError, ValueError) as exc:  # a missing or broken certificate, a port in use
        print(f"ganggate webhook: cannot serve: {exc}", file=sys.stderr)
        return 1


async def serve(config: WebhookConfig) -> int:
    """Start the webhook, wait for SIGTERM or SIGINT, then stop gracefully."""
    import asyncio
    import logging
    import signal

    from ganggate.admission.server import start_webhook

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = await start_webhook(config)
    print(f"ganggate webhook listening on {running.url}, metrics on {running.metrics_url}", flush=True)
    try:
        await stop.wait()
        logging.getLogger("ganggate.webhook").info(
            "stopping: no new connections, reviews in flight get up to %gs", config.shutdown_grace_seconds)
    finally:  # a second signal while draining changes nothing: the grace is bounded already
        await running.close()
    return 0
