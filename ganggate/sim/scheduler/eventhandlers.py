"""The scheduler's decisions about informer events and failures, as pure functions.

Follows kube-scheduler 1.35:
- pkg/scheduler/eventhandlers.go: hasNominatedNodeNameChanged and getLEPriorityPreCheck (a pod
  whose nomination is removed or changed, or that is deleted while nominated, moves the
  unschedulable pods of lower or equal priority as if an assigned pod were deleted: since 1.33,
  kubernetes#129058); preCheckForNode (without SchedulerQueueingHints, a node event moves only
  pods that would fit that node: AdmissionCheck's resources and node affinity, and its taints);
- pkg/scheduler/schedule_one.go schedulingCycle and handleSchedulingFailure with
  framework/preemption Evaluator.Preempt: when no node fits and preemption finds no candidate,
  the PostFilter result nominates "" (ModeOverride): the nomination is cleared in the nominator
  and on the pod; when the pod is not eligible to preempt (preemptionPolicy Never, or victims
  still terminating on its nominated node) there is no result (ModeNoop) and the nomination
  stays; no nodes at all clears it too (clearNominatedNode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ganggate.sim.helpers import podrequests, taints
from ganggate.sim.helpers.nodeaffinity import RequiredNodeAffinity
from ganggate.sim.scheduler import preemption
from ganggate.sim.scheduler.plugins import pod_priority

KEEP, CLEAR = "keep", "clear"  # what a failed cycle does to the pod's nomination


def nominated_node(pod: Mapping | None) -> str:
    return ((pod or {}).get("status") or {}).get("nominatedNodeName") or ""


def has_nominated_node_name_changed(old: Mapping | None, new: Mapping) -> bool:
    """hasNominatedNodeNameChanged: there was a nomination and it is now another or none."""
    before = nominated_node(old)
    return bool(before) and before != nominated_node(new)


def lower_or_equal_priority(priority: int) -> Callable[[Mapping], bool]:
    """getLEPriorityPreCheck."""
    return lambda pod: pod_priority(pod) <= priority


def node_pre_check(node: Mapping, free: Mapping[str, int], pod_count: int, pod_limit: int) -> Callable[[Mapping], bool]:
    """preCheckForNode without QueueingHints: the pod's request fits what the node has free, its
    node affinity matches, and it tolerates the node's NoSchedule/NoExecute taints."""

    def check(pod: Mapping) -> bool:
        try:
            request = podrequests.pod_requests(pod)
        except ValueError:
            return True
        if pod_count + 1 > pod_limit:
            return False
        for name, amount in request.items():
            if name != podrequests.PODS and amount > 0 and amount > free.get(name, 0):
                return False
        if not RequiredNodeAffinity(pod).match(node):
            return False
        return taints.untolerated_taint(taints.node_taints(node), taints.pod_tolerations(pod)) is None

    return check


def nomination_after_failure(no_nodes: bool, preemption_message: str | None) -> str:
    """What handleSchedulingFailure does to the nomination of a pod that fit nowhere and for
    which preemption chose no node (`preemption_message`: why; None if it did not run)."""
    if no_nodes:
        return CLEAR  # ErrNoNodesAvailable: clearNominatedNode
    if preemption_message in (preemption.NEVER, preemption.TERMINATING):
        return KEEP  # PodEligibleToPreemptOthers said no: nil PostFilterResult, ModeNoop
    return CLEAR  # no candidate: NewPostFilterResultWithNominatedNode("")
