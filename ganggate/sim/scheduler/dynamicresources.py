"""kube-scheduler's DynamicResources plugin (pkg/scheduler/framework/plugins/dynamicresources at v1.35)
and its structured allocator (k8s.io/dynamic-resource-allocation/structured), for kubesim's scheduler.

PreFilter: every claim the pod names must exist (a template's claim is the one the resourceclaim
controller recorded in status.resourceClaimStatuses), not be being deleted, and, if allocated and
reserved for 256 pods already, have room for this one. Filter, per node: a claim allocated already
must be on this node (its allocation's nodeSelector); the others are allocated from the devices of
this node's slices (each pool's current generation only; slices for all nodes too), skipping
devices any allocated or assumed claim holds: for each request, the DeviceClass's selectors and the
request's (CEL, ganggate/sim/helpers/dracel.py) pick the candidates; `ExactCount` takes `count` of
the free ones, `All` takes every candidate and fails if one is in use or there is none;
`firstAvailable` takes the first subrequest that fits. Reserve: the allocation is assumed (its
devices held) until the claim's informer shows it. PreBind (bindClaim): the finalizer
`resource.kubernetes.io/delete-protection` is added in an update of the claim, then the allocation
and the pod's reservedFor entry are written to the claim's status before the pod is bound; a claim
allocated already (by this scheduler for another pod, or by any other client: the plugin does not
ask who wrote an allocation) is only checked in Filter against its allocation's nodeSelector
(PreFilter keeps it as `availableOnNodes`; no allocator runs for it) and gets the pod added to
reservedFor, and its devices count as in use for every other pod (ListAllAllocatedDevices reads
every allocated claim of the informer).

DRAExtendedResource: a request for an extended resource (nvidia.com/gpu) that a DeviceClass names in
extendedResourceName is served on a node without that resource in its allocatable by allocating
that many devices of the class: NodeResourcesFit lets it through there, this plugin allocates, and
PreBind creates the pod's special claim (generateName `<pod>-extended-resources-`, annotation
`resource.kubernetes.io/extended-resource-claim: "true"`, requests `container-<i>-request-<j>`,
owned by the pod) and writes pod.status.extendedResourceClaimStatus.

Nominated pods hold no devices: the plugin has no PreFilterExtensions (dynamicresources.go at
v1.35: `func (pl *DynamicResources) PreFilterExtensions() fwk.PreFilterExtensions { return nil }`),
so the framework's addGENominatedPods adds a nominated pod's NodeInfo requests only and the DRA
allocator, built in PreFilter from the allocated claims and the in-flight allocations, never sees
the claims of a pod nominated to a node: another pod may take those devices first.

Not done: constraints (matchAttribute), admin access, device taints, partitionable devices and
consumable capacity, slices with a nodeSelector, and backtracking across requests: the allocator
takes devices in name order request by request, which is exact when requests do not compete for
the same devices, as a pod's GPU requests do not.
Why this module is long: the plugin's filter, reserve and bind share the allocator's state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from ganggate.sim.api import resource as api
from ganggate.sim.apimachinery.quantity import QuantityError, parse_nanos
from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.helpers import dracel

log = logging.getLogger(__name__)

CANNOT_ALLOCATE = "cannot allocate all claims"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
NATIVE = ("cpu", "memory", "ephemeral-storage", "pods")
DeviceId = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class Device:
    """One published device: its id, and its CEL `device` variable."""

    id: DeviceId
    variable: Any


@dataclass
class PodPlan:
    """What the pod's cycle decided: the allocations to write and the shared claims to reserve."""

    node: str
    allocate: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim key -> allocation
    reserve: list[str] = field(default_factory=list)  # claim keys allocated already
    extended: dict[str, Any] | None = None  # the special claim's spec, allocation and request mapping


def extended_requests(pod: Mapping[str, Any], mapped: Mapping[str, str]) -> list[tuple[str, str, str, int]]:
    """(container name, resource, request name, count) of the pod's extended-resource requests a
    DeviceClass serves (DRAExtendedResource), in container order."""
    out = []
    for index, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        resources = container.get("resources") or {}
        amounts = dict(resources.get("limits") or {})
        amounts.update(resources.get("requests") or {})
        number = 0
        for name in sorted(amounts):
            if name in mapped and name not in NATIVE:
                try:
                    count = parse_nanos(str(amounts[name])) // 10**9
                except QuantityError:
                    continue
                if count > 0:
                    out.append((container.get("name", ""), name, f"container-{index}-request-{number}", count))
                    number += 1
    return out


