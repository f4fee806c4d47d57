"""Gang bookkeeping: which pods make up a gang, whether they agree, and where the gang stands.

A gang is (namespace, group-name) over the pods of a served scheduler. A gang keeps running
tallies of its pods (live, gated, released, their specs, priorities and creation times) that
`add` and `discard` update, so that `refresh()` costs O(log gang size) per pod event even
for a 10,000-pod gang; only a gang in conflict is re-read in full, to name the conflict.
Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import TypeVar

from ganggate.contract import (
    GROUP_MIN_AVAILABLE,
    GROUP_POD_NUM,
    GROUP_TOPOLOGY_PREFERRED,
    GROUP_TOPOLOGY_REQUIRED,
    GangSpec,
)
from ganggate.core.fit.resources import GPU
from ganggate.core.state.pods import PodInfo

GangKey = tuple[str, str]

#: The states a gang can be in, in the order a gang normally goes through them.
STATES = ("incomplete", "conflict", "waiting", "partial", "started", "released", "running")


@dataclass
class Gang:
    """The pods of one gang and what they add up to.

    Members are the pods neither terminated (Succeeded/Failed) nor being deleted (a
    deletionTimestamp): a pod on its way out no longer counts toward its gang, so that the
    replacements its owner creates make the gang whole again (it still holds its node's room,
    see ClusterState). "live" below means members.

    state:
      incomplete  fewer than group-pod-num live pods exist, none released
      conflict    the pods disagree on group-pod-num or group-min-available
      waiting     complete, every pod still gated
      partial     some pods released, fewer than min-available, and gated pods remain:
                  a decision was cut short (controller died mid-release) and must be finished
      started     at least min-available released; the remaining gated pods are extras that
                  are released one by one whenever each fits
      released    no pod gated any more, not all of the live ones bound
      running     no pod gated, all bound
    """

    namespace: str
    name: str
    key: GangKey
    #: The gang's pods by key; read it freely, change it only through add() and discard().
    pods: dict[str, PodInfo] = field(default_factory=dict)
    spec: GangSpec | None = None
    conflict: str | None = None
    complete_since: float | None = None
    priority: int = 0
    created: float = 0.0
    _state: str = "incomplete"
    #: Bumped by every add and discard: equal values, the same pods (the shell's reports skip
    #: a gang whose pods and message are as when last reported).
    changes: int = field(default=0, compare=False)
    #: The nodes the last hold for this starving gang drained (holdback.hold_back): a hold stays
    #: on them, so that room it has half emptied is not handed back to be filled again.
    held_nodes: frozenset[str] = field(default=frozenset(), compare=False)
    # Running tallies (see the module docstring).
    _live: int = field(default=0, repr=False)
    _gated_live: int = field(default=0, repr=False)
    _released: int = field(default=0, repr=False)  # live pods without the gate
    _released_any: int = field(default=0, repr=False)  # pods of any phase without the gate
    _released_unbound_live: int = field(default=0, repr=False)
    _live_created: list[float] = field(default_factory=list, repr=False)  # sorted
    _live_priorities: Counter[int] = field(default_factory=Counter, repr=False)
    _live_specs: Counter[GangSpec] = field(default_factory=Counter, repr=False)
    _live_timeouts: Counter[int] = field(default_factory=Counter, repr=False)  # group-timeout-seconds carried
    _bound_live: int = field(default=0, repr=False)  # live pods with a node
    _bound_live_gpus: int = field(default=0, repr=False)  # their milli-GPUs
    _gated_sorted: list[PodInfo] | None = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> str:
        return self._state

    def add(self, pod: PodInfo) -> None:
        """Add (or replace) a pod; call refresh() once the event's changes are in."""
        self.discard(pod.key)
        self.pods[pod.key] = pod
        self._tally(pod, 1)

    def discard(self, key: str) -> None:
        """Remove a pod if present; call refresh() afterwards."""
        pod = self.pods.pop(key, None)
        if pod is not None:
            self._tally(pod, -1)

    def _tally(self, pod: PodInfo, sign: int) -> None:
        self._gated_sorted = None
        self.changes += 1
        if not pod.gated:
            self._released_any += sign
        if not pod.member:
            return
        if not pod.gated:
            self._released += sign
        self._live += sign
        if sign > 0:
            bisect.insort(self._live_created, pod.created)
        else:
            del self._live_created[bisect.bisect_left(self._live_created, pod.created)]
        _count(self._live_priorities, pod.priority, sign)
        if isinstance(pod.gang, GangSpec):
            _count(self._live_specs, pod.gang, sign)
        if pod.timeout_seconds is not None:
            _count(self._live_timeouts, pod.timeout_seconds, sign)
        if pod.node_name:
            self._bound_live += sign
            self._bound_live_gpus += sign * pod.request.get(GPU, 0)
        if pod.gated:
            self._gated_live += sign
        elif not pod.node_name:
            self._released_unbound_live += sign

    def live_pods(self) -> list[PodInfo]:
        """Members: pods not yet Succeeded/Failed and not being deleted."""
        return [p for p in self.pods.values() if p.member]

    def gated_pods(self) -> list[PodInfo]:
        """Live pods still behind ganggate's gate, oldest first (then by name); worked out once
        per change of the gang's pods (a round asks it of every gang). Do not change the list."""
        if self._gated_sorted is None:
            self._gated_sorted = sorted(
                (p for p in self.pods.values() if p.gated and p.member),
                key=lambda p: (p.created, p.key),
            )
        return self._gated_sorted

    def released_pods(self) -> list[PodInfo]:
        """Live pods whose gate has been removed."""
        return [p for p in self.pods.values() if not p.gated and p.member]

    @property
    def released_count(self) -> int:
        """How many live pods are released."""
        return self._released

    @property
    def live_count(self) -> int:
        return self._live

    @property
    def release_room(self) -> int:
        """How many more pods may be released now: group-pod-num minus the live members
        released already (bound or not). Never more than declared, in every state (issue #19):
        a failed or deleted member stops counting, which makes room for its replacement."""
        if self.spec is None:
            return 0
        return max(0, self.spec.pod_num - self._released)

    def excess_pods(self) -> list[PodInfo]:
        """Gated live pods beyond group-pod-num: those after the first `release_room` gated
        ones, by creation (then name). They stay gated until a live member ends; none while
        the gang is incomplete or in conflict."""
        if self.spec is None or self._state in ("incomplete", "conflict") or self._live <= self.spec.pod_num:
            return []
        return self.gated_pods()[self.release_room:]

    @property
    def bound_count(self) -> int:
        """How many live pods are bound to a node."""
        return self._bound_live

    @property
    def bound_gpus(self) -> int:
        """Milli-GPUs (nvidia.com/gpu) the live bound pods request."""
        return self._bound_live_gpus

    @property
    def timeout_seconds(self) -> int | None:
        """The smallest group-timeout-seconds a live pod carries, or None."""
        return min(self._live_timeouts) if self._live_timeouts else None

    @property
    def still_needed(self) -> int:
        """How many more pods must be released before min-available have been (partial)."""
        if self.spec is None:
            return 0
        return max(0, self.spec.min_available - self._released)

    def waiting_message(self) -> str:
        """The GangWaiting text for an incomplete gang: "3 of 4 pods exist"."""
        want = self.spec.pod_num if self.spec else 0
        return f"{self._live} of {want} pods exist"

    def decision_ids(self) -> list[str]:
        """Ids of the decisions recorded on the live released pods, sorted."""
        ids = {
            str(p.decision.get("id"))
            for p in self.pods.values()
            if p.member and isinstance(p.decision, dict) and p.decision.get("id") is not None
        }
        return sorted(ids)

    def refresh(self) -> None:
        """Recompute spec, conflict, priority, ages and state from the tallies."""
        if self._live:
            self.priority = max(self._live_priorities)
            self.created = self._live_created[0]
        else:  # only terminated pods left: keep what they said, for status
            self.priority = max((p.priority for p in self.pods.values()), default=0)
            self.created = min((p.created for p in self.pods.values()), default=0.0)
        if len(self._live_specs) == 1:
            self.spec, self.conflict = next(iter(self._live_specs)), None
        elif self._live_specs:
            self.spec, self.conflict = _agree(self.live_pods())
        else:
            self.spec, _ = _agree(list(self.pods.values()))
            self.conflict = None
        self.complete_since = None
        if self.spec is not None and self._live >= self.spec.pod_num:
            # The gang became complete when its pod_num-th pod was created.
            self.complete_since = self._live_created[self.spec.pod_num - 1]
        self._state = self._compute_state()

    def _compute_state(self) -> str:
        if self.conflict is not None:
            return "conflict"
        if self.spec is None:
            return "incomplete"
        if not self._released:
            if self._live >= self.spec.pod_num:
                return "waiting"
            if not self._live and self._released_any:
                return "running"  # all done (Succeeded/Failed/going): as it was when last seen
            return "incomplete"
        if self._gated_live:
            return "partial" if self._released < self.spec.min_available else "started"
        return "released" if self._released_unbound_live else "running"


