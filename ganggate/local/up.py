"""`ganggate sim up` at run time: start kubesim, the webhook and the controller, wait, stop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ganggate.core.placement.explain import plural
from ganggate.local import processes
from ganggate.local.parts import (
    ensure_namespace,
    gate_by_policy_webhook,
    make_certificates,
    register_gate_policies,
    register_webhook,
    webhook_configuration,
)

if TYPE_CHECKING:
    from ganggate.sim.simulator import Simulator

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "ganggate-system"
#: The controller's leader election Lease, named on its command line and in the ready banner.
LEASE_NAME = "ganggate-controller"


class UpError(Exception):
    """A start-up failure, said in one line."""


@dataclass(frozen=True)
class UpOptions:
    """What `ganggate sim up` starts."""

    nodes: int = 4
    gpus_per_node: int = 8
    cpu: str = "64"
    memory: str = "512Gi"
    port: int = 8001
    webhook_port: int = 0
    kubeconfig_out: str = "kubesim.kubeconfig"
    certs_dir: str | None = None
    topology: Any = None  # a ganggate.sim.topology.TopologyShape: nodes in blocks and racks, and the controller's levels
    gpu_mem_per_card: int = 0  # GPU sharing: cards shared by memory (aliyun.com/gpu-mem), this much each
    node_specs: Any = None  # GPU sharing: nodes from the Alibaba node list (ganggate.sim.alibaba_nodes)
    node_groups: Any = None  # autoscaling: ganggate.sim.autoscaler NodeGroups kubesim's cluster-autoscaler grows
    autoscaler_options: Any = None  # its scan_seconds, unneeded_seconds
    feature_gates: Any = None  # ganggate.sim.featuregates.FeatureGates of every component (1.35 defaults if None)
    scheduler_feature_gates: Any = None  # the scheduler's own, over feature_gates
    #: who adds the scheduling gate: "webhook" (the default), or "policy": kubesim's API server with the
    #: MutatingAdmissionPolicies of deploy/components/gate-by-policy (its feature gate turned on), no webhook
    gate_by: str = "webhook"
    on_node_drain: str = "restart"  # the controller's --on-node-drain (ganggate.core.policy.drain)
    dra_product: str | None = None  # GPUs as DRA devices of this product (ganggate/sim/kubelet/dradriver.py)
    podgroups: str = "auto"  # the webhook's and controller's --podgroups (ganggate.podgroups)

    @property
    def native_gang_scheduling(self) -> bool:
        """Whether kubesim's scheduler gang-schedules PodGroups: what an operator tells ganggate
        with --native-gang-scheduling when kube-scheduler runs with both gates on."""
        from ganggate.sim.scheduler.gangscheduling import enabled

        gates = self.scheduler_feature_gates or self.feature_gates
        return gates is not None and bool(enabled(gates))


async def up(options: UpOptions, stop: asyncio.Event, out: TextIO) -> None:
    """Run the local cluster until `stop` is set; raise UpError if a part cannot start or dies.

    kubesim runs here; the webhook and the gate controller each run in a process of their own
    (`ganggate webhook`, `ganggate controller`), as their pods do on a cluster (local.processes)."""
    async with contextlib.AsyncExitStack() as parts:
        sim = await _start_kubesim(parts, options)
        api = sim.api_client()
        parts.push_async_callback(api.close)
        await ensure_namespace(api, LEASE_NAMESPACE)
        log.info("namespace %s ready for the controller's lease", LEASE_NAMESPACE)
        certs_dir, certs = _certificates(parts, options)
        webhook_port = _webhook_port(options)
        webhook = await _start_part(parts, "webhook", lambda probe: webhook_arguments(options, certs_dir, webhook_port, probe))
        controller = await _start_part(parts, "gate controller", lambda probe: controller_arguments(options, probe))
        if not await _until_ready(webhook, stop):
            return
        webhook_url = f"https://127.0.0.1:{webhook_port}"
        log.info("webhook up: %s/mutate", webhook_url)
        await _register_gate(api, options, webhook_url, certs.ca_file.read_bytes())
        if not await _until_ready(controller, stop):
            return
        lease = f"{LEASE_NAMESPACE}/{LEASE_NAME}"
        log.info("controller up: leader of lease %s, watching nodes and pods", lease)
        out.write(next_steps(options, sim.url, webhook_url, lease, certs_dir if options.certs_dir else None))
        out.flush()
        stopping = asyncio.create_task(stop.wait())
        exits = [asyncio.create_task(part.process.wait()) for part in (webhook, controller)]
        try:
            await asyncio.wait([stopping, *exits], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stopping, *exits):
                task.cancel()
        for part in (controller, webhook):
            if (why := part.stopped()) is not None and not stop.is_set():
                raise UpError(why)
        log.info("stopping: controller, webhook, kubesim")


def log_level() -> str:
    """sim up's own log level, for the parts it starts."""
    return logging.getLevelName(logging.getLogger().getEffectiveLevel())


