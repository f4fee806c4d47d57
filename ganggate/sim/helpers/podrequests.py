"""A pod's effective request and a node's allocatable, in the units kube-scheduler counts.

Written from:
- staging/src/k8s.io/component-helpers/resource/helpers.go PodRequests /
  aggregateContainerResourcesByFn: the containers' sum plus restartable init containers
  (sidecars, KEP-753), at least every init step (an init container plus the sidecars started
  before it), then pod-level requests for cpu, memory and hugepages-* (KEP-2837), then
  spec.overhead; all summed exactly, as Quantity.Add does;
- pkg/scheduler/framework/types.go Resource.Add: cpu in MilliValue(), everything else in
  Value() (whole units, rounded up), taken of the pod's *total*; and calculateResource /
  getNonMissingContainerRequests: for scoring only, a container with no cpu or memory request
  counts as 100m / 200Mi (pkg/scheduler/util/pod_resources.go);
- pkg/apis/core/v1/defaults.go SetDefaults_Pod: a missing request defaults to its limit (done
  here too, so that a manifest that never passed through the API server counts the same);
  SetDefaults_NodeStatus: allocatable defaults to capacity.

Amounts come back in kubesim's scheduler units: milli-units (1 cpu = 1000, 1 byte = 1000), so
every resource but cpu is a multiple of 1000. `pods: 1000` stands for the pod itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from ganggate.sim.apimachinery.quantity import milli_value, parse_nanos, value

Resources = dict[str, int]
"""Resource name -> amount in kubesim's milli-units."""

Nanos = dict[str, int]
"""Resource name -> exact amount in nano-units (a ResourceList as Quantities)."""

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"

# pkg/scheduler/util/pod_resources.go DefaultMilliCPURequest / DefaultMemoryRequest.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
_DEFAULT_CPU_NANOS = DEFAULT_MILLI_CPU_REQUEST * 10**6
_DEFAULT_MEMORY_NANOS = DEFAULT_MEMORY_REQUEST * 10**9


def resource_list(raw: Mapping | None) -> Nanos:
    """A ResourceList parsed into exact nano-units (QuantityError on a bad quantity)."""
    return {name: parse_nanos(quantity) for name, quantity in (raw or {}).items()}


