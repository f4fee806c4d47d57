"""`ganggate certs generate|inject`: the webhook's TLS where cert-manager is not installed."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `certs` subcommand and its `generate` and `inject` subcommands."""
    parser = subparsers.add_parser(
        "certs",
        help="make and rotate the webhook's certificates, inject the CA bundle",
        description="Self-signed CA and serving certificates for the webhook, and caBundle injection.",
    )
    def usage(_: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)
    sub = parser.add_subparsers(dest="certs_command", metavar="COMMAND")

    gen = sub.add_parser(
        "generate",
        help="make a CA (or reuse the one in --out) and issue a serving certificate",
        description=(
            "Write ca.crt, ca.key, tls.crt and tls.key (keys mode 0600) into --out. An existing "
            "ca.crt/ca.key there is reused, so the injected caBundle stays valid, and a new "
            "serving certificate is issued (rotation). The serving certificate covers NAME, "
            "NAME.NS, NAME.NS.svc and NAME.NS.svc.cluster.local plus any --dns/--ip."
        ),
    )
    gen.add_argument("--service", required=True, help="the webhook Service's name")
    gen.add_argument("--namespace", required=True, help="the webhook Service's namespace")
    gen.add_argument("--out", required=True, help="directory for the certificate files")
    gen.add_argument("--days", type=int, default=365, help="serving certificate validity (default: 365)")
    gen.add_argument("--ca-days", type=int, default=3650, help="validity of a new CA (default: 3650)")
    gen.add_argument("--dns", action="append", default=[], metavar="NAME", help="extra DNS name; repeatable")
    gen.add_argument("--ip", action="append", default=[], metavar="IP", help="extra IP address; repeatable")
    gen.add_argument(
        "--renew-before",
        type=float,
        metavar="DAYS",
        help="keep the current serving certificate if it is valid for longer than DAYS",
    )
    gen.set_defaults(func=run_generate)

    inj = sub.add_parser(
        "inject",
        help="patch the CA into a MutatingWebhookConfiguration's caBundle",
        description="Set clientConfig.caBundle of every webhook of the configuration to --ca-file.",
    )
    inj.add_argument("--webhook-configuration", required=True, metavar="NAME")
    inj.add_argument("--ca-file", required=True, help="PEM CA certificate (ca.crt from `certs generate`)")
    inj.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    inj.set_defaults(func=run_inject)


def run_generate(args: argparse.Namespace) -> int:
    import ipaddress
    import sys
    from pathlib import Path

    from ganggate.certs.files import generate

    if args.days < 1 or args.ca_days < 1:
        print("error: --days and --ca-days must be at least 1", file=sys.stderr)
        return 2
    try:
        for ip in args.ip:
            ipaddress.ip_address(ip)
        result = generate(
            Path(args.out), args.service, args.namespace, days=args.days, ca_days=args.ca_days,
            dns=tuple(args.dns), ips=tuple(args.ip), renew_before_days=args.renew_before,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if result.ca_created:
        print(f"created a new CA in {args.out}/ca.crt")
    if result.issued:
        print(f"issued {args.out}/tls.crt ({result.reason}), valid until {result.not_after.isoformat()}")
    else:
        print(f"kept {args.out}/tls.crt: valid until {result.not_after.isoformat()}")
    return 0


def run_inject(args: argparse.Namespace) -> int:
    import asyncio
    import sys
    from pathlib import Path

    from ganggate.kube.client import ConfigError

    try:
        ca_pem = Path(args.ca_file).read_bytes()
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        count = asyncio.run(_inject(args.kubeconfig, args.webhook_configuration, ca_pem))
    except (ValueError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # ApiException and connection errors: say what failed, exit non-zero
        if isinstance(getattr(exc, "os_error", None), ConnectionRefusedError):
            raise  # nothing listens there: `ganggate` says so in one line (ganggate.cli)
        status = getattr(exc, "status", None)
        reason = getattr(exc, "reason", None) or exc
        print(f"error: cannot patch MutatingWebhookConfiguration {args.webhook_configuration}: "
              f"{status or ''} {reason}".rstrip(), file=sys.stderr)
        return 1
    print(f"injected the CA into {count} webhook{'' if count == 1 else 's'} of {args.webhook_configuration}")
    return 0


async def _inject(kubeconfig: str | None, name: str, ca_pem: bytes) -> int:
    from ganggate.certs.inject import inject_ca_bundle
    from ganggate.kube.client import make_api_client

    async with await make_api_client(kubeconfig) as api_client:
        return await inject_ca_bundle(api_client, name, ca_pem)
