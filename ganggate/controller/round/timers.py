"""When the controller must next run a round even if nothing in the cluster changes: the earliest
promise deadline (bind timeout), gang timeout, start of a starvation hold-back or node becoming
lost (--node-lost-after) still ahead.

The controller sleeps on its clock until then (ganggate.kube.clock), so on a simulated clock a
replay jumps straight to that instant instead of missing it, and on the wall clock a bind
timeout is acted on when it falls due rather than at the next tick.
"""

from __future__ import annotations

from collections.abc import Iterable

from ganggate.core.policy.lifecycle import node_lost_due
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import GangKey

# The core's tests are strict ("waited more than"): a round at the due instant itself would not
# act yet, so the wake-up comes this much after it.
PAST = 0.001


def next_due(state: ClusterState, now: float, *, starvation_seconds: float,
             timed_out: Iterable[GangKey] = (), blind_seconds: float | None = None,
             node_lost_after: float | None = None) -> float | None:
    """The earliest instant after `now` at which a round would act on time alone, or None.

    timed_out: gangs already reported as timed out (they are not reported again). Read from the
    heaps the state keeps as events come (core.tallies), not from a walk over every gang.
    node_lost_after: --node-lost-after, when set (a node not Ready becomes lost then).
    """
    due = state.tallies.next_due(state, now, starvation_seconds, PAST, timed_out)
    if blind_seconds is not None:  # a hold where the pods have no deadline starts then
        blind = state.tallies.next_due(state, now, blind_seconds, PAST, timed_out)
        due = blind if due is None else due if blind is None else min(due, blind)
    if node_lost_after is not None and (lost := node_lost_due(state, now, node_lost_after)) is not None \
            and lost + PAST > now:
        due = lost + PAST if due is None else min(due, lost + PAST)
    return due
