"""Pods beyond a gang's group-pod-num: said once each, never released while the gang is full.

The core keeps them gated (`Gang.release_room`, `ordering.release_candidates`: at most
group-pod-num live members released, in every state); this shell tells the user, once per
pod, with a Warning Event `GangExcessMember` on the pod naming it and the count, and a log
line. `ganggate status` shows the same (`core.explain.excess_note`). A pod told about and
later released (a member ended) is not told again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ganggate.core.placement.explain import excess_message
from ganggate.core.policy.ordering import release_in_flight
from ganggate.core.state.cluster import ClusterState

_REMEMBER = 100_000  # pod uids told (oldest forgotten first)


class ExcessReporter:
    """Emits GangExcessMember for the excess pods of the gangs it is shown, once per pod."""

    def __init__(self, events: Any) -> None:
        self.events = events
        self._told: OrderedDict[str, None] = OrderedDict()

    def report(self, state: ClusterState) -> int:
        """Tell each new excess pod; returns how many were told now. Reads only the gangs with
        more live pods than declared (ClusterState.over_declared). A gang with a release in
        flight waits until the release is seen (its promised pods are still gated, not yet
        counted as released)."""
        told = 0
        for key in sorted(state.over_declared):
            gang = state.gangs.get(key)
            if gang is None or release_in_flight(gang, state.promises):
                continue
            for pod in gang.excess_pods():
                if pod.uid in self._told:
                    continue
                self._told[pod.uid] = None
                while len(self._told) > _REMEMBER:
                    self._told.popitem(last=False)
                self.events.emit(pod, "GangExcessMember", excess_message(gang, pod))
                told += 1
        return told
