"""DRA in the controller's picture: the DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates it watches, read into what ClusterState counts. Pure.

- A node offers, per resource name (core.fit.devices), the devices of the current generation of
  each pool's slices published for it: its allocatable gets them beside what its status says.
- Every allocated claim uses its devices on its node (whoever holds it: a pod of ours, a pod of
  another scheduler, a released member of the gang being planned): they are added to the node's
  use, and a bound pod's own DRA request is not counted again.
- A pod asks, beside its containers' requests, the devices of its claims: a claim from a template
  (one per pod) by the template's requests; a shared claim (resourceClaimName) once, on the first
  of its pods by key, and nothing once it is allocated (its devices are in use already). A
  template or class not seen (yet) is asked as `resourceclaimtemplate/<name> (not found)`, which
  no node has: the gang waits, and says why.
Limits: devices published for all nodes or by node selector are not counted; a shared claim's
pods are not pinned to its node; matchAttribute constraints are not checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from ganggate.core.fit.devices import (
    CLASS_PREFIX,
    DEFAULT_GPU_CLASSES,
    Device,
    cel_expressions,
    class_resource,
    matches,
    requests_of,
    selector_resource,
)
from ganggate.core.fit.resources import Resources, gpus, subtract

CLAIMS = "resourceclaims"
TEMPLATES = "resourceclaimtemplates"
SLICES = "resourceslices"
CLASSES = "deviceclasses"
KINDS = (CLASSES, SLICES, CLAIMS, TEMPLATES)
UNIT = 1000  # a device, in the milli-units every amount is kept in


def pod_claim_refs(spec: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """(entry name, "template" | "claim", name) of a pod spec's resourceClaims."""
    out = []
    for entry in spec.get("resourceClaims") or []:
        if entry.get("resourceClaimTemplateName"):
            out.append((str(entry.get("name", "")), "template", str(entry["resourceClaimTemplateName"])))
        elif entry.get("resourceClaimName"):
            out.append((str(entry.get("name", "")), "claim", str(entry["resourceClaimName"])))
    return tuple(out)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name", ""))


def allocation_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocated claim's devices are on (its allocation's nodeSelector names it)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for req in list(term.get("matchFields") or []) + list(term.get("matchExpressions") or []):
            if req.get("key") in ("metadata.name", "kubernetes.io/hostname") and req.get("operator") == "In":
                if req.get("values"):
                    return str(req["values"][0])
    return None


