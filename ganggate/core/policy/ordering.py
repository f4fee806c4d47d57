"""Who goes first in a round: gangs by priority (higher first) and age (older first), and which of
a gang's pods are candidates for its release. A gang that does not fit does not block the ones
behind it (backfill) until it has waited longer than the starvation limit; then the capacity it
needs is held back (`holdback`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ganggate.core.state.gangs import Gang
from ganggate.core.state.pods import PodInfo


def round_key(gang: Gang) -> tuple[Any, ...]:
    """Higher priority first, then older, then by key (a stable order across rounds)."""
    return (-gang.priority, gang.created, gang.key)


def round_order(gangs: Iterable[Gang]) -> list[Gang]:
    """The gangs by round_key."""
    return sorted(gangs, key=round_key)


def release_candidates(gang: Gang) -> list[PodInfo]:
    """The gated pods a decision for the gang may release: the oldest ones, no more than
    group-pod-num minus the live members released already (Gang.release_room), whatever the
    gang's state, so that a gang never has more live members released than it declares; the
    rest (Gang.excess_pods) wait gated for a member to end."""
    gated = gang.gated_pods()
    if gang.spec is None:
        return list(gated)  # (a copy: gated_pods is the gang's own, kept between rounds)
    return gated[: gang.release_room]


def release_in_flight(gang: Gang, promises: Mapping[str, object]) -> bool:
    """Whether a gated pod of the gang holds a promise (a release in flight): the gang is not
    decided again until its release is seen, so that the pods it releases count against
    group-pod-num before any other gated pod becomes a candidate. Any gated pod, not only the
    candidates: creation order ties (one-second timestamps) may put a promised pod after them."""
    return bool(promises) and any(p.key in promises for p in gang.gated_pods())
