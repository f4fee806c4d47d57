"""core/v1 Services: defaulting, cluster IP allocation, strategy and validation (pure; no proxying).

- defaulting: pkg/apis/core/v1/defaults.go SetDefaults_Service (type ClusterIP, sessionAffinity
  None, port protocol TCP, targetPort = port, internalTrafficPolicy Cluster, externalTrafficPolicy
  Cluster for NodePort/LoadBalancer);
- allocation: pkg/registry/core/service/storage/alloc.go with the bitmap allocator of
  pkg/registry/core/service/ipallocator (a free address of --service-cluster-ip-range, default
  10.96.0.0/12, the first being the `kubernetes` Service's; "None" is headless and allocates
  nothing; ExternalName gets no IP), node ports from pkg/registry/core/service/portallocator
  (30000-32767), ipFamilies [IPv4] and ipFamilyPolicy SingleStack;
- strategy: pkg/registry/core/service/strategy.go (status cleared on create, kept on update;
  allocated values carried over by an update that omits them, patchAllocatedValues);
- validation: pkg/apis/core/validation/validation.go ValidateService / ValidateServiceUpdate,
  the essentials (DNS-1035 name, ports required unless headless or ExternalName, port ranges,
  names, protocols, types, clusterIP immutable).
"""

from __future__ import annotations

import ipaddress
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, duplicate, invalid_value, not_supported, required
from ganggate.sim.apiserver.validation import label_value_errors, qualified_name_errors, validate_object_meta
from ganggate.sim.apiserver.watch import clone

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
KUBERNETES_SERVICE_IP = "10.96.0.1"
NODE_PORT_RANGE = (30000, 32767)
TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL_ERROR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_ALLOCATED = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")


def default_service(service: dict[str, Any]) -> None:
    """SetDefaults_Service."""
    spec = service.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    kind = spec.setdefault("type", "ClusterIP") or "ClusterIP"
    spec["type"] = kind
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port.get("port")
    if kind != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)


