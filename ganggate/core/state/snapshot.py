"""Snapshots of a cluster as plain API objects: reading `kubectl get nodes,pods -A -o json`,
and building Node and Pod objects for what-if snapshots, benchmarks and tests.

The builders make objects shaped as the API server serves them (status.allocatable, the
Ready condition, spec.schedulingGates, ...), so everything downstream reads them exactly as
it reads real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ganggate.contract import DECISION_ANNOTATION, GATE_NAME, GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM
from ganggate.core.fit.nodematch import HOSTNAME_LABEL
from ganggate.core.fit.resources import GPU


class SnapshotError(ValueError):
    """A file that is not a readable snapshot of nodes and pods."""


def load_snapshot(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and pods of a `kubectl get nodes,pods -A -o json` (or -o yaml) file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_snapshot(text, str(path))


#: DRA kinds a snapshot may hold beside nodes and pods (`kubectl get nodes,pods,deviceclasses,
#: resourceslices,resourceclaims,resourceclaimtemplates -A -o json`), by kind: the name
#: ClusterState.apply_dra takes, in the order they are applied (core.state.dra).
DRA_KINDS = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices",
             "ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}


def load_snapshot_dra(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """Nodes, pods and DRA objects ((apply_dra kind, object), in the order to apply) of a file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_snapshot_dra(text, str(path))


def parse_snapshot(text: str, name: str = "snapshot") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a List (or a single Node/Pod, or a NodeList/PodList) into nodes and pods."""
    nodes, pods, _ = parse_snapshot_dra(text, name)
    return nodes, pods


def parse_snapshot_dra(text: str, name: str = "snapshot") -> tuple[
        list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """`parse_snapshot`, with the DRA objects too (DRA_KINDS, in their order)."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        import yaml  # kubectl -o yaml; only when the file is not JSON

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SnapshotError(f"{name}: neither JSON nor YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise SnapshotError(f"{name}: expected a Kubernetes List object with items")
    kind = data.get("kind") or ""
    items = data.get("items") if "items" in data else [data]
    if not isinstance(items, list):
        raise SnapshotError(f"{name}: items is not a list")
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    dra: list[tuple[str, dict[str, Any]]] = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise SnapshotError(f"{name}: item {position} is not an object")
        item_kind = item.get("kind") or kind.removesuffix("List")
        if item_kind == "Node":
            nodes.append(item)
        elif item_kind == "Pod":
            pods.append(item)
        elif item_kind in DRA_KINDS:
            dra.append((DRA_KINDS[item_kind], item))
    if not nodes and not pods:
        raise SnapshotError(f"{name}: no Node or Pod objects (kind {kind or 'missing'})")
    order = list(DRA_KINDS.values())
    return nodes, pods, sorted(dra, key=lambda pair: order.index(pair[0]))


def check_objects(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    """Raise SnapshotError naming the first object whose resource amounts cannot be read."""
    from ganggate.core.fit.resources import QuantityError, node_allocatable, pod_requests

    for kind, objects, read in (("node", nodes, node_allocatable), ("pod", pods, pod_requests)):
        for obj in objects:
            meta = obj.get("metadata") or {}
            name = meta.get("name") or "?"
            if kind == "pod":
                name = f"{meta.get('namespace') or 'default'}/{name}"
            try:
                read(obj)
            except (QuantityError, AttributeError, TypeError) as exc:
                raise SnapshotError(f"{kind} {name}: {exc}") from exc


def make_node(
    name: str,
    *,
    gpus: int | str = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, Any]] = (),
    ready: bool = True,
    unschedulable: bool = False,
    extra: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the API serves it, with allocatable == capacity."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    if gpus not in (0, "0"):
        resources[GPU] = str(gpus)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {HOSTNAME_LABEL: name, "kubernetes.io/os": "linux", **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    gang: str | None = None,
    pod_num: int | str | None = None,
    min_available: int | str | None = None,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    gated: bool | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    created: str = "2024-01-01T00:00:00Z",
    priority: int | None = None,
    scheduler_name: str = "default-scheduler",
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Mapping[str, Any]] = (),
    owner: str | None = None,
    decision: Mapping[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A Pod with one container; a gang member (gated unless told otherwise) when `gang`."""
    annotations: dict[str, str] = {}
    if gang is not None:
        annotations[GROUP_NAME] = gang
        annotations[GROUP_POD_NUM] = str(pod_num if pod_num is not None else 1)
        if min_available is not None:
            annotations[GROUP_MIN_AVAILABLE] = str(min_available)
    if decision is not None:
        annotations[DECISION_ANNOTATION] = json.dumps(dict(decision), separators=(",", ":"))
    limits = {GPU: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
            }
        ],
    }
    if gated if gated is not None else gang is not None:
        spec["schedulingGates"] = [{"name": GATE_NAME}]
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{namespace}-{name}",
        "creationTimestamp": created,
        "annotations": annotations,
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }
