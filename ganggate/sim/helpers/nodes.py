"""A Node as a kubelet registers it (pkg/kubelet/kubelet_node_status.go initialNode): the
well-known labels, capacity = allocatable, the Ready condition and NodeSystemInfo. The embedded
harness and the autoscaler's cloud provider both make nodes with it, as both stand for a machine
whose kubelet joins the cluster.
"""

from __future__ import annotations

import uuid
from typing import Any

from ganggate.sim.api.gpushare import GPU_COUNT, GPU_MEM
from ganggate.sim.apimachinery.timestamps import now_rfc3339

GFD_COUNT = "nvidia.com/gpu.count"  # gpu-feature-discovery's labels
GFD_PRODUCT = "nvidia.com/gpu.product"


def node_manifest(name: str, cpu: str = "64", memory: str = "512Gi", gpus: int = 8,
                  labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
                  ready: bool = True, pods: str = "110", gpu_mem_per_card: int = 0,
                  dra_product: str | None = None) -> dict[str, Any]:
    """A Node as a kubelet registers it: hostname/os labels, capacity = allocatable, Ready condition.

    With gpu_mem_per_card, its `gpus` cards are also shared as the gpushare device plugin advertises
    them: `aliyun.com/gpu-mem` = gpus * gpu_mem_per_card and `aliyun.com/gpu-count` = gpus
    (ganggate/sim/kubelet/deviceplugin.py). With dra_product the cards are DRA devices instead: no
    nvidia.com/gpu in capacity, the GFD labels nvidia.com/gpu.count and nvidia.com/gpu.product set."""
    capacity: dict[str, str] = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
    if gpus and dra_product is None:
        capacity["nvidia.com/gpu"] = str(gpus)
    if gpus and gpu_mem_per_card > 0:
        capacity[GPU_MEM] = str(gpus * gpu_mem_per_card)
        capacity[GPU_COUNT] = str(gpus)
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    if gpus and dra_product is not None:
        # GPUs served by DRA (ganggate/sim/kubelet/dradriver.py): none in capacity; the machine's
        # cards as NVIDIA's GPU feature discovery labels them, which the driver stand-in reads
        # in place of NVML.
        node_labels.update({GFD_COUNT: str(gpus), GFD_PRODUCT: dra_product.replace(" ", "-")})
    node_labels.update(labels or {})
    now = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"taints": list(taints)} if taints else {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [{
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet is posting ready status" if ready else "kubelet is not ready",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }],
            "addresses": [{"type": "Hostname", "address": name}],
            # NodeSystemInfo: every field is required in the API schema (clients validate it).
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name + ".boot")),
                "containerRuntimeVersion": "containerd://1.7.0-kubesim",
                "kernelVersion": "6.1.0-kubesim",
                "kubeProxyVersion": "v1.31.0-kubesim",
                "kubeletVersion": "v1.31.0-kubesim",
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
                "operatingSystem": "linux",
                "osImage": "kubesim",
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            },
        },
    }
