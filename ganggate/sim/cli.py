"""`ganggate sim serve`: run kubesim's API server (and its scheduler and kubelet) on loopback."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ganggate.sim.componentbase import featuregate as featuregates

if TYPE_CHECKING:
    from ganggate.sim.topology import TopologyShape


def register(subparsers: argparse._SubParsersAction) -> dict[str, argparse._SubParsersAction]:
    """Add `sim` and `sim serve`; return the `sim` group so other packages can add to it."""
    sim = subparsers.add_parser(
        "sim",
        help="kubesim: the in-memory Kubernetes API server used for the demo and tests",
        description="kubesim: an in-memory kube-apiserver and default scheduler served over HTTP.",
    )
    sim_commands = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    serve = sim_commands.add_parser(
        "serve",
        help="serve the simulated API on a loopback port and write a kubeconfig for it",
        description=(
            "Serve kubesim over plain HTTP. Point kubectl (--kubeconfig FILE) or kubernetes-asyncio "
            "at the kubeconfig it writes. Stops on Ctrl-C or SIGTERM."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8001, help="port (default: 8001; 0 picks a free one)")
    serve.add_argument("--nodes", type=int, default=4, help="GPU nodes to create at start (default: 4)")
    serve.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default: 8)")
    serve.add_argument("--cpu", default="64", help="CPU capacity per node (default: 64)")
    serve.add_argument("--memory", default="512Gi", help="memory capacity per node (default: 512Gi)")
    add_topology_arguments(serve)
    add_gpushare_arguments(serve)
    add_dra_arguments(serve)
    add_autoscaler_arguments(serve)
    featuregates.add_arguments(serve)
    serve.add_argument("--node-prefix", default="node-", help="node name prefix (default: node-)")
    serve.add_argument("--kubeconfig-out", metavar="FILE", default="kubesim.kubeconfig",
                       help="where to write the kubeconfig (default: ./kubesim.kubeconfig); not over one whose "
                       "cluster still answers")
    serve.add_argument("--no-scheduler", action="store_true", help="do not run the default-scheduler stand-in")
    serve.add_argument("--no-kubelet", action="store_true", help="do not run the kubelet stand-in")
    serve.add_argument("--components-process", action="store_true",
                       help="run the scheduler, kubelet and controller stand-ins in a second process (HTTP clients of "
                            "this one, as kube-scheduler and kube-controller-manager are), not on the API server's loop")
    serve.add_argument("--time-scale", type=float, default=1.0,
                       help="kubelet clock speed-up: simulated seconds per real second (default: 1)")
    serve.add_argument("--watch-history", type=int, default=10000,
                       help="watch events kept for resuming watches; older resourceVersions get 410 (default: 10000)")
    serve.add_argument("--bookmark-seconds", type=float, default=5.0,
                       help="interval of BOOKMARK events on watches that allow them (default: 5)")
    serve.add_argument("--load", metavar="FILE",
                       help="create these objects at start, in order, as if POSTed (a List, an object or JSON "
                            "Lines; a bench aid for large clusters: ganggate/sim/apiserver/load.py)")
    serve.set_defaults(func=_serve)
    sim.set_defaults(func=lambda args: (sim.print_help(), 2)[1])
    return {"sim": sim_commands}


def add_topology_arguments(parser: argparse.ArgumentParser) -> None:
    """--topology and its label keys (ganggate/sim/topology.py); shared with `ganggate sim up`."""
    from ganggate.sim import topology

    parser.add_argument("--topology", metavar="BLOCKSxRACKSxNODES",
                        help="build blocks of racks of nodes, e.g. 4x4x8 (128 nodes; replaces --nodes), labelled "
                             f"{topology.ZONE_LABEL}, {topology.BLOCK_LABEL} and {topology.RACK_LABEL}")
    parser.add_argument("--zone-label", default=topology.ZONE_LABEL, help="with --topology: the zone label key")
    parser.add_argument("--block-label", default=topology.BLOCK_LABEL, help="with --topology: the block label key")
    parser.add_argument("--rack-label", default=topology.RACK_LABEL, help="with --topology: the rack label key")
    parser.add_argument("--nvlink-cliques", type=int, default=0, metavar="N",
                        help=f"with --topology: split each rack into N NVLink domains, labelled {topology.CLIQUE_LABEL} "
                             "as NVIDIA's GPU feature discovery does (a level narrower than the rack; default 0: none)")
    parser.add_argument("--clique-label", default=topology.CLIQUE_LABEL,
                        help="with --nvlink-cliques: the clique label key")


def add_autoscaler_arguments(parser: argparse.ArgumentParser) -> None:
    """--node-group and the autoscaler's timings (ganggate/sim/autoscaler/); shared with `ganggate sim up`."""
    from ganggate.sim.autoscaler.nodegroups import FLAG_HELP

    parser.add_argument("--node-group", action="append", default=[], metavar="NAME:MIN:MAX[,...]",
                        help=f"run kubesim's cluster-autoscaler with this node group (repeatable): {FLAG_HELP}")
    parser.add_argument("--scale-down-unneeded-seconds", type=float, default=600.0, metavar="S",
                        help="with --node-group: how long a group's node stays empty before it is removed "
                        "(default: 600, cluster-autoscaler's --scale-down-unneeded-time)")
    parser.add_argument("--autoscaler-scan-seconds", type=float, default=10.0, metavar="S",
                        help="with --node-group: how often the autoscaler looks (default: 10, its --scan-interval)")


