"""Cluster events and the QueueingHints of the plugins kubesim runs: which event may make which
unschedulable pod schedulable (pure functions, no I/O).

Follows kube-scheduler 1.35:
- events: pkg/scheduler/framework/events.go (NodeSchedulingPropertiesChange,
  PodSchedulingPropertiesChange, EventAssignedPodDelete, EventUnschedulableTimeout) and
  types.go (ActionType bits, MatchClusterEvents: a registered Pod event matches assigned and
  unscheduled pods alike; the action bits must overlap);
- registrations: each filter plugin's EventsToRegister (noderesources/fit.go,
  nodeaffinity/node_affinity.go, nodeunschedulable/node_unschedulable.go,
  tainttoleration/taint_toleration.go), which differ with SchedulerQueueingHints: without it
  the plugins also register the node updates that preCheckForNode may make them miss
  (kubernetes#109437), and every hint is defaultQueueingHintFn (always Queue;
  pkg/scheduler/scheduler.go buildQueueingHintMap);
- hints: isSchedulableAfterNodeChange / isSchedulableAfterPodEvent of each plugin;
- the requeue decision: scheduling_queue.go isPodWorthRequeuing (a pod rejected by no plugin,
  or any wildcard event: after backoff; otherwise Queue from one of its rejecting plugins).
kubesim's readiness check (plugins.node_is_ready, which stands in for the not-ready taint) is
the pseudo plugin NodeReady: it requeues when a node is added Ready or turns Ready.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ganggate.sim.helpers import podrequests, taints
from ganggate.sim.helpers.nodeaffinity import RequiredNodeAffinity
from ganggate.sim.scheduler import plugins

# framework/types.go ActionType bits
ADD = 1
DELETE = 1 << 1
UPDATE_NODE_ALLOCATABLE = 1 << 2
UPDATE_NODE_LABEL = 1 << 3
UPDATE_NODE_TAINT = 1 << 4
UPDATE_NODE_CONDITION = 1 << 5
UPDATE_NODE_ANNOTATION = 1 << 6
UPDATE_POD_LABEL = 1 << 7
UPDATE_POD_SCALE_DOWN = 1 << 8
UPDATE_POD_TOLERATION = 1 << 9
UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 10
UPDATE_POD_OTHER = 1 << 11  # updatePodOther: a change no UpdatePodXYZ covers (internal)
UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 12  # status.resourceClaimStatuses (or the extended one) changed
UPDATE = (UPDATE_NODE_ALLOCATABLE | UPDATE_NODE_LABEL | UPDATE_NODE_TAINT | UPDATE_NODE_CONDITION
          | UPDATE_NODE_ANNOTATION | UPDATE_POD_LABEL | UPDATE_POD_SCALE_DOWN | UPDATE_POD_TOLERATION
          | UPDATE_POD_SCHEDULING_GATES_ELIMINATED | UPDATE_POD_OTHER | UPDATE_POD_GENERATED_RESOURCE_CLAIM)
ALL = ADD | DELETE | UPDATE

NODE, POD, ASSIGNED_POD, UNSCHEDULED_POD, WILDCARD = "Node", "Pod", "AssignedPod", "UnschedulablePod", "*"

# The plugins a pod can be rejected by in kubesim (framework/plugins/names), and NodeReady.
FIT, AFFINITY, UNSCHEDULABLE, TAINT, READY, DRA = (
    "NodeResourcesFit", "NodeAffinity", "NodeUnschedulable", "TaintToleration", "NodeReady", "DynamicResources")

# The DRA objects' resources as framework/types.go names them (EventResource).
RESOURCE_CLAIM, RESOURCE_SLICE, DEVICE_CLASS = "ResourceClaim", "ResourceSlice", "DeviceClass"


@dataclass(frozen=True)
class ClusterEvent:
    """framework.ClusterEvent: a resource and the action bits that happened to it."""

    resource: str
    action: int
    label: str = ""

    def matches(self, happened: ClusterEvent) -> bool:
        """MatchClusterEvents(registered=self, happened)."""
        if self.resource == WILDCARD:
            return True
        if self.resource == POD:
            same = happened.resource in (POD, ASSIGNED_POD, UNSCHEDULED_POD)
        else:
            same = self.resource == happened.resource
        return same and bool(self.action & happened.action)

    @property
    def wildcard(self) -> bool:
        return self.resource == WILDCARD


ASSIGNED_POD_DELETE = ClusterEvent(ASSIGNED_POD, DELETE, "AssignedPodDelete")
ASSIGNED_POD_ADD = ClusterEvent(ASSIGNED_POD, ADD, "AssignedPodAdd")
NODE_ADD = ClusterEvent(NODE, ADD, "NodeAdd")
NODE_DELETE = ClusterEvent(NODE, DELETE, "NodeDelete")
UNSCHEDULABLE_TIMEOUT = ClusterEvent(WILDCARD, ALL, "UnschedulableTimeout")
FORCE_ACTIVATE = ClusterEvent(WILDCARD, ALL, "ForceActivate")


def _conditions(node: Mapping) -> dict:
    return {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}


def node_change_events(old: Mapping, new: Mapping) -> list[ClusterEvent]:
    """NodeSchedulingPropertiesChange: the UpdateNodeXYZ events an update carries."""
    events = []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if bool(old_spec.get("unschedulable")) != bool(new_spec.get("unschedulable")) and not new_spec.get("unschedulable"):
        events.append(UPDATE_NODE_TAINT)  # extractNodeSpecUnschedulableChange
    if podrequests.node_allocatable(old) != podrequests.node_allocatable(new):
        events.append(UPDATE_NODE_ALLOCATABLE)
    if ((old.get("metadata") or {}).get("labels") or {}) != ((new.get("metadata") or {}).get("labels") or {}):
        events.append(UPDATE_NODE_LABEL)
    if (old_spec.get("taints") or []) != (new_spec.get("taints") or []):
        events.append(UPDATE_NODE_TAINT)
    if _conditions(old) != _conditions(new):
        events.append(UPDATE_NODE_CONDITION)
    if ((old.get("metadata") or {}).get("annotations") or {}) != ((new.get("metadata") or {}).get("annotations") or {}):
        events.append(UPDATE_NODE_ANNOTATION)
    return [ClusterEvent(NODE, action, "NodeUpdate") for action in events]


def pod_scaled_down(old: Mapping, new: Mapping) -> bool:
    """extractPodScaleDown: some request of the pod went down (or away)."""
    try:
        before, after = podrequests.pod_requests(old), podrequests.pod_requests(new)
    except ValueError:
        return False
    return any(name not in after or after[name] < amount for name, amount in before.items())


# -- the hints (pod: the unschedulable pod; old/new: the event's objects, None when absent) ----

Hint = Callable[[Mapping, Mapping | None, Mapping | None], bool]  # True: Queue, False: QueueSkip


def _fits_empty(pod: Mapping, node: Mapping) -> bool:
    request = podrequests.pod_requests(pod)
    allocatable = podrequests.node_allocatable(node)
    return not plugins.insufficient_resources(request, allocatable, {}, 0)


def fit_after_node_change(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """NodeResourcesFit isSchedulableAfterNodeChange: the node fits the pod when empty, and it
    was added or one of the resources the pod requests (or its pod count) grew."""
    if new is None or not _fits_empty(pod, new):
        return False
    if old is None:
        return True
    request = podrequests.pod_requests(pod)
    before, after = podrequests.node_allocatable(old), podrequests.node_allocatable(new)
    if after.get(podrequests.PODS, 0) > before.get(podrequests.PODS, 0):
        return True
    return any(amount > 0 and after.get(name, 0) > before.get(name, 0)
               for name, amount in request.items() if name != podrequests.PODS)


def fit_after_pod_event(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """NodeResourcesFit isSchedulableAfterPodEvent: a deleted pod that was bound or nominated, or
    a scaled-down one (the pod itself, or a bound pod whose request of a resource it asks for fell)."""
    if new is None:
        old = old or {}
        return bool((old.get("spec") or {}).get("nodeName") or (old.get("status") or {}).get("nominatedNodeName"))
    if ((new.get("metadata") or {}).get("uid") or 0) == ((pod.get("metadata") or {}).get("uid") or 1):
        return True
    if not (new.get("spec") or {}).get("nodeName") or old is None:
        return False
    wanted = podrequests.pod_requests(pod)
    before, after = podrequests.pod_requests(old), podrequests.pod_requests(new)
    return any(amount > 0 and before.get(name, 0) > after.get(name, 0)
               for name, amount in wanted.items() if name != podrequests.PODS)


def fit_after_pod_event_before_1_33(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """The same before kubernetes#129058 (1.33): a deleted pod counts only if it was bound."""
    if new is None:
        return bool(((old or {}).get("spec") or {}).get("nodeName"))
    return fit_after_pod_event(pod, old, new)