# ---- gangs that wait too long (core.lifecycle re-exports these) ------------------------------


def timeout_of(gang: Gang) -> int | None:
    """The gang's group-timeout-seconds: the smallest its members carry, or None."""
    return gang.timeout_seconds  # tallied by the gang as its pods come and go


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


_K = TypeVar("_K")


def _count(counter: Counter[_K], key: _K, sign: int) -> None:
    value = counter[key] + sign
    if value:
        counter[key] = value
    else:
        del counter[key]


def _agree(pods: list[PodInfo]) -> tuple[GangSpec | None, str | None]:
    """The spec the pods agree on, or a text naming the disagreement."""
    specs: dict[GangSpec, list[str]] = {}
    for pod in sorted(pods, key=lambda p: p.key):
        if isinstance(pod.gang, GangSpec):
            specs.setdefault(pod.gang, []).append(pod.name)
    if not specs:
        return None, None
    if len(specs) == 1:
        return next(iter(specs)), None
    parts = []
    for annotation, attr in ((GROUP_POD_NUM, "pod_num"), (GROUP_MIN_AVAILABLE, "min_available"),
                             (GROUP_TOPOLOGY_REQUIRED, "topology_required"),
                             (GROUP_TOPOLOGY_PREFERRED, "topology_preferred")):
        values: dict[int | str | None, list[str]] = {}
        for spec, names in specs.items():
            values.setdefault(getattr(spec, attr), []).extend(names)
        if attr == "min_available" and not any(spec.is_partial for spec in specs):
            continue  # min-available only follows group-pod-num: not a disagreement of its own
        if len(values) > 1:
            shown = ", ".join(
                f"{'(none)' if value is None else value} ({_names(sorted(names))})"
                for value, names in sorted(values.items(), key=lambda found: str(found[0]))
            )
            parts.append(f"{annotation}: {shown}")
    return None, "pods disagree on " + "; ".join(parts)


def _names(names: list[str], limit: int = 5) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", and {len(names) - limit} more"
