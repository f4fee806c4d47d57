"""The default scheduler's per-node decisions as pure functions: filter, score, fit error.

These are the reference semantics of kubesim's scheduler, written one node at a time for
clarity and for tests; `ganggate.sim.scheduler.cache` evaluates the same rules over all nodes at
once with numpy arrays and is checked against these functions.

Emulated plugins (pkg/scheduler/apis/config/v1/default_plugins.go order):
  filters  NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit
           (plus node readiness: see node_rejects)
  scores   NodeResourcesFit/LeastAllocated (weight 1), NodeResourcesBalancedAllocation (weight 1)
Left out, because kubesim's pods and nodes never exercise them or they add a constant to
every node's score: NodeName, NodePorts, VolumeRestrictions/VolumeBinding/VolumeZone,
NodeVolumeLimits, PodTopologySpread, InterPodAffinity, ImageLocality, the TaintToleration
and NodeAffinity scores (PreferNoSchedule taints, preferred terms), DRA. PostFilter preemption
is ganggate.sim.scheduler.preemption (without the `preemption: ...` suffix to the fit error).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ganggate.sim.helpers import podrequests, taints
from ganggate.sim.helpers.nodeaffinity import RequiredNodeAffinity
from ganggate.sim.helpers.podrequests import CPU, MEMORY, PODS

MAX_NODE_SCORE = 100  # pkg/scheduler/framework/interface.go MaxNodeScore

# pkg/scheduler/util/pod_resources.go: a container with no cpu/memory request counts as
# 100m CPU and 200Mi memory when scoring (never when filtering); see podrequests.
DEFAULT_MILLI_CPU_REQUEST = podrequests.DEFAULT_MILLI_CPU_REQUEST
DEFAULT_MEMORY_REQUEST = podrequests.DEFAULT_MEMORY_REQUEST

# Default NodeResourcesFit scoring resources (pkg/scheduler/apis/config/v1/defaults.go).
SCORED_RESOURCES: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1))

# pkg/scheduler/schedule_one.go numFeasibleNodesToFind
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

NO_NODES_AVAILABLE = "no nodes available to schedule pods"  # schedule_one.go ErrNoNodesAvailable


NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"  # nodeunschedulable ErrReasonUnschedulable
AFFINITY = "node(s) didn't match Pod's node affinity/selector"  # nodeaffinity ErrReasonPod


def nonzero_requests(pod: Mapping) -> tuple[int, int]:
    """The pod's (cpu, memory) request for scoring, in milli-units, missing ones defaulted."""
    return podrequests.nonzero_requests(pod)


def node_is_ready(node: Mapping) -> bool:
    """The node's Ready condition is True.

    Today's scheduler has no readiness filter (the node lifecycle controller taints a node that
    is not ready with node.kubernetes.io/not-ready); kubesim has no such controller, so it keeps
    the old CheckNodeCondition predicate's check and wording instead.
    """
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_rejects(pod: Mapping, node: Mapping) -> str | None:
    """Why the node-level filters turn the pod away from the node (the first failing one), or None.

    Default filter order (pkg/scheduler/apis/config/v1/default_plugins.go): NodeUnschedulable,
    TaintToleration, NodeAffinity; the taint is shown as "{key: value}" even with no value.
    """
    if not node_is_ready(node):
        return NOT_READY
    tolerations = taints.pod_tolerations(pod)
    if taints.is_unschedulable(node) and not taints.tolerates_unschedulable(tolerations):
        return UNSCHEDULABLE
    taint = taints.untolerated_taint(taints.node_taints(node), tolerations)
    if taint is not None:
        return taints.taint_reason(taint)
    if not RequiredNodeAffinity(pod).match(node):
        return AFFINITY
    return None


