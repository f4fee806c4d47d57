"""A released gang whose plan was lost: a member pinned to a node whose room other pods took.

ganggate plans a gang on free room, promises that room, and releases the members pinned to
their nodes. The default scheduler binds pods one at a time, in its own queue's order; an
ordinary pod created after the plan (or a pod of another scheduler) may bind into the room a
member was promised before that member binds (see docs/controller.md, "Released gangs that
cannot bind"). That member then cannot bind: an ungated pod's nodeSelector can no longer be
changed (KEP-3838 allows adding node affinity only while the pod is gated, and a gate, once
removed, cannot be put back), so it waits for room on the one node it may use while the rest
of its gang runs. That is a gang in pieces, and it is judged as a member loss at once, with
cause `PlanLost`, instead of at the bind timeout:

- the scheduler reported the member Unschedulable (PodScheduled False, reason Unschedulable):
  it has tried and the node has no room for it;
- and the node is over-committed in what the member asks: the requests of the pods bound
  there and of the members promised there exceed its allocatable, even with the pods being
  deleted there already gone. Room that only a terminating pod holds will come back; room
  held by a pod bound after the plan is lost for as long as that pod runs, which nobody knows.

Pure: the shell (`ganggate.controller.lifecycle.memberloss`) acts on the losses.
"""

from __future__ import annotations

from collections.abc import Mapping

from ganggate.core.fit.resources import Resources, add_into, fits
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang
from ganggate.core.state.losses import MemberLoss, owner_of
from ganggate.core.state.pods import PodInfo

CAUSE = "PlanLost"


def overcommitted(state: ClusterState, node: str, pod: PodInfo) -> bool:
    """True when what the pods bound to `node` and the members promised there ask, less what
    its terminating pods hold, exceeds its allocatable in a resource `pod` asks."""
    if node not in state.nodes:
        return False
    free: Resources = state.free(node)
    for holder in state.terminating.values():
        if holder.node_name == node:
            add_into(free, holder.request)
    return any(amount > 0 and free.get(name, 0) < 0 for name, amount in pod.request.items())


def stranded(state: ClusterState, pod: PodInfo) -> str | None:
    """The node a released member is pinned to and cannot bind on (its plan lost), or None."""
    promise = state.promises.get(pod.key)
    if promise is None or promise.node is None or promise.uid != pod.uid:
        return None
    if pod.node_name or pod.gated or not pod.member or not pod.unschedulable:
        return None
    return promise.node if overcommitted(state, promise.node, pod) else None


def plans_lost(state: ClusterState) -> list[MemberLoss]:
    """Every released member whose plan is lost now, as a member loss (cause PlanLost)."""
    out: list[MemberLoss] = []
    for key, promise in sorted(state.promises.items()):
        pod = state.pods.get(key)
        if pod is None or stranded(state, pod) is None:
            continue
        decision = pod.decision.get("id") if isinstance(pod.decision, dict) else None
        out.append(MemberLoss(promise.gang_key, key, pod.uid, CAUSE, None if decision is None else str(decision),
                              owner_of(pod)))
    return out


def stranded_members(state: ClusterState, gang: Gang) -> list[PodInfo]:
    """The gang's released members that cannot bind where they are pinned."""
    return [p for p in sorted(gang.pods.values(), key=lambda p: p.key) if stranded(state, p) is not None]


# ---- before the gates go: is the plan still good? -------------------------------------------
# A release nominates its members first (controller.release.patches); the watch echoing those
# nominations shows every pod event that came before them, bindings the plan did not see
# included. Checked then, before any gate goes, a lost plan costs nothing: the members are still
# gated, and the next round plans them again (controller.release.releases `confirm_plan`).


def unseen_nominations(state: ClusterState, nominated: Mapping[str, str]) -> list[str]:
    """The nominated pods whose nomination the watch has not shown yet (vanished ones aside)."""
    return [key for key, node in nominated.items()
            if (pod := state.pods.get(key)) is not None and pod.nominated_node != node]


def _planned_demand(state: ClusterState, placement: Mapping[str, str | None]) -> dict[str, Resources]:
    demand: dict[str, Resources] = {}
    for key, node in placement.items():
        pod = state.pods.get(key)
        if node is not None and pod is not None:
            add_into(demand.setdefault(node, {}), pod.request)
    return demand


def contesting_pods(state: ClusterState, placement: Mapping[str, str | None]) -> list[str]:
    """Pods a scheduler may bind now and has not yet tried (unbound, ungated, no room promised,
    not reported Unschedulable) that would fit a planned node without the gang but not with it:
    one the scheduler places before it sees the nominations can take a member's room. The
    planner keeps plans off such nodes (core.policy.contention); these appeared after the plan.
    Node eligibility is not checked (a pod that cannot use the node is waited for needlessly)."""
    untried = [(key, pod) for key, pod in state.pending.items()
               if key not in placement and key not in state.promises and not pod.unschedulable]
    if not untried:
        return []
    rooms: list[tuple[Resources, Resources]] = []  # per planned node: free without the gang, with it
    for node, amount in _planned_demand(state, placement).items():
        after = state.free(node)
        before = dict(after)
        add_into(before, amount)
        rooms.append((before, after))
    return [key for key, pod in untried
            if any(fits(pod.request, before) and not fits(pod.request, after) for before, after in rooms)]


def lost_nodes(state: ClusterState, placement: Mapping[str, str | None]) -> list[str]:
    """Planned nodes now over-committed in what a member planned there asks (`overcommitted`):
    pods bound since the plan took room the plan counted on."""
    lost: set[str] = set()
    for key, node in placement.items():
        pod = state.pods.get(key)
        if node is not None and pod is not None and node not in lost and overcommitted(state, node, pod):
            lost.add(node)
    return sorted(lost)
