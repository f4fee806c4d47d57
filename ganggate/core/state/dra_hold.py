"""The devices a released DRA gang is given before its gates go: each member's claims (made from
its templates by the resourceclaim controller, gated or not) allocated on the member's planned
node. Pure: the shell (controller.release.dra_hold) writes what this decides.

Why: kube-scheduler's DynamicResources plugin does not count the claims of a pod nominated to a
node (its PreFilterExtensions is nil at v1.35), so a nomination holds a member's CPU and memory
but not its devices; an ordinary DRA pod scheduled between the release and the member's binding
can take them. A claim that is allocated already is different: the plugin's PreFilter keeps only
its allocation's nodeSelector (Filter checks the node against it; no allocator runs for it),
PreBind adds the pod to status.reservedFor, and every other pod's allocation counts its devices
as in use (the plugin's ListAllAllocatedDevices reads every allocated claim). The API server lets
any client with `update` on `resourceclaims/status` write an allocation (the status strategy
validates it, asks nobody who wrote it); the resourceclaim controller deallocates a claim only
when its last reservation goes and it carries the finalizer `resource.kubernetes.io/delete-protection`,
so a claim allocated ahead of its pod stays allocated until then.

The allocation made here is what the scheduler's structured allocator would write for the node:
for each request, `count` devices (or, `allocationMode: All`, every one) of the node's devices
that match the DeviceClass's selectors and the request's, none in use by an allocated claim nor
given to an earlier member; `firstAvailable` takes the first subrequest that fits; the
nodeSelector names the node by `metadata.name`. Devices are taken from the end of the node's
list, where the scheduler, which takes the first free ones, looks last: an ordinary pod the
scheduler is allocating at the same moment (its allocation not yet written) is then unlikely to
be given the same device. A claim this cannot allocate as the scheduler would (constraints,
admin access, devices it does not see) is left to the scheduler, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ganggate.core.fit.devices import Device, cel_expressions, matches
from ganggate.core.state.dra import DraIndex, allocated_devices, allocation_node

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"  # the resourceclaim controller's
FINALIZER = "resource.kubernetes.io/delete-protection"  # resourceapi.Finalizer


@dataclass(frozen=True)
class Member:
    """A released member: its pod, the uid its claims are owned by, its template claims' entry
    names, and its planned node."""

    pod_key: str
    uid: str
    namespace: str
    entries: tuple[str, ...]
    node: str


@dataclass
class Holds:
    """What to write: claim key -> its allocation; the claims already held on their planned node;
    the members whose claims are left to the scheduler (and why)."""

    allocate: dict[str, dict[str, Any]] = field(default_factory=dict)
    held: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    #: claims allocated on another node and reserved for no pod (an earlier release of the gang
    #: that did not go ahead, its allocations not given back): to give back before a new plan
    stale: list[str] = field(default_factory=list)


def node_selector(node: str) -> dict[str, Any]:
    """The structured allocator's nodeSelector for a node-local device."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def members_of(placement: Mapping[str, str | None], pods: Mapping[str, Any]) -> list[Member]:
    """The members of a pinned release that claim devices through templates."""
    out = []
    for key, node in sorted(placement.items()):
        pod = pods.get(key)
        entries = tuple(entry for entry, kind, _ in (getattr(pod, "claims", ()) or ()) if kind == "template")
        if node and pod is not None and entries:
            out.append(Member(key, str(pod.uid), str(pod.namespace), entries, node))
    return out


def _take(index: DraIndex, request: Mapping[str, Any], devices: list[Device],
          taken: set[tuple[str, str, str]]) -> list[Device] | None:
    """The devices one `exactly` request (or subrequest) gets, or None."""
    if request.get("adminAccess") or request.get("tolerations") or request.get("capacity"):
        raise _Unsupported("admin access, tolerations or capacity requests")
    class_name = str(request.get("deviceClassName", ""))
    device_class = index.classes.get(class_name)
    if device_class is None:
        return None
    expressions = cel_expressions((device_class.get("spec") or {}).get("selectors")) + \
        cel_expressions(request.get("selectors"))
    candidates = [d for d in devices if all(matches(e, d) for e in expressions)]
    if request.get("allocationMode") == "All":
        if not candidates or any(d.id in taken for d in candidates):
            return None
        return candidates
    free = [d for d in reversed(candidates) if d.id not in taken]
    count = int(request.get("count") or 1)
    return free[:count] if len(free) >= count else None


class _Unsupported(Exception):
    pass