def controller_arguments(options: UpOptions, metrics_port: int) -> list[str]:
    """`ganggate controller` as sim up runs it: sim up's kubeconfig, leader election in
    ganggate-system, /metrics and /readyz on a loopback port, and the options' settings."""
    argv = processes.ganggate_command(
        log_level(), "controller", "--kubeconfig", options.kubeconfig_out,
        "--lease-namespace", LEASE_NAMESPACE, "--lease-name", LEASE_NAME,
        "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port),
        "--podgroups", options.podgroups, "--on-node-drain", options.on_node_drain)
    if options.native_gang_scheduling:
        argv.append("--native-gang-scheduling")
    if options.topology is not None:
        argv += ["--topology-levels", ",".join(options.topology.levels)]
    if options.node_groups:  # kubesim runs a cluster-autoscaler: the controller asks it for room
        argv += ["--autoscaling", "provisioning-request"]
    return argv


def webhook_arguments(options: UpOptions, certs_dir: Path, port: int, metrics_port: int) -> list[str]:
    """`ganggate webhook` as sim up runs it: the certificates made for 127.0.0.1, its HTTPS port,
    /metrics and /readyz on a loopback port, and the options' PodGroup settings."""
    argv = processes.ganggate_command(
        log_level(), "webhook", "--cert-dir", str(certs_dir), "--host", "127.0.0.1", "--port", str(port),
        "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port), "--podgroups", options.podgroups)
    if options.native_gang_scheduling:
        argv.append("--native-gang-scheduling")
    return argv


async def _start_part(parts: contextlib.AsyncExitStack, name: str, command: Callable[[int], list[str]]) -> processes.Part:
    """Start a part, its command line given the port of its /readyz, and stop it on the way out,
    before kubesim."""
    probe = processes.free_port()
    part = await processes.start(name, command(probe), f"http://127.0.0.1:{probe}/readyz")
    parts.push_async_callback(processes.stop_part, part)
    return part


async def _until_ready(part: processes.Part, stop: asyncio.Event) -> bool:
    try:
        return await processes.until_ready(part, stop)
    except processes.PartError as exc:
        raise UpError(str(exc)) from None


async def _start_kubesim(parts: contextlib.AsyncExitStack, options: UpOptions) -> Simulator:
    from ganggate.sim.heap import tune_gc
    from ganggate.sim.simulator import Simulator

    sim = Simulator(nodes=options.nodes, gpus_per_node=options.gpus_per_node, cpu=options.cpu,
                    memory=options.memory, port=options.port, kubeconfig_path=options.kubeconfig_out,
                    topology=options.topology, gpu_mem_per_card=options.gpu_mem_per_card,
                    node_specs=options.node_specs, node_groups=options.node_groups,
                    autoscaler_options=options.autoscaler_options, feature_gates=cluster_gates(options),
                    scheduler_feature_gates=options.scheduler_feature_gates, dra_product=options.dra_product)
    try:
        await parts.enter_async_context(sim)
    except OSError as exc:
        raise UpError(f"cannot serve the API on 127.0.0.1:{options.port}: {_reason(exc)}"
                      f"{_port_hint(exc, '--port')}") from None
    tune_gc()  # this process serves kubesim, as `sim serve`'s does (sim.heap)
    log.info("kubesim up: API server %s with %s of %s each, scheduler and kubelet running",
             sim.url, plural(options.nodes, "node"), plural(options.gpus_per_node, "GPU"))
    return sim


def _certificates(parts: contextlib.AsyncExitStack, options: UpOptions) -> tuple[Path, Any]:
    """The webhook's CA and serving certificate for 127.0.0.1, in --certs-dir or a temporary directory."""
    try:
        certs_dir = _certs_dir(parts, options.certs_dir)
        return certs_dir, make_certificates(certs_dir)
    except OSError as exc:
        where = options.certs_dir or "a temporary directory"
        raise UpError(f"cannot write the webhook's certificates to {where}: {_reason(exc)}") from None


def _webhook_port(options: UpOptions) -> int:
    """--webhook-port if it is free (else UpError, said as for kubesim's port), or a free one for 0."""
    if options.webhook_port == 0:
        return processes.free_port()
    problem = processes.port_free(options.webhook_port)
    if problem is not None:
        raise UpError(f"cannot serve the webhook on 127.0.0.1:{options.webhook_port}: {_reason(problem)}"
                      f"{_port_hint(problem, '--webhook-port')}")
    return options.webhook_port


async def _register_gate(api: Any, options: UpOptions, webhook_url: str, ca_pem: bytes) -> None:
    """Register the webhook (and, with --gate-by policy, the gate's admission policies)."""
    configuration = webhook_configuration(webhook_url, ca_pem)
    if options.gate_by == "policy":
        # deploy/components/gate-by-policy: the API server gates gang pods; the webhook keeps only
        # shared-GPU pods without gang annotations (gangs of one).
        await register_gate_policies(api)
        configuration = gate_by_policy_webhook(configuration)
    await register_webhook(api, configuration)


def _certs_dir(parts: contextlib.ExitStack | contextlib.AsyncExitStack, given: str | None) -> Path:
    """The given directory (kept), else a temporary one removed on exit."""
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(parts.enter_context(tempfile.TemporaryDirectory(prefix="ganggate-certs-")))


def _reason(exc: OSError) -> str:
    """An OSError's reason alone ("address already in use"), without asyncio's restatement."""
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _port_hint(exc: OSError, flag: str) -> str:
    """For a port in use: how to get a free one."""
    return f" (another cluster may be running there; {flag} 0 picks a free port)" if exc.errno == errno.EADDRINUSE else ""


def cluster_gates(options: UpOptions) -> Any:
    """The cluster's feature gates: the options', with MutatingAdmissionPolicy on for the gate by policy."""
    from ganggate.sim.componentbase.featuregate import FeatureGates

    gates = options.feature_gates or FeatureGates()
    if options.gate_by == "policy":
        gates = gates.with_overrides(FeatureGates({"MutatingAdmissionPolicy": True}))
    return gates


def next_steps(options: UpOptions, api_url: str, webhook_url: str, lease: str, certs_dir: Path | None) -> str:
    """The ready banner: where each part is and what to run next."""
    kubeconfig = options.kubeconfig_out
    certs = f" (certificates in {certs_dir})" if certs_dir else ""
    sharing = options.gpu_mem_per_card or options.node_specs is not None
    shared = ", shared by GPU memory" if sharing else ""
    try_sharing = (
        f"  kubectl --kubeconfig {kubeconfig} apply -f examples/gpushare/\n"
        f"  ganggate status --gpus --kubeconfig {kubeconfig}\n" if sharing else ""
    )
    return (
        "ganggate sim up: ready\n"
        f"  API server:  {api_url} ({_nodes_line(options)}{shared})\n"
        f"  webhook:     {webhook_url}/mutate{certs}\n"
        + ("  gate:        by policy: MutatingAdmissionPolicy ganggate-gang-gate (the webhook gets only shared-GPU "
           "pods without gang annotations)\n" if options.gate_by == "policy" else "") +
        f"  controller:  leader of lease {lease}\n"
        f"  kubeconfig:  {kubeconfig} (left in place when stopped)\n"
        f"{_topology_line(options)}"
        "Next:\n"
        f"  kubectl --kubeconfig {kubeconfig} apply -f examples/pytorch-ddp-job.yaml\n"
        f"  kubectl --kubeconfig {kubeconfig} get pods\n"
        f"  ganggate status --kubeconfig {kubeconfig}\n"
        f"{try_sharing}"
        "Stop with Ctrl-C.\n"
    )


def _topology_line(options: UpOptions) -> str:
    """The levels the nodes are labelled with and the controller places by (nothing without --topology)."""
    shape = options.topology
    if shape is None:
        return ""
    cliques = f", {shape.cliques} NVLink cliques per rack" if shape.cliques else ""
    return (f"  topology:    {shape.blocks} blocks x {shape.racks_per_block} racks x {shape.nodes_per_rack} nodes{cliques};"
            f" the controller's levels: {','.join(shape.levels)}\n")


def _nodes_line(options: UpOptions) -> str:
    """How the banner names the nodes: how many and their GPUs, or where they came from."""
    if options.node_specs is not None:
        return f"{plural(options.nodes, 'node')} from the Alibaba node list"
    return f"{plural(options.nodes, 'node')}, {plural(options.gpus_per_node, 'GPU')} each"