def allocated_devices(claim: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each device an allocated claim holds."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    return [(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            for r in (allocation.get("devices") or {}).get("results") or []]


def _controller_pod(claim: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    for ref in ((claim or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            return dict(ref)
    return None


def owner_pod_key(claim: Mapping[str, Any] | None) -> str | None:
    """"<namespace>/<pod>" of the pod a claim was made for (its controller ownerReference)."""
    ref = _controller_pod(claim)
    namespace = ((claim or {}).get("metadata") or {}).get("namespace")
    return f"{namespace}/{ref['name']}" if ref is not None and namespace and ref.get("name") else None


def owner_pod_uid(claim: Mapping[str, Any] | None) -> str | None:
    ref = _controller_pod(claim)
    return str(ref.get("uid", "")) if ref is not None else None


def _owned_by(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    """(owner pod uid, pod claim entry) of a claim the resourceclaim controller made for a pod
    (its controller ownerReference and the annotation resource.kubernetes.io/pod-claim-name)."""
    meta = claim.get("metadata") or {}
    entry = (meta.get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name")
    if not entry:
        return None
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            return str(ref.get("uid", "")), str(entry)
    return None


class DraIndex:
    """What the controller knows of DRA objects, and the amounts it counts from them."""

    def __init__(self, gpu_classes: tuple[str, ...] = DEFAULT_GPU_CLASSES) -> None:
        self.gpu_classes = tuple(gpu_classes)
        self.classes: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, dict[str, Any]] = {}  # "ns/name" -> the template's ResourceClaimSpec
        self.claims: dict[str, dict[str, Any]] = {}
        #: selector resources pods ask: name -> (class, selectors); nodes count their devices
        self.selector_keys: dict[str, tuple[str, tuple[str, ...]]] = {}
        #: shared claim key -> the pods naming it (the first by key counts it)
        self.claim_users: dict[str, set[str]] = {}
        #: (owner pod uid, pod claim entry name) -> the claim the resourceclaim controller made
        self.claims_by_owner: dict[tuple[str, str], str] = {}
        #: (driver, pool, device) -> the allocated claims holding it (one, unless two writers raced)
        self.holders: dict[tuple[str, str, str], set[str]] = {}
        self._pools: dict[tuple[str, str], set[str]] = {}  # (driver, pool) -> its slices' names
        self._node_slices: dict[str, set[str]] = {}  # node -> names of the slices published for it
        self._devices: dict[str, list[Device]] = {}  # node -> its current devices (made when asked)
        self._by_id: dict[tuple[str, str, str], Device] = {}
        self._keys: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def claim_of(self, pod_uid: str, entry: str) -> str | None:
        """The key of the claim made for a pod's template claim entry, if seen."""
        return self.claims_by_owner.get((pod_uid, entry))

    @property
    def active(self) -> bool:
        return bool(self.classes or self.slices)

    # ---- events -----------------------------------------------------------------------------

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> set[str] | None:
        """Record one object; the nodes whose totals may have changed (None: every node)."""
        key = _key(obj)
        if kind == TEMPLATES:
            if event_type == "DELETED":
                self.templates.pop(key, None)
            else:
                self.templates[key] = (obj.get("spec") or {}).get("spec") or {}
            return set()
        if kind == CLAIMS:
            stored = self.claims.get(key)
            owned = _owned_by(stored if event_type == "DELETED" and stored is not None else obj)
            for held in allocated_devices(stored):
                holders = self.holders.get(held)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del self.holders[held]
            if event_type != "DELETED":
                for held in allocated_devices(obj):
                    self.holders.setdefault(held, set()).add(key)
            if event_type == "DELETED":
                self.claims.pop(key, None)
                if owned is not None and self.claims_by_owner.get(owned) == key:
                    del self.claims_by_owner[owned]
            else:
                self.claims[key] = dict(obj)
                if owned is not None:
                    self.claims_by_owner[owned] = key
            return set()
        if kind == CLASSES:
            if event_type == "DELETED":
                self.classes.pop(key, None)
            else:
                self.classes[key] = dict(obj)
            self._keys.clear()
            return None
        if kind != SLICES:
            raise ValueError(f"not a DRA kind: {kind}")
        touched: set[str] = set()
        old = self.slices.pop(key, None)
        for item in (old, None if event_type == "DELETED" else obj):
            if item is None:
                continue
            present: Mapping[str, Any] = item
            spec = item.get("spec") or {}
            pool = (str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", "")))
            node = str(spec.get("nodeName") or "")
            if item is old:
                self._pools.get(pool, set()).discard(key)
                self._node_slices.get(node, set()).discard(key)
            else:
                self.slices[key] = dict(item)
                self._pools.setdefault(pool, set()).add(key)
                self._node_slices.setdefault(node, set()).add(key)
            for name in self._pools.get(pool, set()) | {key}:
                other = self.slices.get(name) or present
                touched.add(str((other.get("spec") or {}).get("nodeName") or ""))
        touched.discard("")
        for node in touched:
            for device in self._devices.pop(node, []):
                self._by_id.pop(device.id, None)
                self._keys.pop(device.id, None)
        return touched

    def register(self, keys: Iterable[tuple[str, str, tuple[str, ...]]]) -> bool:
        """Selector resources pods ask (name, class, selectors); True when one is new."""
        new = False
        for name, class_name, selectors in keys:
            if name not in self.selector_keys:
                self.selector_keys[name] = (class_name, selectors)
                new = True
        if new:
            self._keys.clear()
        return new

    # ---- what nodes offer ----------------------------------------------------------------------

    def _newest(self, pool: tuple[str, str]) -> int:
        return max((int(((self.slices[n].get("spec") or {}).get("pool") or {}).get("generation") or 0)
                    for n in self._pools.get(pool, ()) if n in self.slices), default=0)

    def devices_of(self, node: str) -> list[Device]:
        """The node's devices: of each pool, the slices of its newest generation only."""
        devices = self._devices.get(node)
        if devices is None:
            devices = []
            for name in sorted(self._node_slices.get(node, ())):
                spec = self.slices[name].get("spec") or {}
                driver, pool = str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", ""))
                if int((spec.get("pool") or {}).get("generation") or 0) != self._newest((driver, pool)):
                    continue  # an older generation, being replaced
                for raw in spec.get("devices") or []:
                    device = Device((driver, pool, str(raw.get("name", ""))), raw)
                    devices.append(device)
                    self._by_id[device.id] = device
            self._devices[node] = devices
        return devices

    def class_key(self, class_name: str) -> str:
        return class_resource(class_name, self.classes.get(class_name), self.gpu_classes)

    def class_keys(self, class_name: str) -> tuple[str, ...]:
        """The class's resource, and (when that is an alias such as nvidia.com/gpu, which
        device-plugin nodes offer too) `deviceclass.resource.k8s.io/<class>`, which only nodes
        with the class's devices offer: a claim asks both, so it is planned on DRA nodes only."""
        alias, exact = self.class_key(class_name), CLASS_PREFIX + class_name
        return (alias,) if alias == exact else (alias, exact)

    def _class_selectors(self, class_name: str) -> tuple[str, ...]:
        spec = (self.classes.get(class_name) or {}).get("spec") or {}
        return cel_expressions(spec.get("selectors"))

    def device_keys(self, device: Device) -> tuple[str, ...]:
        """Every resource name a device is counted under (its classes, the selectors it matches)."""
        keys = self._keys.get(device.id)
        if keys is None:
            found: dict[str, None] = {}
            in_class = set()
            for class_name in self.classes:
                if all(matches(e, device) for e in self._class_selectors(class_name)):
                    for key in self.class_keys(class_name):
                        found[key] = None
                    in_class.add(class_name)
            for name, (class_name, selectors) in self.selector_keys.items():
                if class_name in in_class and all(matches(e, device) for e in selectors):
                    found[name] = None
            keys = self._keys[device.id] = tuple(found)
        return keys

    def node_totals(self, node: str) -> Resources:
        """The devices published for the node, per resource name (milli-units)."""
        out: Resources = {}
        for device in self.devices_of(node):
            for key in self.device_keys(device):
                out[key] = out.get(key, 0) + UNIT
        return out

    def nodes(self) -> list[str]:
        return [node for node, names in self._node_slices.items() if names]

    def claim_use(self, claim: Mapping[str, Any]) -> tuple[str | None, Resources]:
        """The node of an allocated claim and the amounts its devices count for."""
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return None, {}
        node = allocation_node(claim)
        if node is not None:
            self.devices_of(node)
        out: Resources = {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            device = self._by_id.get((str(result.get("driver")), str(result.get("pool")), str(result.get("device"))))
            if device is None:
                continue
            for key in self.device_keys(device):
                out[key] = out.get(key, 0) + UNIT
        return node, out

    # ---- what pods ask --------------------------------------------------------------------------

    def _spec_demand(self, spec: Mapping[str, Any], out: Resources, keys: list[Any]) -> None:
        for request in requests_of(spec):
            if request.class_name not in self.classes:
                name = f"{self.class_key(request.class_name)} (class {request.class_name} not found)"
                out[name] = out.get(name, 0) + UNIT
                continue
            class_key = self.class_key(request.class_name)
            count = request.count if not request.all else self._all_count(request)
            for key in self.class_keys(request.class_name):
                out[key] = out.get(key, 0) + count * UNIT
            if request.selectors:
                name = selector_resource(class_key, request.selectors)
                keys.append((name, request.class_name, request.selectors))
                out[name] = out.get(name, 0) + count * UNIT

    def _all_count(self, request: Any) -> int:
        """allocationMode All: as many as the most any node has of the class (at least one)."""
        key = self.class_key(request.class_name)
        return max([self.node_totals(n).get(key, 0) // UNIT for n in self.nodes()] + [1])

    def demand(self, namespace: str, pod_key: str, refs: Iterable[tuple[str, str, str]]) -> tuple[Resources, list[Any]]:
        """A pod's DRA request, and the selector resources it names (to register)."""
        out: Resources = {}
        keys: list[Any] = []
        for _, kind, name in refs:
            if kind == "template":
                spec = self.templates.get(f"{namespace}/{name}")
                if spec is None:
                    missing = f"resourceclaimtemplate/{name} (not found)"
                    out[missing] = out.get(missing, 0) + UNIT
                    continue
                self._spec_demand(spec, out, keys)
                continue
            claim_key = f"{namespace}/{name}"
            claim = self.claims.get(claim_key)
            if claim is not None and (claim.get("status") or {}).get("allocation"):
                continue  # its devices are counted as the claim's use
            if min(self.claim_users.get(claim_key) or {pod_key}) != pod_key:
                continue  # a shared claim counts once, on its first pod
            if claim is None:
                missing = f"resourceclaim/{name} (not found)"
                out[missing] = out.get(missing, 0) + UNIT
                continue
            self._spec_demand(claim.get("spec") or {}, out, keys)
        return out, keys


class _Requesting(Protocol):
    """What with_demand and bound_use read of a PodInfo (core.state.pods, which imports this module):
    a dataclass, which with_demand copies with dataclasses.replace."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def request(self) -> Resources: ...
    @property
    def dra_demand(self) -> Resources | None: ...


_Pod = TypeVar("_Pod", bound=_Requesting)


def with_demand(info: _Pod, demand: Resources) -> _Pod:
    """The PodInfo with its DRA demand in its request (its previous DRA demand taken out)."""
    old = info.dra_demand or {}
    if old == demand:
        return info
    base = subtract(info.request, old) if old else dict(info.request)
    request = {k: v for k, v in base.items() if v}
    for name, amount in demand.items():
        request[name] = request.get(name, 0) + amount
    gpu_resources = tuple(k for k, v in request.items() if v > 0 and (k == "nvidia.com/gpu" or k.endswith("/gpu")))
    return dataclasses.replace(info, request=request, dra_demand=dict(demand) or None, gpu=gpus(request),
                               gpu_resources=gpu_resources)


def bound_use(info: _Requesting, dra_served: Iterable[str]) -> Resources:
    """What a bound pod uses on its node apart from its claims (counted as the claims' use)."""
    dropped = set(dra_served) | set(info.dra_demand or {})
    if not dropped.intersection(info.request):
        return info.request
    return {k: v for k, v in info.request.items() if k not in dropped}