def allocate(service: dict[str, Any], existing: Iterable[Mapping[str, Any]], rng: random.Random | None = None) -> list[Cause]:
    """Fill clusterIP(s), ipFamilies and node ports for a new Service; causes when one is taken or out of range."""
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    rng = rng or random.Random()
    used_ips: set[str] = set()
    used_ports: set[int] = set()
    for other in existing:
        other_spec = other.get("spec") or {}
        used_ips.update(ip for ip in other_spec.get("clusterIPs") or [other_spec.get("clusterIP")] if ip)
        used_ports.update(int(p["nodePort"]) for p in other_spec.get("ports") or [] if p.get("nodePort"))
    if kind == "ExternalName":
        for field in _ALLOCATED:
            spec.pop(field, None)
        return []
    requested = spec.get("clusterIP") or ((spec.get("clusterIPs") or [""])[0])
    causes: list[Cause] = []
    if requested == "None":
        spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
    elif requested:
        try:
            address = ipaddress.ip_address(requested)
        except ValueError:
            return [invalid_value("spec.clusterIPs[0]", requested, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]
        if address not in SERVICE_CIDR:
            causes.append(invalid_value("spec.clusterIPs", [requested],
                                        f"failed to allocate IP {requested}: provided IP is not in the valid range. "
                                        f"The range of valid IPs is {SERVICE_CIDR}"))
        elif requested in used_ips:
            causes.append(invalid_value("spec.clusterIPs", [requested],
                                        f"failed to allocate IP {requested}: provided IP is already allocated"))
        spec["clusterIP"], spec["clusterIPs"] = requested, [requested]
    else:
        ip = _free_ip(used_ips, rng)
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if kind in ("NodePort", "LoadBalancer"):
        for index, port in enumerate(spec.get("ports") or []):
            if port.get("nodePort"):
                if int(port["nodePort"]) in used_ports:
                    causes.append(invalid_value(f"spec.ports[{index}].nodePort", port["nodePort"], "provided port is already allocated"))
                used_ports.add(int(port["nodePort"]))
                continue
            free = [p for p in range(NODE_PORT_RANGE[0], NODE_PORT_RANGE[1] + 1) if p not in used_ports]
            port["nodePort"] = rng.choice(free)
            used_ports.add(port["nodePort"])
    return causes


def _free_ip(used: set[str], rng: random.Random) -> str:
    """A random free address of the range, skipping the network address and the `kubernetes` Service's."""
    size = SERVICE_CIDR.num_addresses
    base = int(SERVICE_CIDR.network_address)
    for _ in range(64):
        candidate = str(ipaddress.ip_address(base + rng.randrange(2, size - 1)))
        if candidate not in used:
            return candidate
    for offset in range(2, size - 1):
        candidate = str(ipaddress.ip_address(base + offset))
        if candidate not in used:
            return candidate
    raise ValueError(f"range is full: {SERVICE_CIDR}")


def prepare_create(service: dict[str, Any]) -> None:
    """svcStrategy.PrepareForCreate: the status starts empty."""
    service["status"] = {"loadBalancer": {}}


def prepare_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """svcStrategy.PrepareForUpdate keeps the status; an update that omits the allocated values keeps them."""
    new["status"] = clone(old.get("status") or {"loadBalancer": {}})
    new_spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
    if isinstance(new_spec, dict) and new_spec.get("type") == old_spec.get("type"):
        for field in _ALLOCATED:
            if not new_spec.get(field) and old_spec.get(field):
                new_spec[field] = clone(old_spec[field])
        old_ports = {(p.get("port"), p.get("protocol")): p for p in old_spec.get("ports") or []}
        for port in new_spec.get("ports") or []:
            previous = old_ports.get((port.get("port"), port.get("protocol")))
            if isinstance(port, dict) and not port.get("nodePort") and previous and previous.get("nodePort"):
                port["nodePort"] = previous["nodePort"]


def prepare_status_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """svcStatusStrategy.PrepareForUpdate: a status update keeps the spec."""
    new["spec"] = clone(old.get("spec") or {})


def validate(service: Mapping[str, Any]) -> list[Cause]:
    """ValidateService, the essentials."""
    meta = service.get("metadata") or {}
    causes = [c for c in validate_object_meta(service, namespaced=True) if c.field != "metadata.name"]
    name = meta.get("name") or ""
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    elif not _DNS1035.match(name) or len(name) > 63:
        causes.append(invalid_value("metadata.name", name, DNS1035_LABEL_ERROR))
    spec = service.get("spec")
    if not isinstance(spec, dict):
        return causes + [required("spec")]
    kind = spec.get("type") or "ClusterIP"
    if kind not in TYPES:
        causes.append(not_supported("spec.type", kind, TYPES))
    headless = spec.get("clusterIP") == "None"
    ports = spec.get("ports") or []
    if kind == "ExternalName":
        if not spec.get("externalName"):
            causes.append(required("spec.externalName"))
    elif not ports and not headless:
        causes.append(required("spec.ports"))
    if headless and kind in ("NodePort", "LoadBalancer"):
        causes.append(invalid_value("spec.clusterIPs[0]", "None", f"may not be set to 'None' for {kind} services"))
    names: set[str] = set()
    seen: set[tuple[Any, Any]] = set()
    for index, port in enumerate(ports):
        here = f"spec.ports[{index}]"
        if not isinstance(port, dict):
            causes.append(invalid_value(here, port, "must be an object"))
            continue
        port_name = port.get("name") or ""
        if len(ports) > 1 and not port_name:
            causes.append(required(f"{here}.name"))
        elif port_name:
            if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", port_name) or len(port_name) > 63:
                causes.append(invalid_value(f"{here}.name", port_name, "a lowercase RFC 1123 label must consist of lower case "
                                            "alphanumeric characters or '-', and must start and end with an alphanumeric character"))
            if port_name in names:
                causes.append(duplicate(f"{here}.name", port_name))
            names.add(port_name)
        number = port.get("port")
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            causes.append(invalid_value(f"{here}.port", number, "must be between 1 and 65535, inclusive"))
        protocol = port.get("protocol") or "TCP"
        if protocol not in PROTOCOLS:
            causes.append(not_supported(f"{here}.protocol", protocol, PROTOCOLS))
        if (number, protocol) in seen:
            causes.append(duplicate(here, {"port": number, "protocol": protocol}))
        seen.add((number, protocol))
        target = port.get("targetPort")
        if isinstance(target, int) and not isinstance(target, bool) and not 1 <= target <= 65535:
            causes.append(invalid_value(f"{here}.targetPort", target, "must be between 1 and 65535, inclusive"))
        if port.get("nodePort") and kind not in ("NodePort", "LoadBalancer"):
            causes.append(invalid_value(f"{here}.nodePort", port["nodePort"], "may not be used when `type` is 'ClusterIP'"))
    selector = spec.get("selector") or {}
    if not isinstance(selector, dict):
        causes.append(invalid_value("spec.selector", selector, "must be a map of strings"))
        selector = {}
    for key, value in selector.items():
        for message in qualified_name_errors(key):
            causes.append(invalid_value("spec.selector", key, message))
        for message in label_value_errors(str(value)):
            causes.append(invalid_value("spec.selector", value, message))
    affinity = spec.get("sessionAffinity") or "None"
    if affinity not in ("ClientIP", "None"):
        causes.append(not_supported("spec.sessionAffinity", affinity, ["ClientIP", "None"]))
    return causes


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateServiceUpdate: the allocated clusterIP may not change (except to or from ExternalName)."""
    causes = validate(new)
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    if "ExternalName" not in (new_spec.get("type"), old_spec.get("type")):
        if (new_spec.get("clusterIP") or "") != (old_spec.get("clusterIP") or ""):
            causes.append(invalid_value("spec.clusterIPs[0]", new_spec.get("clusterIP") or "", "may not change once set"))
    return causes


def kubernetes_service() -> dict[str, Any]:
    """The `kubernetes` Service in `default` that every cluster has (pkg/controlplane/controller/kubernetesservice)."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP, "clusterIPs": [KUBERNETES_SERVICE_IP],
                 "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                 "internalTrafficPolicy": "Cluster",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
        "status": {"loadBalancer": {}},
    }