def node_groups(args: argparse.Namespace) -> tuple[list, dict]:
    """The --node-group groups and the autoscaler's options; ValueError says what is wrong."""
    from ganggate.sim.autoscaler.nodegroups import parse_node_group

    groups = [parse_node_group(text) for text in args.node_group]
    if len({g.name for g in groups}) != len(groups):
        raise ValueError("--node-group: two groups have the same name")
    if args.scale_down_unneeded_seconds < 0 or args.autoscaler_scan_seconds <= 0:
        raise ValueError("--scale-down-unneeded-seconds must not be negative and --autoscaler-scan-seconds must be positive")
    return groups, {"unneeded_seconds": args.scale_down_unneeded_seconds, "scan_seconds": args.autoscaler_scan_seconds}


def add_gpushare_arguments(parser: argparse.ArgumentParser) -> None:
    """Cards shared by GPU memory (ganggate/sim/kubelet/deviceplugin.py) and the Alibaba node list (alibaba_nodes.py)."""
    parser.add_argument("--gpu-mem-per-card", metavar="QUANTITY",
                        help="share each node's cards by GPU memory, this much per card (e.g. 16Gi): nodes then "
                             "advertise aliyun.com/gpu-mem and aliyun.com/gpu-count as the gpushare device plugin does")
    parser.add_argument("--gpu-cards", type=int, metavar="N", help="cards per node (default: --gpus-per-node)")
    parser.add_argument("--gpu-mem-unit", choices=("GiB", "MiB"), default="GiB",
                        help="the unit of aliyun.com/gpu-mem (the device plugin's --memory-unit; default GiB)")
    parser.add_argument("--alibaba-nodes", metavar="CSV",
                        help="build the nodes from the Alibaba trace's node list (openb_node_list_gpu_node.csv: "
                             "sn,cpu_milli,memory_mib,gpu,model), cards shared by memory; replaces --nodes")
    parser.add_argument("--alibaba-sample", type=int, default=0, metavar="N",
                        help="with --alibaba-nodes: take N nodes spread evenly over the list (default: all)")


def add_dra_arguments(parser: argparse.ArgumentParser) -> None:
    """GPUs as Dynamic Resource Allocation devices (ganggate/sim/kubelet/dradriver.py)."""
    parser.add_argument("--dra", action="store_true",
                        help="publish every node's GPUs as DRA devices of driver and DeviceClass gpu.nvidia.com "
                             "(ResourceSlices, as NVIDIA's DRA driver does), not as nvidia.com/gpu capacity; "
                             "turns DRAExtendedResource on unless --feature-gates sets it")
    parser.add_argument("--dra-product", metavar="NAME", help="with --dra: the GPUs' productName "
                        "(default: NVIDIA H100 80GB HBM3)")


def dra_product(args: argparse.Namespace) -> str | None:
    """The DRA GPUs' productName, or None without --dra; ValueError for flags that do not go together."""
    from ganggate.sim.kubelet.dradriver import DEFAULT_PRODUCT

    if not args.dra:
        if args.dra_product:
            raise ValueError("--dra-product needs --dra")
        return None
    if args.gpu_mem_per_card or args.alibaba_nodes:
        raise ValueError("--dra publishes whole GPUs: leave out --gpu-mem-per-card and --alibaba-nodes")
    return args.dra_product or DEFAULT_PRODUCT


def gpushare_nodes(args: argparse.Namespace) -> tuple[int, list[dict] | None]:
    """(memory per card, node specs) from the gpushare flags; ValueError on a bad one."""
    from ganggate.sim.alibaba_nodes import read_node_list, sample_evenly
    from ganggate.sim.kubelet.deviceplugin import parse_card_memory

    if args.gpu_cards is not None:
        if args.gpu_cards < 1:
            raise ValueError("--gpu-cards must be at least 1")
        args.gpus_per_node = args.gpu_cards
    per_card = parse_card_memory(args.gpu_mem_per_card, args.gpu_mem_unit) if args.gpu_mem_per_card else 0
    if not args.alibaba_nodes:
        return per_card, None
    try:
        specs = read_node_list(args.alibaba_nodes, unit=args.gpu_mem_unit)
    except OSError as exc:
        raise ValueError(f"--alibaba-nodes: {exc}") from None
    return per_card, sample_evenly(specs, args.alibaba_sample)


