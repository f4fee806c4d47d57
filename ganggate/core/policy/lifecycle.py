"""A gang's life after admission, as pure decisions: room held by terminating pods, members
lost (failed, deleted, preempted, evicted, not bound in time) and gangs that wait too long.

The controller's shell (`ganggate.controller.lifecycle.memberloss`, `ganggate.controller.lifecycle.protection`)
acts on what these functions say; nothing here does I/O or reads a clock.

A member is lost when a released, live pod of a gang stops being a member: it Failed, or it is
being deleted (a deletionTimestamp), or it is gone without either having been seen. A pod that
Succeeded is not lost. `ClusterState` records each loss once, when it sees it
(`MemberLoss`); after a relist `losses_after_relist` finds the losses of gangs that are still
broken, so that a controller restarted in the middle of one still acts on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.explain import plural
from ganggate.core.placement.packing import plan_gang
from ganggate.core.policy.planloss import CAUSE as PLAN_LOST
from ganggate.core.policy.planloss import stranded_members
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang, GangKey, timed_out
from ganggate.core.state.losses import MemberLoss, is_below_min, owner_of, survivors
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo


@dataclass
class Breakage:
    """What a loss means for its gang: whether it is now below min-available, which of its
    remaining released pods a restart deletes (owned) and which it must leave (bare)."""

    gang_key: GangKey
    loss: MemberLoss
    below_min: bool
    left: int = 0
    min_available: int = 0
    to_delete: list[PodInfo] = field(default_factory=list)
    bare: list[PodInfo] = field(default_factory=list)
    #: Only the stranded members are deleted (their owner recreates them gated and they are
    #: placed beside the running gang), the rest still at least min-available: a re-plan.
    replan: bool = False

    def message(self, policy: str) -> str:
        gang = f"{self.gang_key[0]}/{self.gang_key[1]}"
        head = f"gang {gang} lost pod {self.loss.pod_key.split('/', 1)[1]} ({self.loss.cause}: {self.loss.cause_text})"
        if self.replan:
            head += f"; {self.left} left, at least {self.min_available} needed"
            if policy != "restart":
                return f"{head}; not re-planned (--on-member-loss={policy})"
            if not self.to_delete:
                return f"{head}; it has no owning controller: left alone, pinned where it cannot bind"
            return (f"{head}; re-planning: deleting {plural(len(self.to_delete), 'pinned pod')} that cannot bind so "
                    "that their controller recreates them and they are placed beside the running ones")
        if not self.below_min:
            if self.left >= self.min_available:
                return f"{head}; {self.left} left, at least {self.min_available} needed: it runs on"
            # No released member is left (all lost at once, e.g. with their node): nothing runs
            # on and nothing is left to restart; pods their owner recreates come back gated.
            rest = "the others have finished" if self.left else "no member is left running"
            return (f"{head}; {self.left} left, {self.min_available} needed: {rest}, nothing to restart "
                    "(pods recreated by their owner come back gated and wait to be admitted whole)")
        head += f"; {self.left} left, {self.min_available} needed"
        if policy != "restart":
            return f"{head}; not restarted (--on-member-loss={policy})"
        parts = []
        if self.to_delete:
            parts.append(f"deleting {plural(len(self.to_delete), 'pod')} so that their controller recreates "
                         "them and the gang is admitted whole again")
        if not self.to_delete:  # nothing restarts: say so, and why
            if self.bare:
                return (f"{head}; not restarted: the {plural(len(self.bare), 'pod')} left "
                        f"{'has' if len(self.bare) == 1 else 'have'} no owning controller to recreate "
                        f"{'it' if len(self.bare) == 1 else 'them'}, and ganggate never deletes such pods")
            return f"{head}; nothing left to restart"
        if self.bare:
            parts.append(f"{plural(len(self.bare), 'pod')} without an owning controller left alone")
        return f"{head}; restarting: " + "; ".join(parts)


def judge_loss(state: ClusterState, loss: MemberLoss) -> Breakage:
    """Whether the loss broke its gang, and what a restart would delete: the gang's remaining
    released members with an owning controller (never a bare pod, never a gated one)."""
    gang = state.gangs.get(loss.gang_key)
    if gang is None or gang.spec is None:
        return Breakage(loss.gang_key, loss, below_min=False)
    if loss.cause == PLAN_LOST:
        return _judge_plan_lost(state, gang, loss)
    # A gang not all bound within the bind timeout is as good as broken: it holds what is
    # bound while the rest cannot start, so it is rolled back as a whole.
    # So is one with a member on a node lost longer than --node-lost-after (nodes_lost).
    below = is_below_min(gang) or loss.cause in ("BindTimeout", "NodeLost")
    out = Breakage(loss.gang_key, loss, below_min=below, left=survivors(gang), min_available=gang.spec.min_available)
    if below:
        for pod in sorted(gang.released_pods(), key=lambda p: p.key):
            (out.to_delete if pod.owned else out.bare).append(pod)
    return out


def _judge_plan_lost(state: ClusterState, gang: Gang, loss: MemberLoss) -> Breakage:
    """The rule for members whose plan is lost (core.policy.planloss): without them, is the gang still
    at least min-available? Then re-plan: delete only them (owned ones), so that their owner
    recreates them gated and they are placed beside the running members. Else restart the whole
    gang, as for a failed member: delete every released owned member."""
    assert gang.spec is not None
    lost = stranded_members(state, gang)
    if not any(p.uid == loss.uid for p in lost):  # it bound, or the room came back, meanwhile
        return Breakage(loss.gang_key, loss, below_min=False, left=survivors(gang),
                        min_available=gang.spec.min_available)
    left = survivors(gang) - len(lost)
    out = Breakage(loss.gang_key, loss, below_min=left < gang.spec.min_available, left=left,
                   min_available=gang.spec.min_available, replan=left >= gang.spec.min_available)
    victims = lost if out.replan else sorted(gang.released_pods(), key=lambda p: p.key)
    for pod in victims:
        (out.to_delete if pod.owned else out.bare).append(pod)
    return out


# ---- nodes lost (--node-lost-after) ------------------------------------------------------


def lost_nodes(state: ClusterState, now: float, after: float) -> set[str]:
    """Nodes whose Ready condition has been False or Unknown for longer than `after` seconds."""
    return {name for name, node in state.nodes.items()
            if not node.ready and node.not_ready_since is not None and now - node.not_ready_since > after}


def nodes_lost(state: ClusterState, now: float, after: float) -> list[MemberLoss]:
    """A loss (cause NodeLost) for each released, live member bound to a node lost for longer
    than `after` seconds: judge_loss restarts its gang whole, without waiting for the taint
    manager's eviction (the pods' not-ready/unreachable toleration, 300 s by default)."""
    lost = lost_nodes(state, now, after)
    if not lost:
        return []
    out: list[MemberLoss] = []
    for key, gang in state.gangs.items():
        if not gang.released_count:
            continue
        for pod in sorted(gang.released_pods(), key=lambda p: p.key):
            if pod.node_name in lost:
                decision = pod.decision.get("id") if isinstance(pod.decision, dict) else None
                out.append(MemberLoss(key, pod.key, pod.uid, "NodeLost", None if decision is None else str(decision),
                                      owner_of(pod)))
    return out


def node_lost_due(state: ClusterState, now: float, after: float) -> float | None:
    """The earliest instant after `now` at which a node not Ready becomes lost, or None."""
    due = [node.not_ready_since + after for node in state.nodes.values()
           if not node.ready and node.not_ready_since is not None and node.not_ready_since + after > now]
    return min(due) if due else None


# ---- terminating pods hold room ---------------------------------------------------------


def waits_for_terminating(pods: list[PodInfo], capacity: Capacity, need: int, state: ClusterState) -> str | None:
    """When a gang that does not fit would fit once the pods being deleted on the nodes are
    gone, say so; else None. The capacity is left as it was found."""
    held: dict[str, list[PodInfo]] = {}
    for pod in state.terminating.values():
        if pod.node_name in capacity.free:
            held.setdefault(pod.node_name, []).append(pod)
    if not held:
        return None
    for node, holders in held.items():
        for pod in holders:
            capacity.take(node, pod.request, -1)
    try:
        result = plan_gang(pods, capacity, need)
        if isinstance(result, Unfit):
            return None
        by_key = {p.key: p for p in pods}
        for key, node in result.items():
            capacity.take(node, by_key[key].request, -1)
        nodes = sorted({node for node in result.values() if node in held})
        count = sum(len(held[node]) for node in nodes)
        shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        return (f"waiting for {plural(count, 'terminating pod')} to go from {plural(len(nodes), 'node')} "
                f"({shown}): they still hold the room it needs")
    finally:
        for node, holders in held.items():
            for pod in holders:
                capacity.take(node, pod.request)


# ---- gangs that wait too long -----------------------------------------------------------


def gangs_timed_out(gangs: Mapping[GangKey, Gang], now: float, skip: Iterable[GangKey] = ()) -> list[tuple[GangKey, int]]:
    """Gangs (other than `skip`) past their timeout, with it."""
    skipped = set(skip)
    out = []
    for key, gang in gangs.items():
        if key in skipped:
            continue
        timeout = timed_out(gang, now)
        if timeout is not None:
            out.append((key, timeout))
    return sorted(out)
