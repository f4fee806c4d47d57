"""The state a user reads of a gang (`ganggate status`): the core's state, made truthful about
a gang's life after release (restarting, terminating, ended). Pure: no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ganggate.core.state.gangs import Gang
    from ganggate.core.state.pods import PodInfo

#: States `shown_state` adds to the core's (Gang.STATES) for a gang's life after release.
AFTER_RELEASE = ("restarting", "terminating", "completing", "succeeded", "failed", "broken")


def _restarting(going: list[PodInfo]) -> bool:
    """Pods going away for a disruption (a DisruptionTarget condition: ganggate's restart, an
    eviction, a preemption, the taint manager) that an owning controller recreates."""
    return any(p.disruption and p.owned for p in going)


def shown_state(gang: Gang) -> str:
    """The core's state, except that a released gang with fewer live released pods than its
    min-available never reads as running (or released, started): it is `restarting` (its pods are
    going away for a disruption, a DisruptionTarget condition, and their owner recreates them:
    ganggate's whole-gang restart, a drain's evictions), `terminating` (its pods are being deleted
    otherwise: the Job was deleted), `succeeded`/`failed` (every pod ended), `completing` (some
    pods succeeded, the rest still run), or `broken` (members lost and not replaced). A gang whose
    new pods wait while the old ones still end is `restarting` too."""
    spec = gang.spec
    going = [p for p in gang.pods.values() if p.terminating and not p.terminated]
    if gang.state in ("incomplete", "waiting") and _restarting(going):
        return "restarting"
    if gang.state not in ("running", "released", "started") or spec is None:
        return gang.state
    if gang.released_count >= spec.min_available:
        return gang.state
    if going:
        return "restarting" if _restarting(going) else "terminating"
    ended = [p for p in gang.pods.values() if p.terminated]
    if ended and not gang.live_pods():
        return "succeeded" if all(p.phase == "Succeeded" for p in ended) else "failed"
    if ended and all(p.phase == "Succeeded" for p in ended):
        return "completing"
    return "broken"