def _allocate(index: DraIndex, spec: Mapping[str, Any], node: str,
              taken: set[tuple[str, str, str]]) -> list[dict[str, Any]] | None:
    devices = spec.get("devices") or {}
    if devices.get("constraints"):
        raise _Unsupported("constraints")
    node_devices = index.devices_of(node)
    mine: set[tuple[str, str, str]] = set()
    results: list[dict[str, Any]] = []
    for request in devices.get("requests") or []:
        name = str(request.get("name", ""))
        options = ([(name, request["exactly"])] if request.get("exactly") else
                   [(f"{name}/{sub.get('name', '')}", sub) for sub in request.get("firstAvailable") or []])
        # The first option that has devices free (a request's firstAvailable, in order).
        chosen = next(((option_name, picked) for option_name, option in options
                       if (picked := _take(index, option, node_devices, taken | mine)) is not None), None)
        if chosen is None:
            return None
        request_name, picked = chosen
        for device in picked:
            mine.add(device.id)
            results.append({"request": request_name, "driver": device.id[0], "pool": device.id[1],
                            "device": device.id[2]})
    taken |= mine
    return results


def _configs(index: DraIndex, spec: Mapping[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The allocation's devices.config as the structured allocator fills it: each class's
    configs for the requests allocated from it (source FromClass), then the claim's (FromClaim)."""
    by_class: dict[str, list[str]] = {}
    requests = {str(r.get("name", "")): r for r in (spec.get("devices") or {}).get("requests") or []}
    for result in results:
        name, _, sub = str(result["request"]).partition("/")
        request = requests.get(name) or {}
        option: Mapping[str, Any] = request.get("exactly") or next((s for s in request.get("firstAvailable") or []
                                                 if s.get("name") == sub), {})
        names = by_class.setdefault(str(option.get("deviceClassName", "")), [])
        if result["request"] not in names:
            names.append(str(result["request"]))
    out: list[dict[str, Any]] = []
    for class_name, names in by_class.items():
        for config in ((index.classes.get(class_name) or {}).get("spec") or {}).get("config") or []:
            out.append({"source": "FromClass", "requests": names, **{k: v for k, v in config.items() if k != "requests"}})
    for config in (spec.get("devices") or {}).get("config") or []:
        out.append({"source": "FromClaim", **config})
    return out


def in_use(index: DraIndex) -> set[tuple[str, str, str]]:
    """Every device an allocated claim holds."""
    return set(index.holders)


def contested(index: DraIndex, written: Mapping[str, Mapping[str, Any]]) -> str | None:
    """A device of the allocations just written that another allocated claim holds too (the
    scheduler wrote an allocation it had chosen before it saw ours), or None."""
    for key, allocation in sorted(written.items()):
        for device in allocated_devices({"status": {"allocation": allocation}}):
            others = index.holders.get(device, set()) - {key}
            if others:
                return f"device {device[2]} of pool {device[1]} is held by {sorted(others)[0]} too"
    return None


def plan_holds(index: DraIndex, members: Iterable[Member]) -> Holds | str:
    """The allocations that hold the members' devices on their planned nodes, or why the plan
    cannot be held now (a claim not made yet, allocated on another node, or no longer fitting):
    then nothing is written and the gang is planned again. Claims found allocated on another
    node for no pod are listed in `stale`: the shell gives them back and the gang is planned
    again."""
    out = Holds()
    taken = in_use(index)
    for member in members:
        for entry in member.entries:
            key = index.claim_of(member.uid, entry)
            claim = index.claims.get(key) if key else None
            if claim is None:
                return f"the claim {entry} of {member.pod_key} is not made yet"
            if claim.get("metadata", {}).get("deletionTimestamp"):
                return f"the claim {key} of {member.pod_key} is being deleted"
            if (claim.get("status") or {}).get("allocation"):
                on = allocation_node(claim)
                if on not in (None, member.node):
                    if (claim.get("status") or {}).get("reservedFor"):
                        return f"the claim {key} of {member.pod_key} is in use on {on}, not on {member.node}"
                    out.stale.append(str(key))
                    continue
                out.held.append(str(key))
                continue
            try:
                results = _allocate(index, claim.get("spec") or {}, member.node, taken)
            except _Unsupported as exc:
                out.left[member.pod_key] = str(exc)
                continue
            if results is None:
                return f"the devices of {member.pod_key}'s claim {key} are no longer free on {member.node}"
            allocated: dict[str, Any] = {"results": results}
            configs = _configs(index, claim.get("spec") or {}, results)
            if configs:
                allocated["config"] = configs
            out.allocate[str(key)] = {"devices": allocated, "nodeSelector": node_selector(member.node)}
    return out
