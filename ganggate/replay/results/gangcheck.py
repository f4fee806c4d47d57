"""Whether every gang is whole, from the pods as the API server holds them: pure, shared by the
end-to-end tests' checker and the disruption replay.

A gang is the set of pods sharing `scheduling.k8s.io/group-name` in one namespace (pods of
other schedulers are not ganggate's and are left out). Pods that ended (Succeeded, Failed)
are history: they neither hold nor count towards the gang, except that a Succeeded pod has
done its share (a gang finishing pod by pod is not broken).

- **holding**: a pod bound to a node and not ended, terminating ones included (a pod being
  deleted keeps its node's resources until the kubelet reports it gone);
- **complete**: at least min-available pods (default all of group-pod-num) are Running and
  not terminating, or Succeeded;
- **incomplete GPUs**: GPUs held by the holding pods of gangs that are not complete: GPUs
  bound to a job that cannot compute;
- **whole or waiting**: a complete gang all of whose bound, not-terminating pods are Running,
  or a gang none of whose pods is bound but those terminating. Anything else is partly bound.
  A terminating pod is on its way out (a restart, an eviction, a node lost for good): its
  GPUs count as held, but it is not part of the gang's shape.
- **required topology broken**: a gang whose pods require one domain of a level
  (`group-topology-required`, a node label key) with its bound, not-ended pods on nodes of more
  than one value of that label (a node without the label is a domain of its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ganggate.contract import GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM, GROUP_TOPOLOGY_REQUIRED
from ganggate.core.fit.resources import GPU, pod_requests

ENDED = ("Succeeded", "Failed")
SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class GangState:
    """One gang at one instant."""

    namespace: str
    name: str
    size: int
    min_available: int
    pods: int  # pods of the gang that have not ended
    holding: int  # bound, not ended (terminating included)
    running: int  # Running and not terminating
    succeeded: int
    terminating: int
    terminating_bound: int
    gated: int
    holding_gpus: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def complete(self) -> bool:
        return self.running + self.succeeded >= self.min_available

    @property
    def incomplete_gpus(self) -> int:
        """GPUs this gang holds without being able to compute (0 for a complete gang)."""
        return 0 if self.complete else self.holding_gpus

    @property
    def whole_running(self) -> bool:
        return self.complete and self.holding - self.terminating_bound == self.running

    @property
    def waiting(self) -> bool:
        return self.holding == self.terminating_bound

    def describe(self) -> str:
        return (f"gang {self.key}: {self.holding} of {self.pods} live pods bound ({self.running} running, "
                f"{self.terminating} terminating, {self.gated} gated), min-available {self.min_available} "
                f"of {self.size}, {self.succeeded} succeeded")


def _int(text: object, default: int) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


def gang_states(pods: Iterable[Mapping], scheduler: str = SCHEDULER) -> dict[str, GangState]:
    """Every gang among `pods` (namespace/name -> state)."""
    tallies: dict[str, dict] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        spec = pod.get("spec") or {}
        if GROUP_NAME not in ann or (spec.get("schedulerName") or SCHEDULER) != scheduler:
            continue
        key = f"{meta.get('namespace', 'default')}/{ann[GROUP_NAME]}"
        size = _int(ann.get(GROUP_POD_NUM), 1)
        t = tallies.setdefault(key, {"ns": meta.get("namespace", "default"), "name": ann[GROUP_NAME], "size": size,
                                     "min": _int(ann.get(GROUP_MIN_AVAILABLE), size), "pods": 0, "holding": 0,
                                     "running": 0, "succeeded": 0, "terminating": 0, "tbound": 0, "gated": 0,
                                     "gpus": 0})
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase == "Succeeded":
            t["succeeded"] += 1
        if phase in ENDED:
            continue
        t["pods"] += 1
        terminating = bool(meta.get("deletionTimestamp"))
        t["terminating"] += terminating
        t["gated"] += bool(spec.get("schedulingGates"))
        if spec.get("nodeName"):
            t["holding"] += 1
            t["tbound"] += terminating
            t["gpus"] += pod_requests(pod).get(GPU, 0) // 1000
            t["running"] += phase == "Running" and not terminating
    return {key: GangState(t["ns"], t["name"], t["size"], t["min"], t["pods"], t["holding"], t["running"],
                           t["succeeded"], t["terminating"], t["tbound"], t["gated"], t["gpus"])
            for key, t in tallies.items()}


def incomplete_gpus(pods: Iterable[Mapping], scheduler: str = SCHEDULER) -> int:
    """GPUs held by bound, not-ended pods of gangs that are not complete."""
    return sum(s.incomplete_gpus for s in gang_states(pods, scheduler).values())


def partly_bound(pods: Iterable[Mapping], scheduler: str = SCHEDULER) -> list[str]:
    """A description of each gang that is neither whole and running nor wholly waiting."""
    return [s.describe() for s in gang_states(pods, scheduler).values() if not (s.whole_running or s.waiting)]


def span(nodes: Iterable[str], labels: Mapping[str, Mapping[str, str]], key: str) -> int:
    """How many distinct values of label `key` the nodes have (a node without it counts alone)."""
    return len({labels.get(n, {}).get(key, f"\0{n}") for n in nodes})


def required_topology_broken(pods: Iterable[Mapping], node_labels: Mapping[str, Mapping[str, str]],
                             scheduler: str = SCHEDULER) -> list[str]:
    """A description of each gang whose bound, not-ended pods leave the one domain it requires."""
    found: dict[str, tuple[str, set[str]]] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ann = meta.get("annotations") or {}
        level, node = ann.get(GROUP_TOPOLOGY_REQUIRED), spec.get("nodeName")
        if (GROUP_NAME not in ann or not level or not node or (spec.get("schedulerName") or SCHEDULER) != scheduler
                or ((pod.get("status") or {}).get("phase") in ENDED)):
            continue
        found.setdefault(f"{meta.get('namespace', 'default')}/{ann[GROUP_NAME]}", (level, set()))[1].add(node)
    broken = []
    for key, (level, nodes) in sorted(found.items()):
        if (domains := span(nodes, node_labels, level)) > 1:
            broken.append(f"gang {key} requires one {level}: on {domains} ({', '.join(sorted(nodes))})")
    return broken


class GpuSecondsMeter:
    """The time integral of a sampled figure (each sample holds until the next), in value-seconds."""

    def __init__(self) -> None:
        self.total = 0.0
        self.peak = 0
        self.samples = 0
        self._last: tuple[float, int] | None = None

    def add(self, time: float, value: int) -> None:
        if self._last is not None and time > self._last[0]:
            self.total += self._last[1] * (time - self._last[0])
        self._last = (time, value)
        self.peak = max(self.peak, value)
        self.samples += 1
