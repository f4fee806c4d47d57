"""The embedded harness: kubesim's API server on a loopback port, with nodes, scheduler and kubelet.

    async with Simulator(nodes=4, gpus_per_node=8) as sim:
        async with sim.api_client() as api: ...

The scheduler and kubelet stand-ins (ganggate/sim/scheduler/scheduler.py, kubelet.py) and the controllers
(the Job controller, ganggate/sim/controllers/job.py, and the garbage collector, gc.py) are HTTP clients of
the server (ganggate/sim/components.py), started as tasks when enabled and present, or with
components_process=True in a process of their own, as the real ones run beside kube-apiserver.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from ganggate.sim.apiserver import discovery
from ganggate.sim.apiserver.faults import FaultInjector
from ganggate.sim.apiserver.requests import Target
from ganggate.sim.apiserver.server import ApiServer
from ganggate.sim.apiserver.store import Store
from ganggate.sim.componentbase.featuregate import FeatureGates
from ganggate.sim.componentbase.featuregate import parse as parse_feature_gates
from ganggate.sim.components import READY_LINE, Components, process_arguments
from ganggate.sim.helpers.nodes import node_manifest  # tests build nodes with it
from ganggate.sim.kubeconfig import write_kubeconfig
from ganggate.sim.topology import parse_shape

log = logging.getLogger("ganggate.sim.simulator")


def _gates(value: FeatureGates | str | None) -> FeatureGates:
    return value if isinstance(value, FeatureGates) else parse_feature_gates(value)


class Simulator:
    """kubesim served over HTTP on loopback; see docs/kubesim.md."""

    def __init__(
        self,
        nodes: int = 4,
        gpus_per_node: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        node_prefix: str = "node-",
        scheduler: bool = True,
        kubelet: bool = True,
        kubelet_start_seconds: float = 0.0,
        clock: Any = None,
        watch_history: int = 10000,
        bookmark_seconds: float = 5.0,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: str | None = None,
        controllers: bool = True,
        topology: Any = None,
        gpu_mem_per_card: int = 0,
        node_specs: list[dict[str, Any]] | None = None,
        components_process: bool = False,
        node_groups: list[Any] | None = None,
        autoscaler_options: dict[str, Any] | None = None,
        feature_gates: FeatureGates | str | None = None,
        scheduler_feature_gates: FeatureGates | str | None = None,
        dra_product: str | None = None,
    ) -> None:
        # topology: a TopologyShape or "BLOCKSxRACKSxNODES" (ganggate/sim/topology.py); it sets the
        # node count and labels each node with its zone, block and rack.
        # gpu_mem_per_card: share each node's cards (gpus_per_node of them) by GPU memory, in the
        # gpushare unit (ganggate/sim/kubelet/deviceplugin.py). node_specs: node_manifest keyword arguments, one
        # dict per node, instead of `nodes` alike (the Alibaba node list: ganggate/sim/alibaba_nodes.py).
        # components_process: run the scheduler, kubelet and controller stand-ins in a process of
        # their own (ganggate/sim/components.py), not on this event loop; `components` is then empty.
        # node_groups: NodeGroups (ganggate/sim/autoscaler/nodegroups.py) the autoscaler stand-in may
        # grow and shrink; autoscaler_options: its scan_seconds, unneeded_seconds, reservation_seconds.
        # feature_gates: the cluster's Kubernetes feature gates ("A=true,B=false" or FeatureGates;
        # unset ones at their 1.35 defaults); scheduler_feature_gates: the scheduler's, over those
        # (ganggate/sim/componentbase/featuregate.py).
        # dra_product: every node's GPUs are DRA devices of that product, published by the GPU DRA
        # driver stand-in (ganggate/sim/kubelet/dradriver.py), not nvidia.com/gpu capacity; the
        # DeviceClass's nvidia.com/gpu mapping needs DRAExtendedResource, turned on unless set.
        self.dra_product = dra_product
        self.feature_gates = _gates(feature_gates)
        if dra_product is not None and "DRAExtendedResource" not in self.feature_gates.overrides:
            self.feature_gates = self.feature_gates.with_overrides(FeatureGates({"DRAExtendedResource": True}))
        self.scheduler_feature_gates = self.feature_gates.with_overrides(_gates(scheduler_feature_gates))
        if node_groups and components_process:
            raise ValueError("the autoscaler runs on the API server's loop: node groups cannot go with components_process")
        self.autoscaler = {"node_groups": list(node_groups), **(autoscaler_options or {})} if node_groups else None
        if components_process and clock is not None and not hasattr(clock, "time_scale"):
            raise ValueError("components in their own process need the wall clock (a time scale), not a manual one")
        self.components_process = components_process
        self.topology = parse_shape(topology) if isinstance(topology, str) else topology
        self.node_specs = list(node_specs) if node_specs is not None else None
        self.gpu_mem_per_card = gpu_mem_per_card
        self.node_count = nodes if self.topology is None else self.topology.nodes
        if self.node_specs is not None:
            self.node_count = len(self.node_specs)
        self.gpus_per_node = gpus_per_node
        self.cpu = cpu
        self.memory = memory
        self.node_prefix = node_prefix
        self.scheduler_enabled = scheduler
        self.kubelet_enabled = kubelet
        self.controllers_enabled = controllers
        self.kubelet_start_seconds = kubelet_start_seconds
        self.clock = clock
        self.host = host
        self.port = port
        self.store = Store(watch_history=watch_history, epoch=getattr(clock, "epoch", None))
        self.faults = FaultInjector(self.store.hub.close_all, self.store.compact)
        self.server = ApiServer(self.store, self.faults, bookmark_seconds=bookmark_seconds,
                                feature_gates=self.feature_gates)
        self._kubeconfig_path = kubeconfig_path
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._runner: web.AppRunner | None = None
        self._components = Components()
        self.components: dict[str, Any] = self._components.by_name
        self._process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.kubeconfig = ""

    async def __aenter__(self) -> Simulator:
        try:
            await self.start()
        except BaseException:
            await self.stop()  # a port in use, say: release what was started
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        """Serve, create the default namespaces and nodes, write the kubeconfig, start the stand-ins."""
        self.server.bootstrap()
        self._runner = web.AppRunner(self.server.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []  # (aiohttp keeps the asyncio.Server here)
        self.port = sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        if self._kubeconfig_path is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="kubesim-")
            self._kubeconfig_path = str(Path(self._tempdir.name) / "kubeconfig")
        self.kubeconfig = str(write_kubeconfig(self._kubeconfig_path, self.url))
        for spec in self.node_specs or []:
            await self.add_node(**spec)
        for index in range(self.node_count if self.node_specs is None else 0):
            labels = None if self.topology is None else self.topology.labels(index)
            await self.add_node(f"{self.node_prefix}{index}", cpu=self.cpu, memory=self.memory, gpus=self.gpus_per_node,
                                labels=labels, gpu_mem_per_card=self.gpu_mem_per_card, dra_product=self.dra_product)
        for group in (self.autoscaler or {}).get("node_groups", []):  # the instance group holds its MinSize
            for index in range(group.min_size):
                await self.server.create_object(Target(discovery.by_key("nodes"), None, None, None),
                                                group.node(group.node_name(index)))
        enabled: dict[str, Any] = dict(scheduler=self.scheduler_enabled, kubelet=self.kubelet_enabled,
                       controllers=self.controllers_enabled, kubelet_start_seconds=self.kubelet_start_seconds,
                       feature_gates=self.feature_gates, scheduler_feature_gates=self.scheduler_feature_gates,
                       dra=self.dra_product is not None)
        if self.components_process:
            await self._start_process(enabled)
            return
        self._components.start(self.url, clock=self.clock, autoscaler=self.autoscaler, **enabled)
        if self.controllers_enabled or self.autoscaler:
            await self._components.wait_ready()

    async def _start_process(self, enabled: dict[str, Any]) -> None:
        """`python -m ganggate.sim.components`, until it says it is ready (or exits)."""
        flags = process_arguments(time_scale=getattr(self.clock, "time_scale", 1.0), **enabled)
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ganggate.sim.components", self.url, *flags, stdout=asyncio.subprocess.PIPE)
        assert self._process.stdout is not None
        line = await self._process.stdout.readline()
        if line != READY_LINE:
            raise RuntimeError(f"kubesim's components process exited before it was ready (code {await self._process.wait()})")

    async def stop(self) -> None:
        """Stop the stand-ins and the server; remove the temporary kubeconfig."""
        await self._components.stop()
        if self._process is not None:
            if self._process.returncode is None:
                self._process.terminate()
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
            self._process = None
        self.store.hub.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.server.close()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def api_client(self) -> Any:
        """A kubernetes_asyncio ApiClient for this simulator (the caller closes it)."""
        from kubernetes_asyncio import client

        configuration = client.Configuration(host=self.url)
        configuration.api_key = {"authorization": "kubesim-dummy-token"}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    async def add_node(self, name: str, cpu: str = "64", memory: str = "512Gi", gpus: int = 8,
                       labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
                       ready: bool = True, gpu_mem_per_card: int = 0, dra_product: str | None = None) -> dict[str, Any]:
        """Register a node (as its kubelet would) through the API server's create pipeline
        (dra_product: its GPUs are DRA devices of that product, not nvidia.com/gpu capacity)."""
        info = discovery.by_key("nodes")
        manifest = node_manifest(name, cpu, memory, gpus, labels, taints, ready, gpu_mem_per_card=gpu_mem_per_card,
                                 dra_product=dra_product)
        created = await self.server.create_object(Target(info, None, None, None), manifest)
        return self.store.get("nodes", None, created["metadata"]["name"]) or created

    async def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        import json

        import aiohttp

        async with aiohttp.ClientSession() as session:
            async with session.request(method, self.url + path, data=None if body is None else json.dumps(body),
                                       headers={"Content-Type": content_type}) as response:
                text = await response.text()
                if response.status >= 300:
                    raise RuntimeError(f"{method} {path}: HTTP {response.status}: {text[:300]}")
                return json.loads(text) if text else None

    async def set_node_ready(self, name: str, status: str = "True") -> dict[str, Any]:
        """Set the node's Ready condition ("True", "False" or "Unknown") through nodes/status, as its
        kubelet (True/False) or the node lifecycle controller when heartbeats stop (Unknown) would."""
        reasons = {"True": ("KubeletReady", "kubelet is posting ready status"),
                   "False": ("KubeletNotReady", "kubelet is not ready"),
                   "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status.")}
        if status not in reasons:
            raise ValueError(f"status must be one of {', '.join(reasons)}")
        from ganggate.sim.apiserver.store import now_rfc3339

        now = now_rfc3339()
        condition = {"type": "Ready", "status": status, "reason": reasons[status][0], "message": reasons[status][1],
                     "lastHeartbeatTime": now, "lastTransitionTime": now}
        return await self._request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"conditions": [condition]}},
                                   "application/strategic-merge-patch+json")

    async def delete_node(self, name: str) -> dict[str, Any]:
        """Delete the Node through the API; pod GC then force-deletes the pods bound to it."""
        return await self._request("DELETE", f"/api/v1/nodes/{name}")

    async def fail_pod(self, namespace: str, name: str, reason: str = "Error", exit_code: int | None = None) -> dict[str, Any]:
        """Have the kubelet fail the pod's containers now (POST /kubesim/faults/fail-pod)."""
        body: dict[str, Any] = {"namespace": namespace, "name": name, "reason": reason}
        if exit_code is not None:
            body["exitCode"] = exit_code
        return await self._request("POST", "/kubesim/faults/fail-pod", body)
