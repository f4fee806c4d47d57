"""`ganggate controller` and `ganggate status`: flags, API client configuration, entry points."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ganggate.controller.config import BLIND_SECONDS, CARD_POLICIES, NODE_LOST_HELP
from ganggate.core.fit.gpushare import DEFAULT_POLICY as DEFAULT_CARD_POLICY
from ganggate.kube.client import ConfigError, make_api_client


def register(subparsers: Any) -> None:
    """Add the `controller` and `status` subcommands."""
    ctl = subparsers.add_parser(
        "controller",
        help="run the gate controller",
        description="Watch nodes and pods; remove the scheduling gates of a whole gang together once a "
        "placement for all of it has been planned on free capacity.",
    )
    ctl.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config, else ~/.kube/config)")
    ctl.add_argument("--policy", choices=["plan", "count"], default="plan",
                     help="plan: place every pod on a node (default); count: the seed's GPU count check")
    ctl.add_argument("--placement", choices=["pinned", "free"], default="pinned",
                     help="pinned: pin each released pod to its planned node with a nodeSelector (default)")
    ctl.add_argument("--nominate", action=argparse.BooleanOptionalAction, default=True,
                     help="with --placement=pinned, set each released pod's status.nominatedNodeName to its planned "
                     "node before its gate goes, so the scheduler keeps other pods of no higher priority out of "
                     "that room (default on; needs patch on pods/status)")
    ctl.add_argument("--confirm-seconds", type=float, default=2.0, metavar="SECONDS",
                     help="with --nominate, how long a release waits at most for its nominations to show in the "
                     "watch (and for new pods that could take its room to be tried) before it checks that the plan "
                     "still holds and removes the gates (default 2)")
    ctl.add_argument("--on-bind-timeout", choices=["member-loss", "wait", "recreate"], default="member-loss",
                     help="what to do with released pods not bound in time: member-loss (default) treats it as a "
                     "member loss (--on-member-loss), wait only reports, recreate deletes the unbound pods that "
                     "have an owning controller")
    ctl.add_argument("--on-member-loss", choices=["restart", "none"], default="restart",
                     help="when a released gang drops below min-available: restart (default) deletes its pods that "
                     "have an owning controller so the gang is admitted whole again; none only reports")
    ctl.add_argument("--on-node-drain", choices=["restart", "wait"], default="restart",
                     help="when a node running released pods of a gang is cordoned (kubectl drain's first step) and "
                     "evicting them would take the gang below min-available: restart (default) restarts the gang "
                     "whole through its owner so it runs on other nodes and the drain finishes; wait keeps it in "
                     "place, the drain waits, and Events on the Job, pods and node say why and what lets it go. The label "
                     "ganggate.io/on-node-drain=restart|wait on a gang's pods or on the node overrides it")
    ctl.add_argument("--node-lost-after", type=float, default=None, metavar="SECONDS", help=NODE_LOST_HELP)
    ctl.add_argument("--protect-running-gangs", action=argparse.BooleanOptionalAction, default=True,
                     help="keep a PodDisruptionBudget (minAvailable = min-available) per released gang (default on)")
    ctl.add_argument("--bind-timeout", type=float, default=120.0, metavar="SECONDS",
                     help="how long capacity stays promised to a released pod (default 120)")
    ctl.add_argument("--starvation-seconds", type=float, default=300.0, metavar="SECONDS",
                     help="after this long complete and waiting, a gang gets capacity held back on nodes whose "
                          "pods all have deadlines (activeDeadlineSeconds; default 300)")
    ctl.add_argument("--starvation-blind-seconds", type=float, default=BLIND_SECONDS, metavar="SECONDS",
                     help="after this long, capacity is held back even where pods have no deadline, idling it "
                          f"until they end (default {BLIND_SECONDS:.0f}: see docs/controller.md)")
    ctl.add_argument("--topology-levels", default="", metavar="LABEL,...",
                     help="node label keys naming topology levels, widest first (e.g. topology.kubernetes.io/zone,"
                     "example.com/block,example.com/rack,kubernetes.io/hostname): gangs go into as few domains as "
                     "they fit (default: none)")
    ctl.add_argument("--preemption", choices=["gang", "off"], default="gang",
                     help="gang: a complete gang that fits nowhere evicts the cheapest set of whole gangs of "
                     "lower priority (through the Eviction API) and is released into their room (default); "
                     "off: never evict")
    ctl.add_argument("--preempt-bare-pods", action="store_true",
                     help="also preempt pods without an owning controller (nothing recreates them)")
    ctl.add_argument("--preempt-ordinary-pods", action="store_true",
                     help="also preempt bound pods of lower priority that belong to no gang")
    ctl.add_argument("--preemption-timeout", type=float, default=300.0, metavar="SECONDS",
                     help="how long the room freed by a preemption stays reserved for its gang (default 300)")
    ctl.add_argument("--autoscaling", choices=["off", "provisioning-request", "placeholders"], default="off",
                     help="provisioning-request: for a complete gang with no room, ask cluster-autoscaler for nodes "
                     "with one ProvisioningRequest (autoscaling.x-k8s.io/v1) and release the gang whole once they "
                     "join; placeholders: create lowest-priority placeholder pods of the gang's shapes that any "
                     "autoscaler (Karpenter) adds nodes for, and release the gang on their nodes once all are "
                     "bound. Each needs its RBAC component (deploy/components/autoscaling-*). Default off")
    ctl.add_argument("--provisioning-class", choices=["best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                                                      "check-capacity.autoscaling.x-k8s.io"],
                     default="best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                     help="with --autoscaling provisioning-request: the request's class (default: all-or-nothing scale-up)")
    ctl.add_argument("--scheduler-name", action="append", metavar="NAME",
                     help="a scheduler whose pods ganggate serves (repeatable; default default-scheduler)")
    ctl.add_argument("--max-in-flight", type=int, default=32, help="concurrent release patches (default 32)")
    ctl.add_argument("--planning", choices=["thread", "loop"], default="thread",
                     help="thread: plan each round in a worker thread, so watches and lease renewals never wait "
                     "for it (default); loop: on the event loop")
    ctl.add_argument("--rounds", choices=["incremental", "full"], default="incremental",
                     help="incremental: a round re-plans only the gangs whose pods or candidate nodes changed, "
                     "with the same decisions as a full round (default); full: every gang every round")
    ctl.add_argument("--no-leader-election", action="store_true", help="decide without holding the lease")
    _lease_flags(ctl)
    ctl.add_argument("--shutdown-grace", type=float, default=10.0, metavar="SECONDS",
                     help="on SIGTERM/SIGINT, how long releases already being applied may take (default 10)")
    ctl.add_argument("--metrics-port", type=int, default=8080, help="/metrics, /healthz, /readyz (0: any free port)")
    ctl.add_argument("--metrics-host", default="0.0.0.0",
                     help="address of the metrics port (default: 0.0.0.0; 127.0.0.1 keeps it on loopback)")
    ctl.add_argument("--max-pod-num", type=int, default=10000, help="largest group-pod-num accepted")
    ctl.add_argument("--card-policy", choices=CARD_POLICIES, default=None,
                     help="GPU sharing: which card a pod asking aliyun.com/gpu-mem gets (default: "
                     f"{DEFAULT_CARD_POLICY}; see docs/gpu-sharing.md)")
    from ganggate.podgroups import add_arguments as add_podgroup_arguments

    add_podgroup_arguments(ctl)  # --podgroups, --native-gang-scheduling (docs/controller.md)
    ctl.set_defaults(func=run_controller)

    st = subparsers.add_parser(
        "status",
        help="show gangs and nodes as the controller sees them",
        description="List the cluster once and show each gang (state, pods, GPUs, why it waits) and each "
        "node's GPUs.",
    )
    st.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config, else ~/.kube/config)")
    st.add_argument("--namespace", "-n", help="only gangs of this namespace")
    st.add_argument("--scheduler-name", action="append", metavar="NAME", help="served schedulers (repeatable)")
    st.add_argument("--topology-levels", default=None, metavar="LABEL,...",
                    help="the controller's --topology-levels, so waits and fits read as the controller sees them "
                    "(default: the levels the leading controller records on its lease)")
    st.add_argument("--gpus", action="store_true",
                    help="GPU sharing: per node and per card, the memory used and free and the pods holding it "
                    "(what `kubectl inspect gpushare` shows)")
    st.add_argument("--output", "-o", choices=["text", "json", "yaml"], default="text",
                    help="text (default: the tables), or the same rows as a JSON or YAML document")
    st.add_argument("--watch", "-w", action="store_true",
                    help="print the status again each time it changes (checked every 2 s) until Ctrl-C")
    _lease_flags(st)
    st.set_defaults(func=_run_status)


def _lease_flags(parser: Any) -> None:
    parser.add_argument("--lease-name", default="ganggate-controller", help="the leader election Lease")
    parser.add_argument("--lease-namespace", default=None,
                        help="must exist (default: $POD_NAMESPACE, else the service account's namespace in a "
                        "cluster, else ganggate-system)")


def _run_status(args: argparse.Namespace) -> int:
    from ganggate.controller.status.tables import run_status

    return run_status(args)


def config_from_args(args: argparse.Namespace) -> Any:
    from ganggate.controller.config import ControllerConfig, parse_topology_levels
    from ganggate.kube.leader import lease_namespace

    cfg = ControllerConfig(
        policy=args.policy, placement=args.placement, nominate=args.nominate, confirm_seconds=args.confirm_seconds,
        on_bind_timeout=args.on_bind_timeout,
        bind_timeout_seconds=args.bind_timeout, starvation_seconds=args.starvation_seconds,
        starvation_blind_seconds=args.starvation_blind_seconds,
        topology_levels=parse_topology_levels(args.topology_levels),
        scheduler_names=tuple(args.scheduler_name or ["default-scheduler"]), max_pod_num=args.max_pod_num,
        max_in_flight=args.max_in_flight, leader_election=not args.no_leader_election,
        lease_name=args.lease_name, lease_namespace=lease_namespace(args.lease_namespace),
        metrics_port=args.metrics_port, metrics_host=args.metrics_host,
        shutdown_grace_seconds=args.shutdown_grace,
        preemption=args.preemption, preempt_bare_pods=args.preempt_bare_pods,
        preempt_ordinary_pods=args.preempt_ordinary_pods, preemption_timeout_seconds=args.preemption_timeout,
        on_member_loss=args.on_member_loss, on_node_drain=args.on_node_drain, protect_running_gangs=args.protect_running_gangs,
        planning=args.planning, rounds=args.rounds, node_lost_after_seconds=args.node_lost_after,
        autoscaling=args.autoscaling, provisioning_class=args.provisioning_class,
        podgroups=args.podgroups, native_gang_scheduling=args.native_gang_scheduling,
    )
    if args.card_policy is not None:
        cfg.card_policy = args.card_policy
    cfg.validate()
    return cfg


def run_controller(args: argparse.Namespace) -> int:
    """The `ganggate controller` command: run until SIGTERM or SIGINT, then stop cleanly (exit 0)."""
    import asyncio
    import signal

    from ganggate.controller.round.loop import Controller

    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        # The releases' patches in flight, and the deletions of a restart beside them.
        api_client = await make_api_client(args.kubeconfig, concurrency=2 * cfg.max_in_flight)
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        try:
            controller = Controller(api_client, cfg)
            for sig in signals:
                loop.add_signal_handler(sig, _on_signal, controller, sig)
            await controller.run()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await api_client.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the metrics port is taken
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _on_signal(controller: Any, sig: Any) -> None:
    import logging

    logging.getLogger("ganggate.controller").info("received %s: stopping cleanly", sig.name)
    controller.stop()