class DynamicResources:
    """The plugin's informer-fed state and its filter, reserve and pre-bind steps."""

    def __init__(self, *, extended_resource: bool = False) -> None:
        self.extended_resource = extended_resource  # the DRAExtendedResource gate
        self.classes: dict[str, dict] = {}
        self.slices: dict[str, dict] = {}
        self.claims: dict[str, dict] = {}
        self.assumed: dict[str, dict[str, Any]] = {}  # claim key -> allocation written or being written
        self.plans: dict[str, PodPlan] = {}  # pod key -> its reserved plan, until bound
        self._devices: dict[str, list[Device]] | None = None  # node ("" = every node) -> devices
        self._in_use: set[DeviceId] | None = None
        self._matches: dict[tuple[str, DeviceId], bool | str] = {}

    # -- informer handlers -----------------------------------------------------------------

    def on_class(self, kind: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.classes.pop(name, None)
        else:
            self.classes[name] = obj
        self._matches.clear()

    def on_slice(self, kind: str, obj: dict, old: dict | None) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.slices.pop(name, None)
        else:
            self.slices[name] = obj
        self._devices = None

    def on_claim(self, kind: str, obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        if kind == "DELETED":
            self.claims.pop(key, None)
            self.assumed.pop(key, None)
        else:
            self.claims[key] = obj
            if (obj.get("status") or {}).get("allocation"):
                self.assumed.pop(key, None)  # the informer caught up with our write
        self._in_use = None

    # -- what is published and what is taken -------------------------------------------------

    def _node_devices(self) -> dict[str, list[Device]]:
        if self._devices is None:
            newest: dict[tuple[str, str], int] = {}
            for obj in self.slices.values():
                spec = obj.get("spec") or {}
                pool = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
                newest[pool] = max(newest.get(pool, 0), int((spec.get("pool") or {}).get("generation") or 0))
            devices: dict[str, list[Device]] = {}
            for obj in sorted(self.slices.values(), key=lambda o: o["metadata"]["name"]):
                spec = obj.get("spec") or {}
                driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
                if int((spec.get("pool") or {}).get("generation") or 0) != newest[(driver, pool)]:
                    continue  # an older generation of the pool: being replaced
                node = spec.get("nodeName") or ("" if spec.get("allNodes") else None)
                if node is None:
                    continue  # nodeSelector / perDeviceNodeSelection slices: not served by kubesim
                for device in spec.get("devices") or []:
                    devices.setdefault(node, []).append(
                        Device((driver, pool, device["name"]), dracel.device_variable(driver, device)))
            self._devices = devices
        return self._devices

    def in_use(self) -> set[DeviceId]:
        if self._in_use is None:
            used: set[DeviceId] = set()
            for claim in self.claims.values():
                used.update(api.allocated_devices(claim))
            self._in_use = used
        out = set(self._in_use)
        for allocation in self.assumed.values():
            out.update(api.allocated_devices({"status": {"allocation": allocation}}))
        return out

    def _match(self, expression: str, device: Device) -> bool | str:
        key = (expression, device.id)
        if key not in self._matches:
            self._matches[key] = dracel.matches(expression, device.variable)
        return self._matches[key]

    def mapped_extended(self) -> dict[str, str]:
        """Extended resource name -> the DeviceClass serving it (DRAExtendedResource)."""
        if not self.extended_resource:
            return {}
        out: dict[str, str] = {}
        for name in sorted(self.classes):  # the oldest class wins in the real plugin; by name here
            resource = (self.classes[name].get("spec") or {}).get("extendedResourceName")
            if resource and resource not in out:
                out[resource] = name
        return out

    # -- the allocator -----------------------------------------------------------------------

    def _candidates(self, request: Mapping[str, Any], devices: list[Device]) -> list[Device] | str:
        class_name = request.get("deviceClassName", "")
        device_class = self.classes.get(class_name)
        if device_class is None:
            return f'device class {class_name} does not exist'
        expressions = [s["cel"]["expression"] for s in (device_class.get("spec") or {}).get("selectors") or []
                       if (s or {}).get("cel")]
        expressions += [s["cel"]["expression"] for s in request.get("selectors") or [] if (s or {}).get("cel")]
        out = []
        for device in devices:
            verdicts = [self._match(e, device) for e in expressions]
            errors = [v for v in verdicts if isinstance(v, str)]
            if errors:
                return errors[0]
            if all(verdicts):
                out.append(device)
        return out

    def _take(self, request: Mapping[str, Any], devices: list[Device], taken: set[DeviceId]) -> list[Device] | None:
        candidates = self._candidates(request, devices)
        if isinstance(candidates, str):
            return None
        if request.get("allocationMode") == api.ALL:
            if not candidates or any(d.id in taken for d in candidates):
                return None
            return candidates
        free = [d for d in candidates if d.id not in taken]
        count = int(request.get("count") or 1)
        return free[:count] if len(free) >= count else None

    def allocate(self, requests: Iterable[Mapping[str, Any]], node: str, taken: set[DeviceId]) -> list[dict] | None:
        """The results for a claim's requests on a node (devices added to `taken`), or None."""
        devices = self._node_devices().get(node, []) + self._node_devices().get("", [])
        results: list[dict] = []
        for request in requests:
            options = ([(request["name"], request["exactly"])] if request.get("exactly") else
                       [(f"{request['name']}/{sub['name']}", sub) for sub in request.get("firstAvailable") or []])
            for option_name, option in options:
                picked = self._take(option, devices, taken)
                if picked is not None:
                    name = option_name  # the request (or its firstAvailable alternative) the devices went to
                    break
            else:
                return None
            for device in picked:
                taken.add(device.id)
                results.append({"request": name, "driver": device.id[0], "pool": device.id[1], "device": device.id[2]})
        return results

    # -- the plugin's extension points --------------------------------------------------------

    def uses_dra(self, pod: Mapping[str, Any]) -> bool:
        return bool(api.pod_claims(pod)) or bool(self.mapped_extended() and extended_requests(pod, self.mapped_extended()))

    def pre_filter(self, pod: Mapping[str, Any]) -> tuple[list[tuple[str, dict]], str | None]:
        """The pod's claims (key, object), or why it cannot be scheduled anywhere now."""
        namespace = pod["metadata"].get("namespace", "default")
        uid = pod["metadata"].get("uid", "")
        claims = []
        for entry in api.pod_claims(pod):
            name = api.claim_name_of(pod, entry)
            claim = self.claims.get(f"{namespace}/{name}") if name else None
            if claim is None:
                return [], f'waiting for resource claim "{entry.get("name")}" of pod "{pod["metadata"]["name"]}" to be created'
            if claim["metadata"].get("deletionTimestamp"):
                return [], f'resourceclaim "{name}" is being deleted'
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if len(reserved) >= api.RESERVED_FOR_MAX and not api.is_reserved_for(claim, uid):
                return [], f'resourceclaim "{name}" in use'
            claims.append((f"{namespace}/{name}", claim))
        return claims, None

    def plan(self, pod: Mapping[str, Any], node: str, claims: list[tuple[str, dict]],
             node_has: Mapping[str, bool]) -> PodPlan | None:
        """Whether all the pod's claims can be allocated on this node, and how (Filter + Reserve)."""
        taken = self.in_use()
        out = PodPlan(node)
        for key, claim in claims:
            if (claim.get("status") or {}).get("allocation") or key in self.assumed:
                allocated_on = api.allocation_node(claim) if key not in self.assumed else \
                    api.allocation_node({"status": {"allocation": self.assumed[key]}})
                if allocated_on not in (None, node):
                    return None
                out.reserve.append(key)
                continue
            results = self.allocate((claim.get("spec") or {}).get("devices", {}).get("requests") or [], node, taken)
            if results is None:
                return None
            out.allocate[key] = {"devices": {"results": results}, "nodeSelector": api.node_selector_for(node),
                                 "allocationTimestamp": now_rfc3339()}
        mapped = self.mapped_extended()
        wanted = [r for r in extended_requests(pod, mapped) if not node_has.get(r[1])] if mapped else []
        if wanted:
            requests = [{"name": req, "exactly": {"deviceClassName": mapped[res], "allocationMode": api.EXACT_COUNT,
                                                  "count": count}} for _, res, req, count in wanted]
            results = self.allocate([dict(r, name=r["name"]) for r in requests], node, taken)
            if results is None:
                return None
            out.extended = {"spec": {"devices": {"requests": requests}},
                            "allocation": {"devices": {"results": results}, "nodeSelector": api.node_selector_for(node),
                                           "allocationTimestamp": now_rfc3339()},
                            "mappings": [{"containerName": c, "resourceName": res, "requestName": req}
                                         for c, res, req, _ in wanted]}
        return out

    def filter(self, pod: Mapping[str, Any], fits: np.ndarray, names: list, has_resource: Callable[[int], Mapping[str, bool]],
               ) -> tuple[np.ndarray, dict[str, int]]:
        """Filter over the nodes other filters passed: the mask and the fit-error counts."""
        claims, problem = self.pre_filter(pod)
        if problem is not None:
            return np.zeros_like(fits), {problem: int(np.count_nonzero(fits))}
        out = fits.copy()
        for slot in np.flatnonzero(fits):
            node = names[int(slot)]
            if self.plan(pod, node, claims, has_resource(int(slot))) is None:
                out[slot] = False
        failed = int(np.count_nonzero(fits & ~out))
        return out, ({CANNOT_ALLOCATE: failed} if failed else {})

    def reserve(self, pod_key: str, pod: Mapping[str, Any], node: str, node_has: Mapping[str, bool]) -> bool:
        """Reserve: plan again on the chosen node and hold its devices (assumed) until written."""
        claims, problem = self.pre_filter(pod)
        plan = None if problem else self.plan(pod, node, claims, node_has)
        if plan is None:
            return False
        for key, allocation in plan.allocate.items():
            self.assumed[key] = allocation
        if plan.extended is not None:
            self.assumed[f"{pod_key}#extended"] = plan.extended["allocation"]
        self.plans[pod_key] = plan
        return True

    def unreserve(self, pod_key: str) -> None:
        plan = self.plans.pop(pod_key, None)
        if plan is None:
            return
        for key in plan.allocate:
            if not (self.claims.get(key, {}).get("status") or {}).get("allocation"):
                self.assumed.pop(key, None)
        self.assumed.pop(f"{pod_key}#extended", None)

    async def pre_bind(self, session: aiohttp.ClientSession, base_url: str, pod: Mapping[str, Any]) -> bool:
        """Write the allocations and reservations (bindClaim) before the pod is bound; False on failure."""
        key = f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
        plan = self.plans.get(key)
        if plan is None:
            return True
        ref = api.reserved_for_pod(pod)
        try:
            for claim_key in [*plan.allocate, *plan.reserve]:
                if not await self._write_claim(session, base_url, claim_key, plan.allocate.get(claim_key), ref):
                    return False
            if plan.extended is not None and not await self._extended_claim(session, base_url, pod, plan.extended, ref):
                return False
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.debug("pre-bind %s: %s", key, exc)
            return False
        self.plans.pop(key, None)
        return True

    async def _write_claim(self, session: aiohttp.ClientSession, base_url: str, claim_key: str,
                           allocation: dict | None, ref: dict) -> bool:
        namespace, name = claim_key.split("/", 1)
        url = f"{base_url}/apis/{api.API_VERSION}/namespaces/{namespace}/resourceclaims/{name}"
        for _ in range(5):  # a shared claim's reservedFor races with its other pods: read again
            async with session.get(url) as response:
                if response.status != 200:
                    return False
                claim = await response.json()
            if claim["metadata"].get("deletionTimestamp"):
                return False  # "claim got deleted in the meantime"
            status = dict(claim.get("status") or {})
            if allocation is not None and status.get("allocation") is not None:
                return False  # "claim got allocated elsewhere in the meantime": schedule again
            if allocation is not None and api.FINALIZER not in (claim["metadata"].get("finalizers") or []):
                # bindClaim: "The finalizer needs to be added in a normal update" before the
                # allocation is written to the status.
                meta = dict(claim["metadata"], finalizers=[*(claim["metadata"].get("finalizers") or []), api.FINALIZER])
                async with session.put(url, json=dict(claim, metadata=meta)) as response:
                    body = await response.json(content_type=None)
                    if response.status == 409:
                        continue
                    if response.status >= 300:
                        return False
                claim = body
            if allocation is not None:
                status["allocation"] = allocation
            reserved = list(status.get("reservedFor") or [])
            if not any(r.get("uid") == ref["uid"] for r in reserved):
                reserved.append(ref)
            status["reservedFor"] = reserved
            async with session.put(f"{url}/status", json=dict(claim, status=status)) as response:
                await response.read()
                if response.status < 300:
                    return True
                if response.status != 409:
                    return False
        return False

    async def _extended_claim(self, session: aiohttp.ClientSession, base_url: str, pod: Mapping[str, Any],
                              extended: dict[str, Any], ref: dict) -> bool:
        meta = pod["metadata"]
        namespace = meta.get("namespace", "default")
        body = {"apiVersion": api.API_VERSION, "kind": "ResourceClaim",
                "metadata": {"generateName": f"{meta['name']}-extended-resources-", "namespace": namespace,
                             "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta.get("uid", ""), "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": extended["spec"]}
        async with session.post(f"{base_url}/apis/{api.API_VERSION}/namespaces/{namespace}/resourceclaims",
                                json=body) as response:
            created = await response.json(content_type=None)
            if response.status >= 300:
                return False
        name = created["metadata"]["name"]
        self.assumed[f"{namespace}/{name}"] = self.assumed.pop(f"{namespace}/{meta['name']}#extended",
                                                               extended["allocation"])
        if not await self._write_claim(session, base_url, f"{namespace}/{name}", extended["allocation"], ref):
            return False
        status = {"extendedResourceClaimStatus": {"resourceClaimName": name, "requestMappings": extended["mappings"]}}
        async with session.patch(f"{base_url}/api/v1/namespaces/{namespace}/pods/{meta['name']}/status",
                                 json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}) as response:
            await response.read()
            return response.status < 300


# -- the scheduler's hooks: one line each in scheduler.py ------------------------------------


def plugin(feature_gates: Any) -> DynamicResources | None:
    """The plugin, when DynamicResourceAllocation is on (GA and locked on in 1.35)."""
    if not feature_gates.enabled("DynamicResourceAllocation"):
        return None
    return DynamicResources(extended_resource=feature_gates.enabled("DRAExtendedResource"))


def watch(dra: DynamicResources | None, session: aiohttp.ClientSession, base_url: str,
          changed: Any) -> list[asyncio.Future]:
    """The plugin's informers (classes, slices, claims); `changed(resource, kind, obj, old)` is told
    of each change, for the queue to move the pods it may help (hints.py)."""
    from ganggate.sim.client.informers import Reflector

    if dra is None:
        return []

    def handler(inner: Any, resource: str) -> Any:
        def on_event(kind: str, obj: dict, old: dict | None) -> None:
            inner(kind, obj, old)
            changed(resource, kind, obj, old)
        return on_event

    base = f"/apis/{api.API_VERSION}"
    return [asyncio.ensure_future(Reflector(session, base_url, f"{base}/{path}", handler(fn, resource)).run())
            for path, fn, resource in (("deviceclasses", dra.on_class, "DeviceClass"),
                                       ("resourceslices", dra.on_slice, "ResourceSlice"),
                                       ("resourceclaims", dra.on_claim, "ResourceClaim"))]


def reserve(dra: DynamicResources | None, algorithm: Any, pod_key: str, pod: Mapping[str, Any], node: str) -> None:
    if dra is not None and dra.uses_dra(pod):
        slot = algorithm.cache.index[node]
        dra.reserve(pod_key, pod, node, algorithm.node_has(dra.mapped_extended(), slot))


def unreserve(dra: DynamicResources | None, pod_key: str) -> None:
    if dra is not None:
        dra.unreserve(pod_key)


async def pre_bind(dra: DynamicResources | None, session: aiohttp.ClientSession, base_url: str,
                   pod: Mapping[str, Any]) -> bool:
    return True if dra is None else await dra.pre_bind(session, base_url, pod)
