"""`ganggate sim up`: kubesim, the webhook and the gate controller on loopback, in one command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sim_commands: argparse._SubParsersAction) -> None:
    """Add `up` to the `sim` group."""
    up = sim_commands.add_parser(
        "up",
        help="run a local cluster: kubesim with the webhook and the gate controller",
        description=(
            "Start kubesim (API server, scheduler, kubelet), make certificates for the webhook, serve it "
            "over HTTPS and register it with a MutatingWebhookConfiguration, create the ganggate-system "
            "namespace and run the gate controller with leader election, all on 127.0.0.1; the webhook and "
            "the controller run in processes of their own (`ganggate webhook`, `ganggate controller`), "
            "as their pods do on a cluster, and log to this command's standard error. Prints "
            "'ganggate sim up: ready' and what to run next; point kubectl at the kubeconfig. Stops on "
            "Ctrl-C or SIGTERM (exit 0); the kubeconfig is left in place."
        ),
    )
    up.add_argument("--nodes", type=int, default=4, help="GPU nodes (default: 4)")
    up.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default: 8)")
    up.add_argument("--cpu", default="64", help="CPU capacity per node (default: 64)")
    up.add_argument("--memory", default="512Gi", help="memory capacity per node (default: 512Gi)")
    from ganggate.sim.cli import (
        add_autoscaler_arguments,
        add_dra_arguments,
        add_gpushare_arguments,
        add_topology_arguments,
    )

    add_topology_arguments(up)
    add_gpushare_arguments(up)
    add_dra_arguments(up)
    add_autoscaler_arguments(up)
    from ganggate.sim.componentbase import featuregate as featuregates

    featuregates.add_arguments(up)
    up.add_argument("--podgroups", choices=("auto", "gate", "create"), default="auto",
                    help="the webhook's and controller's --podgroups (docs/controller.md); they get "
                    "--native-gang-scheduling when kubesim's scheduler gang-schedules PodGroups (its GenericWorkload on)")
    up.add_argument("--on-node-drain", choices=["restart", "wait"], default="restart",
                    help="the controller's --on-node-drain: restart (default) moves a cordoned node's gangs whole, "
                    "wait keeps them and a drain waits (docs/controller.md, Operations)")
    up.add_argument("--port", type=int, default=8001, help="API server port (default: 8001; 0 picks a free one)")
    up.add_argument("--webhook-port", type=int, default=0, help="webhook HTTPS port (default: 0, a free one)")
    up.add_argument("--gate-by", choices=("webhook", "policy"), default="webhook",
                    help="who adds the scheduling gate: the webhook (default), or the API server with the "
                    "MutatingAdmissionPolicies of deploy/components/gate-by-policy (turns the "
                    "MutatingAdmissionPolicy feature gate on; the webhook then gets only shared-GPU pods "
                    "without gang annotations)")
    up.add_argument("--kubeconfig-out", metavar="FILE", default="kubesim.kubeconfig",
                    help="where to write the kubeconfig (default: ./kubesim.kubeconfig); an existing file "
                    "is overwritten only if kubesim wrote it and its cluster no longer answers")
    up.add_argument("--certs-dir", metavar="DIR",
                    help="keep the webhook's CA and certificate here (default: a temporary directory, removed "
                    "on exit)")
    up.set_defaults(func=_up)


def check(args: argparse.Namespace) -> str | None:
    """The first thing wrong with the flags, in one line, or None."""
    from ganggate.core.fit.resources import QuantityError, parse_quantity
    from ganggate.sim.cli import dra_product, gpushare_nodes, node_groups, topology_shape
    from ganggate.sim.componentbase import featuregate as featuregates

    if args.nodes < 0 or args.gpus_per_node < 0:
        return "--nodes and --gpus-per-node must not be negative"
    try:
        topology_shape(args)
        gpushare_nodes(args)
        node_groups(args)
        gates, _ = featuregates.from_arguments(args)
        dra_product(args)
    except ValueError as exc:
        return str(exc)
    if args.gate_by == "policy" and gates.overrides.get("MutatingAdmissionPolicy") is False:
        return "--gate-by policy needs the MutatingAdmissionPolicy feature gate: drop MutatingAdmissionPolicy=false"
    for flag in ("port", "webhook_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            return f"--{flag.replace('_', '-')} must be from 0 to 65535"
    for flag in ("cpu", "memory"):
        try:
            parse_quantity(getattr(args, flag))
        except QuantityError as exc:
            return f"--{flag}: {exc}"
    return _check_kubeconfig_out(Path(args.kubeconfig_out))


def _check_kubeconfig_out(path: Path) -> str | None:
    """Refuse to overwrite a kubeconfig kubesim did not write (~/.kube/config, say)."""
    import yaml

    from ganggate.sim.kubeconfig import CONTEXT, in_use

    if path.is_dir():
        return f"--kubeconfig-out {path} is a directory"
    if not path.exists():
        return None
    try:
        current = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("current-context")
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        current = None
    if current != CONTEXT:
        return f"--kubeconfig-out {path} exists and was not written by kubesim; choose another file"
    return in_use(path)


def _up(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from ganggate.local.up import UpError, UpOptions, up

    problem = check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from ganggate.sim.cli import dra_product, gpushare_nodes, node_groups, topology_shape
    from ganggate.sim.componentbase import featuregate as featuregates

    shape = topology_shape(args)
    per_card, node_specs = gpushare_nodes(args)
    groups, autoscaler_options = node_groups(args)
    gates, scheduler_gates = featuregates.from_arguments(args)
    nodes = len(node_specs) if node_specs is not None else shape.nodes if shape else args.nodes
    options = UpOptions(nodes=nodes, topology=shape, gpus_per_node=args.gpus_per_node, cpu=args.cpu, memory=args.memory,
                        port=args.port, webhook_port=args.webhook_port, kubeconfig_out=args.kubeconfig_out,
                        certs_dir=args.certs_dir, gpu_mem_per_card=per_card, node_specs=node_specs,
                        node_groups=groups, autoscaler_options=autoscaler_options, feature_gates=gates,
                        scheduler_feature_gates=scheduler_gates, gate_by=args.gate_by, podgroups=args.podgroups,
                        on_node_drain=args.on_node_drain, dra_product=dra_product(args))

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await up(options, stop, sys.stdout)

    try:
        asyncio.run(run())
    except UpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
