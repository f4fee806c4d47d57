"""`ganggate webhook`: serve the mutating admission webhook over HTTPS until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ganggate.contract import DEFAULT_MAX_POD_NUM

if TYPE_CHECKING:
    from ganggate.admission.server import WebhookConfig


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `webhook` subcommand."""
    parser = subparsers.add_parser(
        "webhook",
        help="serve the mutating admission webhook (gates gang pods)",
        description=(
            "Serve POST /mutate (AdmissionReview admission.k8s.io/v1) over HTTPS, plus /healthz, "
            "/readyz and /metrics. Pods carrying valid gang annotations get the scheduling gate "
            "scheduling.k8s.io/group-gate; invalid ones are denied. New certificate files on disk "
            "are picked up without a restart."
        ),
    )
    parser.add_argument("--cert-file", required=True, help="PEM serving certificate (chain)")
    parser.add_argument("--key-file", required=True, help="PEM private key of the serving certificate")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8443, help="port to listen on (default: 8443)")
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
        "--cert-reload-seconds",
        type=float,
        default=5.0,
        help="how often to check the certificate files for a new certificate (default: 5)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until a termination signal arrives."""
    import asyncio

    from ganggate.admission.server import WebhookConfig

    config = WebhookConfig(
        cert_file=args.cert_file,
        key_file=args.key_file,
        host=args.host,
        port=args.port,
        max_pod_num=args.max_pod_num,
        scheduler_names=tuple(args.scheduler_names or ("default-scheduler",)),
        cert_reload_seconds=args.cert_reload_seconds,
    )
    return asyncio.run(serve(config))


async def serve(config: WebhookConfig) -> int:
    """Start the webhook, wait for SIGTERM or SIGINT, then stop gracefully."""
    import asyncio
    import signal

    from ganggate.admission.server import start_webhook

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = await start_webhook(config)
    print(f"ganggate webhook listening on {running.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await running.close()
    return 0