def container_requests(container: Mapping) -> Nanos:
    """The container's requests after SetDefaults_Pod: each limit stands in for a missing request."""
    resources = container.get("resources") or {}
    requests = resource_list(resources.get("requests"))
    for name, amount in resource_list(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def _add(into: Nanos, more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _max(into: Nanos, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if name not in into or amount > into[name]:
            into[name] = amount


def _with_defaults(requests: Nanos, defaults: Mapping[str, int]) -> Nanos:
    """applyNonMissing: the defaults fill in resources the container does not name at all."""
    if not defaults:
        return requests
    out = dict(requests)
    for name, amount in defaults.items():
        if name not in requests:
            out[name] = amount
    return out


def is_supported_pod_level_resource(name: str) -> bool:
    """IsSupportedPodLevelResource: cpu, memory and hugepages-*."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def pod_level_requests(pod: Mapping) -> Nanos | None:
    """spec.resources.requests when IsPodLevelRequestsSet (it names a supported resource)."""
    raw = ((pod.get("spec") or {}).get("resources") or {}).get("requests") or {}
    if not any(is_supported_pod_level_resource(name) for name in raw):
        return None
    return resource_list(raw)


class ParsedPod:
    """The request-bearing fields of a pod, parsed once: containers, init containers, pod level, overhead."""

    __slots__ = ("containers", "init_containers", "pod_level", "overhead")

    def __init__(self, pod: Mapping) -> None:
        spec = pod.get("spec") or {}
        self.containers = [container_requests(c) for c in spec.get("containers") or []]
        self.init_containers = [
            (container_requests(c), c.get("restartPolicy") == "Always") for c in spec.get("initContainers") or []
        ]
        self.pod_level = pod_level_requests(pod)
        self.overhead = resource_list(spec.get("overhead"))

    def requests(self, non_missing: Mapping[str, int] | None = None) -> Nanos:
        """PodRequests(pod, {NonMissingContainerRequests: non_missing}), exact, without `pods`."""
        defaults = non_missing or {}
        total: Nanos = {}
        for requests in self.containers:
            _add(total, _with_defaults(requests, defaults))
        sidecars: Nanos = {}
        init_peak: Nanos = {}
        for requests, restartable in self.init_containers:
            requests = _with_defaults(requests, defaults)
            if restartable:
                _add(total, requests)  # a sidecar runs for the pod's whole life
                _add(sidecars, requests)
                step = sidecars
            else:
                step = dict(requests)
                _add(step, sidecars)  # an init container runs beside the sidecars started before it
            _max(init_peak, step)
        _max(total, init_peak)
        if self.pod_level is not None:
            for name, amount in self.pod_level.items():
                if is_supported_pod_level_resource(name):
                    total[name] = amount
        _add(total, self.overhead)
        return total

    def nonzero(self, requests: Mapping[str, int]) -> tuple[int, int]:
        """calculateResource's (non0CPU, non0Mem) for scoring, in milli-units, given requests().

        Without pod-level requests every container lacking a cpu/memory request counts the
        defaults; with them, a default applies only where neither the pod nor any container
        names the resource (getNonMissingContainerRequests).
        """
        if self.pod_level is None:
            non_missing = {CPU: _DEFAULT_CPU_NANOS, MEMORY: _DEFAULT_MEMORY_NANOS}
        else:
            non_missing = {}
            if CPU not in requests:
                non_missing[CPU] = _DEFAULT_CPU_NANOS
            if MEMORY not in requests:
                non_missing[MEMORY] = _DEFAULT_MEMORY_NANOS
        if non_missing:
            requests = self.requests(non_missing)
        return milli_value(requests.get(CPU, 0)), value(requests.get(MEMORY, 0)) * 1000


def pod_requests_exact(pod: Mapping, non_missing: Mapping[str, int] | None = None) -> Nanos:
    """PodRequests(pod, {NonMissingContainerRequests: non_missing}), exact, without `pods`."""
    return ParsedPod(pod).requests(non_missing)


def scheduler_amount(name: str, nanos: int) -> int:
    """Resource.Add: cpu as MilliValue(), any other resource as Value(), in kubesim's milli-units."""
    return milli_value(nanos) if name == CPU else value(nanos) * 1000


def to_scheduler_units(exact: Mapping[str, int]) -> Resources:
    """A whole ResourceList as the scheduler counts it, zero amounts left out."""
    out: Resources = {}
    for name, nanos in exact.items():
        amount = scheduler_amount(name, nanos)
        if amount:
            out[name] = amount
    return out


def _with_pod(requests: Mapping[str, int]) -> Resources:
    out = to_scheduler_units(requests)
    out[PODS] = out.get(PODS, 0) + 1000
    return out


def pod_requests(pod: Mapping) -> Resources:
    """The pod's effective request as NodeResourcesFit and the cache count it, plus `pods: 1000`."""
    return _with_pod(ParsedPod(pod).requests())


def nonzero_requests(pod: Mapping) -> tuple[int, int]:
    """The pod's (cpu, memory) for scoring, missing container requests defaulted, in milli-units."""
    parsed = ParsedPod(pod)
    return parsed.nonzero(parsed.requests())


def scheduling_requests(pod: Mapping) -> tuple[Resources, tuple[int, int]]:
    """pod_requests and nonzero_requests together, parsing the pod once (QuantityError if bad)."""
    parsed = ParsedPod(pod)
    requests = parsed.requests()
    return _with_pod(requests), parsed.nonzero(requests)


def node_allocatable(node: Mapping) -> Resources:
    """NodeInfo.SetNode: NewResource(status.allocatable); capacity where allocatable is unset."""
    status = node.get("status") or {}
    allocatable = status.get("allocatable")
    if allocatable is None:
        allocatable = status.get("capacity")
    return {name: scheduler_amount(name, nanos) for name, nanos in resource_list(allocatable).items()}