def topology_shape(args: argparse.Namespace) -> TopologyShape | None:
    """The --topology shape (None without it); ValueError on a bad shape or label keys."""
    from ganggate.sim.topology import parse_shape

    if not args.topology:
        if args.nvlink_cliques:
            raise ValueError("--nvlink-cliques needs --topology (the racks to split)")
        return None
    return parse_shape(args.topology, zone_label=args.zone_label, block_label=args.block_label,
                       rack_label=args.rack_label, cliques_per_rack=args.nvlink_cliques,
                       clique_label=args.clique_label)


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from ganggate.sim.clock import WallClock
    from ganggate.sim.heap import tune_gc
    from ganggate.sim.simulator import Simulator

    if args.nodes < 0 or args.gpus_per_node < 0:
        print("error: --nodes and --gpus-per-node must not be negative")
        return 2
    if args.time_scale <= 0:
        print("error: --time-scale must be positive")
        return 2
    if args.watch_history < 1:
        print("error: --watch-history must be at least 1")
        return 2
    try:
        shape = topology_shape(args)
        per_card, node_specs = gpushare_nodes(args)
        groups, autoscaler_options = node_groups(args)
        gates, scheduler_gates = featuregates.from_arguments(args)
        product = dra_product(args)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    if groups and args.components_process:
        print("error: --node-group runs the autoscaler on the API server's loop; leave out --components-process")
        return 2
    from ganggate.sim.kubeconfig import in_use

    if (busy := in_use(args.kubeconfig_out)) is not None:
        print(f"error: {busy}")
        return 2
    objects: list[dict] = []
    if args.load:
        from ganggate.sim.apiserver.load import read_objects, resource_of

        try:
            objects = read_objects(args.load)
            for obj in objects:
                resource_of(obj)
        except (OSError, ValueError) as exc:
            print(f"error: --load: {exc}")
            return 2
    if shape is not None:
        args.nodes = shape.nodes
    if node_specs is not None:
        args.nodes = len(node_specs)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with Simulator(
            nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpu=args.cpu, memory=args.memory,
            node_prefix=args.node_prefix, scheduler=not args.no_scheduler, kubelet=not args.no_kubelet,
            clock=WallClock(args.time_scale), watch_history=args.watch_history,
            bookmark_seconds=args.bookmark_seconds, host=args.host, port=args.port,
            kubeconfig_path=args.kubeconfig_out, topology=shape, gpu_mem_per_card=per_card, node_specs=node_specs,
            components_process=args.components_process, node_groups=groups, autoscaler_options=autoscaler_options,
            feature_gates=gates, scheduler_feature_gates=scheduler_gates, dra_product=product,
        ) as sim:
            if objects:
                from ganggate.sim.apiserver.load import load_objects

                try:
                    print(f"kubesim: loaded {await load_objects(sim.server, objects)} objects from {args.load}",
                          flush=True)
                except ValueError as exc:
                    print(f"error: --load: {exc}", flush=True)
                    raise SystemExit(2) from None
                objects.clear()
            tune_gc()
            nodes = f"{args.nodes} node" if args.nodes == 1 else f"{args.nodes} nodes"
            if shape is not None:
                cliques = f", {shape.cliques} NVLink cliques" if shape.cliques else ""
                nodes += (f" in {shape.blocks} blocks x {shape.racks_per_block} racks x {shape.nodes_per_rack} nodes"
                          f"{cliques} (topology levels {','.join(shape.levels)})")
            if node_specs is not None:
                nodes += f" from {args.alibaba_nodes} (cards shared by memory, in {args.gpu_mem_unit})"
            elif per_card:
                nodes += f", {args.gpus_per_node} cards of {per_card} {args.gpu_mem_unit} each shared by memory"
            print(f"kubesim serving {sim.url} with {nodes}; kubeconfig: {sim.kubeconfig}", flush=True)
            print(f"  kubectl --kubeconfig {sim.kubeconfig} get nodes", flush=True)
            await stop.wait()

    try:
        asyncio.run(run())
    except OSError as exc:
        import errno

        hint = " (another cluster may be running there; --port 0 picks a free port)" if exc.errno == errno.EADDRINUSE else ""
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}{hint}")
        return 1
    return 0
