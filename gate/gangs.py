"""Gang bookkeeping: which pods make up a gang, whether they agree, and where the gang stands.

A gang is (namespace, group-name) over the pods of a served scheduler. `Gang.refresh()`
recomputes the derived fields from the gang's own pods only (O(gang size)), so that one pod
event never costs a pass over the cluster. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gate.contract import GROUP_MIN_AVAILABLE, GROUP_POD_NUM, GangSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    from gate.cluster import PodInfo

GangKey = tuple[str, str]

#: The states a gang can be in, in the order a gang normally goes through them.
STATES = ("incomplete", "conflict", "waiting", "partial", "started", "released", "running")


@dataclass
class Gang:
    """The pods of one gang and what they add up to.

    state:
      incomplete  fewer than group-pod-num non-terminated pods exist, none released
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
    pods: dict[str, "PodInfo"] = field(default_factory=dict)
    spec: GangSpec | None = None
    conflict: str | None = None
    complete_since: float | None = None
    priority: int = 0
    created: float = 0.0
    _state: str = "incomplete"

    @property
    def state(self) -> str:
        return self._state

    def live_pods(self) -> list["PodInfo"]:
        """Pods not yet Succeeded/Failed."""
        return [p for p in self.pods.values() if not p.terminated]

    def gated_pods(self) -> list["PodInfo"]:
        """Live pods still behind ganggate's gate, oldest first (then by name)."""
        return sorted(
            (p for p in self.pods.values() if p.gated and not p.terminated),
            key=lambda p: (p.created, p.key),
        )

    def released_pods(self) -> list["PodInfo"]:
        """Pods (of any phase) whose gate has been removed."""
        return [p for p in self.pods.values() if not p.gated]

    @property
    def live_count(self) -> int:
        return sum(1 for p in self.pods.values() if not p.terminated)

    @property
    def still_needed(self) -> int:
        """How many more pods must be released before min-available have been (partial)."""
        if self.spec is None:
            return 0
        return max(0, self.spec.min_available - len(self.released_pods()))

    def waiting_message(self) -> str:
        """The GangWaiting text for an incomplete gang: "3 of 4 pods exist"."""
        want = self.spec.pod_num if self.spec else 0
        return f"{self.live_count} of {want} pods exist"

    def decision_ids(self) -> list[str]:
        """Ids of the decisions recorded on the released pods, sorted."""
        ids = {
            str(p.decision.get("id"))
            for p in self.pods.values()
            if isinstance(p.decision, dict) and p.decision.get("id") is not None
        }
        return sorted(ids)

    def refresh(self) -> None:
        """Recompute spec, conflict, priority, ages and state from the gang's pods."""
        live = self.live_pods()
        considered = live or list(self.pods.values())
        self.priority = max((p.priority for p in considered), default=0)
        self.created = min((p.created for p in considered), default=0.0)
        self.spec, self.conflict = _agree(live)
        if self.spec is None and self.conflict is None:
            # Only terminated pods: keep the spec they carried, for status.
            self.spec, _ = _agree(list(self.pods.values()))
        self.complete_since = None
        if self.spec is not None and len(live) >= self.spec.pod_num:
            # The gang became complete when its pod_num-th pod was created.
            created = sorted(p.created for p in live)
            self.complete_since = created[self.spec.pod_num - 1]
        self._state = self._compute_state(live)

    def _compute_state(self, live: list["PodInfo"]) -> str:
        if self.conflict is not None:
            return "conflict"
        if self.spec is None:
            return "incomplete"
        released = self.released_pods()
        gated = [p for p in live if p.gated]
        if not released:
            return "waiting" if len(live) >= self.spec.pod_num else "incomplete"
        if gated:
            return "partial" if len(released) < self.spec.min_available else "started"
        if all(p.node_name for p in released if not p.terminated):
            return "running"
        return "released"


def _agree(pods: list["PodInfo"]) -> tuple[GangSpec | None, str | None]:
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
    for annotation, attr in ((GROUP_POD_NUM, "pod_num"), (GROUP_MIN_AVAILABLE, "min_available")):
        values: dict[int, list[str]] = {}
        for spec, names in specs.items():
            values.setdefault(getattr(spec, attr), []).extend(names)
        if attr == "min_available" and not any(spec.is_partial for spec in specs):
            continue  # min-available only follows group-pod-num: not a disagreement of its own
        if len(values) > 1:
            shown = ", ".join(
                f"{value} ({_names(sorted(names))})" for value, names in sorted(values.items())
            )
            parts.append(f"{annotation}: {shown}")
    return None, "pods disagree on " + "; ".join(parts)


def _names(names: list[str], limit: int = 5) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", and {len(names) - limit} more"
