"""A gang member lost: which released pod stopped counting toward its gang, and why.

Below `ganggate.core.state.cluster`, which records each loss as it sees it; what a loss means for
its gang is `ganggate.core.policy.lifecycle`'s. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.pods import PodInfo

#: The DisruptionTarget condition reasons Kubernetes sets (k8s.io/api/core/v1 types.go); a
#: loss's cause is one of these, else Failed, Deleted, BindTimeout, PlanLost (core.policy.planloss),
#: Disrupted (an unknown DisruptionTarget reason) or NodeLost (--node-lost-after), so that the
#: metric's label has few values.
DISRUPTION_REASONS = frozenset(
    {"PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "DeletionByPodGC",
     "TerminationByKubelet", "DeletionByGanggate"}
)
#: The DisruptionTarget reason ganggate writes on a pod before it deletes it (a whole-gang
#: restart, a bind timeout's recreate), named as Kubernetes names its own (DeletionByTaintManager,
#: DeletionByPodGC): see ganggate.core.policy.disruption.
GANGGATE_REASON = "DeletionByGanggate"
CAUSES = ("Failed", "Deleted", "BindTimeout", "PlanLost", "NodeLost", "Disrupted", *sorted(DISRUPTION_REASONS))
_CAUSE_TEXT = {
    "PreemptionByScheduler": "preempted by the scheduler",
    "DeletionByTaintManager": "evicted by a NoExecute taint (e.g. its node was lost)",
    "EvictionByEvictionAPI": "evicted through the Eviction API (e.g. a node drain)",
    "DeletionByPodGC": "deleted by the pod garbage collector (e.g. its node is gone)",
    "TerminationByKubelet": "terminated by the kubelet (e.g. node pressure or shutdown)",
    "DeletionByGanggate": "deleted by ganggate to restart its gang whole",
    "Failed": "its container failed",
    "Deleted": "deleted by a user or a controller, without a disruption condition",
    "BindTimeout": "not bound within the bind timeout",
    "PlanLost": "pinned to a node whose room pods bound after the plan took; the scheduler reports it Unschedulable",
    "NodeLost": "its node has not been Ready for longer than --node-lost-after",
    "Disrupted": "disrupted (a DisruptionTarget condition of another reason)",
}


@dataclass(frozen=True)
class MemberLoss:
    """One released member of a gang that stopped being one, and why."""

    gang_key: GangKey
    pod_key: str
    uid: str
    cause: str
    decision_id: str | None = None
    #: The pod's controller ownerReference (apiVersion, kind, name, uid), when it has one: a
    #: pod deleted because its owner is going is not a loss (controller.lifecycle.memberloss checks).
    owner: tuple[str, str, str, str] | None = None

    @property
    def cause_text(self) -> str:
        return _CAUSE_TEXT.get(self.cause, self.cause)


def loss_cause(old: PodInfo, new: PodInfo | None) -> str | None:
    """Why `old`, a released member, is no longer one after the event (None: it still is, or
    it Succeeded). new is None for a DELETED event."""
    if old.gated or not old.member:
        return None
    if new is not None and (new.member or new.phase == "Succeeded"):
        return None
    return cause_of(old, new)


def cause_of(before: PodInfo, now: PodInfo | None) -> str:
    """The cause of a loss: the DisruptionTarget reason when the pod has one, else Failed for
    a failed pod, else Deleted."""
    reason = (now.disruption if now is not None else None) or before.disruption
    if reason is not None:
        return reason if reason in DISRUPTION_REASONS else "Disrupted"
    if now is not None and now.phase == "Failed":
        return "Failed"
    return "Deleted"


def owner_of(pod: PodInfo) -> tuple[str, str, str, str] | None:
    """The pod's controller ownerReference as (apiVersion, kind, name, uid), or None."""
    ref = pod.controller_ref
    if ref is not None and ref.get("kind") and ref.get("name"):
        return (str(ref.get("apiVersion") or ""), str(ref["kind"]), str(ref["name"]), str(ref.get("uid") or ""))
    return None


def loss_of(gang_key: GangKey, old: PodInfo, new: PodInfo | None) -> MemberLoss | None:
    cause = loss_cause(old, new)
    if cause is None:
        return None
    decision = old.decision.get("id") if isinstance(old.decision, dict) else None
    return MemberLoss(gang_key, old.key, old.uid, cause, str(decision) if decision is not None else None,
                      owner_of(old))


def survivors(gang: Gang) -> int:
    """Released members plus released pods that Succeeded: what still counts toward
    min-available once the gang has started."""
    return gang.released_count + sum(1 for p in gang.pods.values() if not p.gated and p.phase == "Succeeded")


def is_below_min(gang: Gang | None) -> bool:
    """True when the gang has started (released members remain) and fewer than min-available
    of its pods are left: it is broken."""
    if gang is None or gang.spec is None or not gang.released_count:
        return False
    return survivors(gang) < gang.spec.min_available


def losses_after_relist(gangs: Mapping[GangKey, Gang]) -> list[MemberLoss]:
    """Losses of gangs still broken, read off a fresh list: released pods that Failed or are
    being deleted, of a decision some live member still carries, in a gang below min-available."""
    out: list[MemberLoss] = []
    for key, gang in gangs.items():
        if not is_below_min(gang):
            continue
        live_ids = set(gang.decision_ids())
        for pod in sorted(gang.pods.values(), key=lambda p: p.key):
            if pod.gated or pod.member or pod.phase == "Succeeded":
                continue
            decision = pod.decision.get("id") if isinstance(pod.decision, dict) else None
            if decision is None or str(decision) not in live_ids:
                continue
            out.append(MemberLoss(key, pod.key, pod.uid, cause_of(pod, pod), str(decision), owner_of(pod)))
    return out