def affinity_after_node_change(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """NodeAffinity isSchedulableAfterNodeChange: the node matches now and did not before."""
    required = RequiredNodeAffinity(pod)
    if new is None or not required.match(new):
        return False
    return old is None or not required.match(old)


def unschedulable_after_node_change(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """NodeUnschedulable: added schedulable, or uncordoned."""
    if new is None or taints.is_unschedulable(new):
        return False
    return old is None or taints.is_unschedulable(old)


def taint_after_node_change(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """TaintToleration: an untolerated NoSchedule/NoExecute taint went away (or a tolerable node came)."""
    tolerations = taints.pod_tolerations(pod)
    was = True if old is None else taints.untolerated_taint(taints.node_taints(old), tolerations) is not None
    if new is None:
        return False
    return was and taints.untolerated_taint(taints.node_taints(new), tolerations) is None


def toleration_after_pod_change(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """isSchedulableAfterPodTolerationChange: the pod itself got a toleration."""
    return ((new or {}).get("metadata") or {}).get("uid") == (pod.get("metadata") or {}).get("uid")


def ready_after_node_change(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    """kubesim's NodeReady: a node added Ready, or turned Ready."""
    return new is not None and plugins.node_is_ready(new) and (old is None or not plugins.node_is_ready(old))


def _always(pod: Mapping, old: Mapping | None, new: Mapping | None) -> bool:
    return True  # defaultQueueingHintFn


Registration = tuple[ClusterEvent, Hint]


def registrations(queueing_hints: bool, release: tuple[int, int] = (1, 35)) -> dict[str, list[Registration]]:
    """Each plugin's EventsToRegister, as the scheduler of `release` with or without
    SchedulerQueueingHints builds them (scheduler.go buildQueueingHintMap)."""
    scale_down = UPDATE_POD_SCALE_DOWN if release >= (1, 33) else 0  # InPlacePodVerticalScaling beta (on) in 1.33
    fit_pod = fit_after_pod_event if release >= (1, 33) else fit_after_pod_event_before_1_33
    if queueing_hints:
        return {
            FIT: [(ClusterEvent(POD, DELETE | scale_down), fit_pod),
                  (ClusterEvent(NODE, ADD | UPDATE_NODE_ALLOCATABLE), fit_after_node_change)],
            AFFINITY: [(ClusterEvent(NODE, ADD | UPDATE_NODE_LABEL), affinity_after_node_change)],
            UNSCHEDULABLE: [(ClusterEvent(NODE, ADD | UPDATE_NODE_TAINT), unschedulable_after_node_change),
                            (ClusterEvent(POD, UPDATE_POD_TOLERATION), toleration_after_pod_change)],
            TAINT: [(ClusterEvent(NODE, ADD | UPDATE_NODE_TAINT), taint_after_node_change),
                    (ClusterEvent(POD, UPDATE_POD_TOLERATION), toleration_after_pod_change)],
            READY: [(ClusterEvent(NODE, ADD | UPDATE_NODE_CONDITION), ready_after_node_change)],
            DRA: _dra_registrations(),
        }
    node_updates = UPDATE_NODE_TAINT | UPDATE_NODE_LABEL  # kubernetes#109437: preCheck may hide Node/Add
    return {
        FIT: [(ClusterEvent(POD, DELETE | scale_down), _always),
              (ClusterEvent(NODE, ADD | UPDATE_NODE_ALLOCATABLE | node_updates), _always)],
        AFFINITY: [(ClusterEvent(NODE, ADD | node_updates), _always)],
        UNSCHEDULABLE: [(ClusterEvent(NODE, ADD | node_updates), _always)],
        TAINT: [(ClusterEvent(NODE, ADD | node_updates), _always)],
        READY: [(ClusterEvent(NODE, ADD | UPDATE_NODE_CONDITION | node_updates), _always)],
        DRA: _dra_registrations(),
    }


def _dra_registrations() -> list[Registration]:
    """dynamicresources.go EventsToRegister: claims and slices added or updated (allocations are
    tracked in claims; new devices may appear in slices), device classes added or updated, a pod's
    generated claim named in its status (UpdatePodGeneratedResourceClaim). kubesim
    queues on each, and on a claim deleted too (its hints are the default Queue: never fewer
    retries than the real hints', so ordinary pods compete at least as hard as on a real cluster)."""
    return [(ClusterEvent(RESOURCE_CLAIM, ADD | UPDATE | DELETE), _always),
            (ClusterEvent(RESOURCE_SLICE, ADD | UPDATE), _always),
            (ClusterEvent(DEVICE_CLASS, ADD | UPDATE), _always),
            (ClusterEvent(POD, UPDATE_POD_GENERATED_RESOURCE_CLAIM), _always)]


def generated_claims_changed(old: Mapping, new: Mapping) -> bool:
    """framework/events.go extractPodGeneratedResourceClaimChange: the claims the resourceclaim
    controller named in the pod's status changed."""
    def claims(pod: Mapping) -> tuple:
        status = pod.get("status") or {}
        return (status.get("resourceClaimStatuses"), status.get("extendedResourceClaimStatus"))
    return claims(old) != claims(new)


def dra_event(resource: str, kind: str) -> ClusterEvent:
    """The cluster event of a DRA object's watch event (kind ADDED, MODIFIED or DELETED)."""
    return ClusterEvent(resource, {"ADDED": ADD, "DELETED": DELETE}.get(kind, UPDATE), f"{resource}{kind.title()}")


def is_event_of_interest(table: Mapping[str, list[Registration]], event: ClusterEvent) -> bool:
    """isEventOfInterest: a wildcard, or an event some plugin registered."""
    return event.wildcard or any(registered.matches(event) for regs in table.values() for registered, _ in regs)


def worth_requeuing(table: Mapping[str, list[Registration]], rejected_by: frozenset[str], pod: Mapping,
                    event: ClusterEvent, old: Mapping | None, new: Mapping | None) -> bool:
    """isPodWorthRequeuing: True for queueAfterBackoff, False for queueSkip (kubesim has no Pending
    plugins, so never queueImmediately)."""
    if not rejected_by or event.wildcard:
        return True
    for plugin in rejected_by:
        for registered, hint in table.get(plugin, ()):
            if not registered.matches(event):
                continue
            try:
                if hint(pod, old, new):
                    return True
            except (ValueError, TypeError, KeyError):
                return True  # a hint that errs counts as Queue
    return False


def rejecting_plugin(reason: str) -> str:
    """The plugin behind one of kubesim's per-node filter reasons."""
    if reason == plugins.NOT_READY:
        return READY
    if reason == plugins.UNSCHEDULABLE:
        return UNSCHEDULABLE
    if reason == plugins.AFFINITY:
        return AFFINITY
    if reason.startswith("node(s) had untolerated taint"):
        return TAINT
    if reason == "Too many pods" or reason.startswith("Insufficient "):
        return FIT
    return DRA  # dynamicresources.py: a claim that cannot be allocated, or is not there yet
