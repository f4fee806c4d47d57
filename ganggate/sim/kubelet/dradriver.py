"""A stand-in for NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu), an HTTP
client of the API server.

As the driver's kubelet plugin does on each node (cmd/gpu-kubelet-plugin: its devices from NVML,
published through k8s.io/dynamic-resource-allocation/resourceslice), it publishes one
ResourceSlice per node for driver `gpu.nvidia.com`, pool = the node's name, generation 1, one
device `gpu-<index>` per card with the attributes the driver sets (type "gpu", uuid, productName,
brand, architecture, cudaComputeCapability and driverVersion as versions, index, minor) and
capacity `memory`; the slice is owned by its Node (ownerReference) and goes with it. The machine's
cards are read from the node's GPU feature discovery labels (nvidia.com/gpu.count,
nvidia.com/gpu.product) in place of NVML. As the driver's Helm chart does
(deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-gpu.yaml), it creates the DeviceClass
`gpu.nvidia.com` selecting `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`,
with extendedResourceName nvidia.com/gpu (kept by the API server only with DRAExtendedResource).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import aiohttp

from ganggate.sim.api import resource as api
from ganggate.sim.client.informers import Reflector
from ganggate.sim.helpers.nodes import GFD_COUNT, GFD_PRODUCT

log = logging.getLogger(__name__)

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
EXTENDED_RESOURCE = "nvidia.com/gpu"
CLASS_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
DEFAULT_PRODUCT = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "570.124.6"
# productName -> (architecture, cudaComputeCapability, memory) as NVML reports them
PRODUCTS: dict[str, tuple[str, str, str]] = {
    "NVIDIA H100 80GB HBM3": ("Hopper", "9.0.0", "81559Mi"),
    "NVIDIA H200": ("Hopper", "9.0.0", "143771Mi"),
    "NVIDIA B200": ("Blackwell", "10.0.0", "183359Mi"),
    "NVIDIA A100-SXM4-80GB": ("Ampere", "8.0.0", "81920Mi"),
    "NVIDIA A100-SXM4-40GB": ("Ampere", "8.0.0", "40960Mi"),
    "NVIDIA L4": ("Ada Lovelace", "8.9.0", "23034Mi"),
    "Tesla V100-SXM2-32GB": ("Volta", "7.0.0", "32768Mi"),
}


def product_name(label: str) -> str:
    """The productName a GFD product label stands for (the label has dashes for spaces)."""
    for name in PRODUCTS:
        if name.replace(" ", "-") == label:
            return name
    return label.replace("-", " ")


def device_class() -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}],
                     "extendedResourceName": EXTENDED_RESOURCE}}


def node_slice(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ResourceSlice of a node's GPUs, or None when its labels show no card."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        count = int(labels.get(GFD_COUNT) or 0)
    except ValueError:
        return None
    if count <= 0:
        return None
    name = meta["name"]
    product = product_name(labels.get(GFD_PRODUCT) or DEFAULT_PRODUCT.replace(" ", "-"))
    architecture, compute, memory = PRODUCTS.get(product, ("unknown", "0.0.0", "0"))
    devices = []
    for index in range(count):
        gpu_uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.gpu{index}"))
        devices.append({
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"}, "uuid": {"string": gpu_uuid}, "productName": {"string": product},
                "brand": {"string": "Nvidia"}, "architecture": {"string": architecture},
                "cudaComputeCapability": {"version": compute}, "driverVersion": {"version": DRIVER_VERSION},
                "index": {"int": index}, "minor": {"int": index},
            },
            "capacity": {"memory": {"value": memory}},
        })
    return {
        "apiVersion": api.API_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{DRIVER}",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": meta.get("uid", ""),
                                          "controller": True}]},
        "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }


class GpuDraDriver:
    """Publishes every labelled node's GPUs as a ResourceSlice, and the DeviceClass."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._dirty: asyncio.Queue[tuple[str, dict]] = asyncio.Queue()
        self.ready = asyncio.Event()

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    def on_node(self, kind: str, node: dict, old: dict | None) -> None:
        if kind == "DELETED" or old is None or (old.get("metadata") or {}).get("labels") != (node.get("metadata") or {}).get("labels"):
            self._dirty.put_nowait((kind, node))

    async def _write(self, method: str, path: str, body: Any = None) -> int:
        async with self._http.request(method, self.base_url + path, json=body) as response:
            await response.read()
            return response.status

    async def _sync(self, kind: str, node: dict) -> None:
        path = f"/apis/{api.API_VERSION}/resourceslices/{node['metadata']['name']}-{DRIVER}"
        wanted = None if kind == "DELETED" else node_slice(node)
        if wanted is None:
            await self._write("DELETE", path)
            return
        status = await self._write("POST", f"/apis/{api.API_VERSION}/resourceslices", wanted)
        if status == 409:  # already published (a restart): leave it
            return
        if status >= 300:
            raise RuntimeError(f"publishing {path}: HTTP {status}")

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            status = await self._write("POST", f"/apis/{api.API_VERSION}/deviceclasses", device_class())
            if status >= 300 and status != 409:
                log.warning("creating DeviceClass %s: HTTP %s", DEVICE_CLASS, status)
            nodes = Reflector(session, self.base_url, "/api/v1/nodes", self.on_node)
            watcher = asyncio.ensure_future(nodes.run())
            try:
                await nodes.synced.wait()
                while not self._dirty.empty():
                    await self._sync(*self._dirty.get_nowait())
                self.ready.set()
                while True:
                    kind, node = await self._dirty.get()
                    try:
                        await self._sync(kind, node)
                    except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError) as exc:
                        log.info("dra driver: %s; retrying", exc)
                        await asyncio.sleep(0.5)
                        self._dirty.put_nowait((kind, node))
            finally:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
