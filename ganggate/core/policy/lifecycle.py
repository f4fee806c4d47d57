"""A gang's life after admission, as pure decisions: room held by terminating pods, members
lost (failed, deleted, preempted, evicted, not bound in time) and gangs that wait too long.

The controller's shell (`ganggate.controller.memberloss`, `ganggate.controller.protection`)
acts on what these functions say; nothing here does I/O or reads a clock.

A member is lost when a released, live pod of a gang stops being a member: it Failed, or it is
being deleted (a deletionTimestamp), or it is gone without either having been seen. A pod that
Succeeded is not lost. `ClusterState` records each loss once, when it sees it
(`MemberLoss`); after a relist `losses_after_relist` finds the losses of gangs that are still
broken, so that a controller restarted in the middle of one still acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ganggate.core.placement.capacity import Capacity
from ganggate.core.state.cluster import ClusterState
from ganggate.core.placement.explain import plural
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.losses import (  # noqa: F401  (re-exported)
    CAUSES,
    MemberLoss,
    cause_of,
    is_below_min,
    loss_of,
    losses_after_relist,
    owner_of,
    survivors,
)
from ganggate.core.state.outcome import Unfit
from ganggate.core.placement.packing import plan_gang
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

    def message(self, policy: str) -> str:
        gang = f"{self.gang_key[0]}/{self.gang_key[1]}"
        head = f"gang {gang} lost pod {self.loss.pod_key.split('/', 1)[1]} ({self.loss.cause}: {self.loss.cause_text})"
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
        if self.bare:
            parts.append(f"{plural(len(self.bare), 'pod')} without an owning controller left alone")
        return f"{head}; restarting: " + ("; ".join(parts) if parts else "nothing left to delete")


def judge_loss(state: ClusterState, loss: MemberLoss) -> Breakage:
    """Whether the loss broke its gang, and what a restart would delete: the gang's remaining
    released members with an owning controller (never a bare pod, never a gated one)."""
    gang = state.gangs.get(loss.gang_key)
    if gang is None or gang.spec is None:
        return Breakage(loss.gang_key, loss, below_min=False)
    # A gang not all bound within the bind timeout is as good as broken: it holds what is
    # bound while the rest cannot start, so it is rolled back as a whole.
    # So is one with a member on a node lost longer than --node-lost-after (nodes_lost).
    below = is_below_min(gang) or loss.cause in ("BindTimeout", "NodeLost")
    out = Breakage(loss.gang_key, loss, below_min=below, left=survivors(gang), min_available=gang.spec.min_available)
    if below:
        for pod in sorted(gang.released_pods(), key=lambda p: p.key):
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


def timeout_of(gang: Gang) -> int | None:
    """The gang's group-timeout-seconds: the smallest its members carry, or None."""
    values = [p.timeout_seconds for p in gang.pods.values() if p.member and p.timeout_seconds is not None]
    return min(values) if values else None


def waiting_timeout(gang: Gang) -> int | None:
    """The timeout that applies to a gang now: its group-timeout-seconds while it still waits
    (incomplete, waiting for room, in conflict) and has a creation time to count from, else None."""
    if gang.state not in ("incomplete", "waiting", "conflict") or not gang.created:
        return None
    return timeout_of(gang)


def timed_out(gang: Gang, now: float) -> int | None:
    """The timeout a gang still waiting has exceeded, or None. It waits from its first pod's
    creation (timers.next_due wakes the controller just after that deadline)."""
    timeout = waiting_timeout(gang)
    if timeout is None or now - gang.created <= timeout:
        return None
    return timeout


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