def insufficient_resources(
    request: Mapping[str, int], allocatable: Mapping[str, int], requested: Mapping[str, int], pod_count: int
) -> list[str]:
    """NodeResourcesFit's reasons (noderesources/fit.go fitsRequest), [] when the pod fits.

    `request` and `requested` are in milli-units; `pod_count` is the number of pods already
    on the node; a node's pod limit is its `pods` allocatable.
    """
    reasons = []
    if pod_count + 1 > allocatable.get(PODS, 0) // 1000:
        reasons.append("Too many pods")
    for name in sorted(request):
        amount = request[name]
        if name == PODS or amount <= 0:
            continue
        if amount > allocatable.get(name, 0) - requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def node_filter_reasons(
    pod: Mapping,
    request: Mapping[str, int],
    node: Mapping,
    allocatable: Mapping[str, int],
    requested: Mapping[str, int],
    pod_count: int,
) -> list[str]:
    """Why the node cannot take the pod, as the first failing filter plugin says; [] if it can.

    The framework stops at the first plugin that rejects a node (framework/runtime
    RunFilterPlugins), and NodeResourcesFit runs after the node-level plugins.
    """
    reason = node_rejects(pod, node)
    if reason is not None:
        return [reason]
    return insufficient_resources(request, allocatable, requested, pod_count)


def fit_error_message(num_all_nodes: int, node_reasons: Iterable[Iterable[str]]) -> str:
    """FitError.Error() (pkg/scheduler/framework/types.go): "0/N nodes are available: ...".

    Each reason is counted over the nodes, rendered "<count> <reason>", the strings sorted
    (plain string order, as Go's sort.Strings) and joined with ", ".
    """
    if num_all_nodes == 0:
        return NO_NODES_AVAILABLE
    counts: dict[str, int] = {}
    for reasons in node_reasons:
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
    return fit_error_from_counts(num_all_nodes, counts)


def fit_error_from_counts(num_all_nodes: int, counts: Mapping[str, int]) -> str:
    """The FitError message from a histogram of reasons (reason -> number of nodes)."""
    if num_all_nodes == 0:
        return NO_NODES_AVAILABLE
    message = f"0/{num_all_nodes} nodes are available:"
    histogram = sorted(f"{count} {reason}" for reason, count in counts.items() if count)
    if histogram:
        message += f" {', '.join(histogram)}."
    return message


def least_requested_score(requested: int, capacity: int) -> int:
    """noderesources/least_allocated.go leastRequestedScore."""
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated_score(nonzero_requested: Mapping[str, int], allocatable: Mapping[str, int]) -> int:
    """LeastAllocated over cpu and memory, weights 1 (least_allocated.go leastResourceScorer).

    `nonzero_requested` is the node's non-zero requested amount plus the pod's own.
    """
    node_score = weight_sum = 0
    for name, weight in SCORED_RESOURCES:
        capacity = allocatable.get(name, 0)
        if capacity == 0:
            continue
        node_score += least_requested_score(nonzero_requested.get(name, 0), capacity) * weight
        weight_sum += weight
    return node_score // weight_sum if weight_sum else 0


def balanced_allocation_score(requested: Mapping[str, int], allocatable: Mapping[str, int]) -> int:
    """noderesources/balanced_allocation.go balancedResourceScorer over cpu and memory.

    `requested` is the node's requested amount (not the non-zero one) plus the pod's own.
    """
    fractions = []
    for name, _ in SCORED_RESOURCES:
        capacity = allocatable.get(name, 0)
        if capacity == 0:
            continue
        fractions.append(min(requested.get(name, 0) / capacity, 1.0))
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def is_best_effort(request: Mapping[str, int]) -> bool:
    """BalancedAllocation skips pods requesting neither cpu nor memory (kubernetes#129138)."""
    return not any(request.get(name, 0) for name, _ in SCORED_RESOURCES)


def num_feasible_nodes_to_find(num_all_nodes: int, percentage_of_nodes_to_score: int = 0) -> int:
    """How many feasible nodes the scheduler looks for before it stops filtering.

    pkg/scheduler/schedule_one.go numFeasibleNodesToFind with the adaptive default
    (percentage 0): 50% minus 1% per 125 nodes, at least 5%, at least 100 nodes.
    """
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = percentage_of_nodes_to_score
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num_nodes = num_all_nodes * percentage // 100
    return max(num_nodes, MIN_FEASIBLE_NODES_TO_FIND)


def pod_priority(pod: Mapping) -> int:
    """spec.priority, 0 when unset (k8s.io/component-helpers/scheduling/corev1 PodPriority)."""
    priority = (pod.get("spec") or {}).get("priority")
    return int(priority) if isinstance(priority, int) else 0
