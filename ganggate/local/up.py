"""`ganggate sim up` at run time: start kubesim, the webhook and the controller, wait, stop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ganggate.core.placement.explain import plural
from ganggate.local.parts import (
    ensure_namespace,
    gate_by_policy_webhook,
    make_certificates,
    register_gate_policies,
    register_webhook,
    start_controller,
    start_tls_webhook,
    stop_task,
    webhook_configuration,
)

if TYPE_CHECKING:
    from ganggate.sim.simulator import Simulator

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "ganggate-system"


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


def controller_client(sim: Any, max_in_flight: int) -> Any:
    """The controller's own API client, made as `ganggate controller` makes it
    (kube.client.make_api_client): connections for its patches in flight (kubernetes-asyncio's
    default pool, 5 per CPU, held a release to 10 on 2 CPUs), the proxy looked up once, not
    before every request in a worker thread (#23: the release through sim up)."""
    from ganggate.kube.client import pool_size_for, proxy_once

    api = sim.api_client(connection_pool_maxsize=pool_size_for(max_in_flight))
    proxy_once(api)
    return api


async def up(options: UpOptions, stop: asyncio.Event, out: TextIO) -> None:
    """Run the local cluster until `stop` is set; raise UpError if a part cannot start or dies."""
    async with contextlib.AsyncExitStack() as parts:
        sim = await _start_kubesim(parts, options)
        api = sim.api_client()
        parts.push_async_callback(api.close)
        webhook_url, certs_dir = await _start_webhook(parts, api, options)
        await ensure_namespace(api, LEASE_NAMESPACE)
        log.info("namespace %s ready for the controller's lease", LEASE_NAMESPACE)
        from ganggate.controller.config import ControllerConfig

        config = ControllerConfig(leader_election=True, lease_namespace=LEASE_NAMESPACE, metrics_port=None,
                                  podgroups=options.podgroups, native_gang_scheduling=options.native_gang_scheduling,
                                  on_node_drain=options.on_node_drain,
                                  **_topology_settings(options), **_autoscaling_settings(options))
        controller_api = controller_client(sim, config.max_in_flight)
        parts.push_async_callback(controller_api.close)
        controller, task = start_controller(controller_api, config)
        parts.push_async_callback(stop_task, task)
        if not await _until_leading(controller, task, stop):
            return
        lease = f"{LEASE_NAMESPACE}/{config.lease_name}"
        log.info("controller up: leader of lease %s, watching nodes and pods", lease)
        out.write(next_steps(options, sim.url, webhook_url, lease, certs_dir if options.certs_dir else None))
        out.flush()
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([stopping, task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        _raise_if_stopped(task)
        log.info("stopping: controller, webhook, kubesim")


def _autoscaling_settings(options: UpOptions) -> dict[str, Any]:
    """With node groups, kubesim runs a cluster-autoscaler: the controller asks it for room."""
    return {"autoscaling": "provisioning-request"} if options.node_groups else {}


def _topology_settings(options: UpOptions) -> dict[str, Any]:
    """The controller's --topology-levels from the cluster's shape (none without one)."""
    if options.topology is None:
        return {}
    return {"topology_levels": tuple(options.topology.levels)}


async def _start_kubesim(parts: contextlib.AsyncExitStack, options: UpOptions) -> Simulator:
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
    log.info("kubesim up: API server %s with %s of %s each, scheduler and kubelet running",
             sim.url, plural(options.nodes, "node"), plural(options.gpus_per_node, "GPU"))
    return sim


async def _start_webhook(parts: contextlib.AsyncExitStack, api: Any, options: UpOptions) -> tuple[str, Path]:
    """Make certificates, serve the webhook over HTTPS and register it; returns its URL and the certs' dir."""
    try:
        certs_dir = _certs_dir(parts, options.certs_dir)
        certs = make_certificates(certs_dir)
    except OSError as exc:
        where = options.certs_dir or "a temporary directory"
        raise UpError(f"cannot write the webhook's certificates to {where}: {_reason(exc)}") from None
    try:
        webhook = await start_tls_webhook(certs, options.webhook_port, podgroups=options.podgroups,
                                          native_gang_scheduling=options.native_gang_scheduling)
    except OSError as exc:
        raise UpError(f"cannot serve the webhook on 127.0.0.1:{options.webhook_port}: {_reason(exc)}"
                      f"{_port_hint(exc, '--webhook-port')}") from None
    parts.push_async_callback(webhook.close)
    configuration = webhook_configuration(webhook.url, certs.ca_file.read_bytes())
    if options.gate_by == "policy":
        # deploy/components/gate-by-policy: the API server gates gang pods; the webhook keeps only
        # shared-GPU pods without gang annotations (gangs of one).
        await register_gate_policies(api)
        configuration = gate_by_policy_webhook(configuration)
    await register_webhook(api, configuration)
    return webhook.url, certs_dir


def _certs_dir(parts: contextlib.ExitStack | contextlib.AsyncExitStack, given: str | None) -> Path:
    """The given directory (kept), else a temporary one removed on exit."""
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(parts.enter_context(tempfile.TemporaryDirectory(prefix="ganggate-certs-")))


async def _until_leading(controller: Any, task: asyncio.Task[None], stop: asyncio.Event) -> bool:
    """Wait until the controller leads with its informers synced; False if asked to stop first."""
    while not (controller.synced and controller.is_leader):
        _raise_if_stopped(task)
        if stop.is_set():
            return False
        await asyncio.sleep(0.05)
    return True


def _reason(exc: OSError) -> str:
    """An OSError's reason alone ("address already in use"), without asyncio's restatement."""
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _port_hint(exc: OSError, flag: str) -> str:
    """For a port in use: how to get a free one."""
    return f" (another cluster may be running there; {flag} 0 picks a free port)" if exc.errno == errno.EADDRINUSE else ""


def _raise_if_stopped(task: asyncio.Task) -> None:
    if task.done():
        exc = None if task.cancelled() else task.exception()
        raise UpError(f"the gate controller stopped: {exc or 'cancelled'}")


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
