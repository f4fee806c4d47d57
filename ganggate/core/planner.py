"""Deciding which gangs to release, and where their pods should go. Pure: no I/O, no clock.

`plan_gang` packs the pods of one gang onto the working free capacity of the nodes: largest
pods first, each on the node where it leaves the least free GPU (then the least free CPU and
memory), preferring nodes the gang already uses, so that GPUs stay unfragmented and a gang
sits on few nodes. Homogeneous gangs are placed whenever they fit (each placement lowers the
room, sum of per-node pod slots, by exactly one); gangs of several shapes that best fit
misses get two more greedy tries (CPU-heaviest first; fill the emptiest nodes one by one).
Fitting is per node and per resource, as the scheduler's NodeResourcesFit filter does it
(pkg/scheduler/framework/plugins/noderesources/fit.go); which nodes a pod may use at all
follows `ganggate.core.nodematch.node_rejects`.

`decide` runs one round over the whole cluster: roll-forward of cut-short decisions first,
then the other gangs by priority (higher first) and age (older first), each against the
capacity left by the decisions made before it in the same round, so that two gangs that each
fit alone but not together never both go. A gang that does not fit does not block the ones
behind it (backfill) until it has waited longer than `starvation_seconds`; then the capacity
it needs on the nodes its plan would use is held back (see `_hold_back`).

Releasing into room that a pending pod could take first would leave a gang partly bound: the
default scheduler places already-ungated pods (ordinary ones, or another scheduler's) as
soon as it can, and a pinned gang pod whose room was taken stays Pending. So a plan may not
use a node where some such pod fits now but would not fit once the gang is there (see
`_place_uncontested`); the gang goes elsewhere, or waits, naming the pods it waits for.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ganggate.core.cluster import ClusterState, PodInfo
from ganggate.core.gangs import Gang, GangKey
from ganggate.core.nodematch import (
    matches_node_selection,
    node_is_cordoned,
    node_is_ready,
    node_rejects,
    required_node_terms,
)
from ganggate.core.resources import CPU, GPU, MEMORY, Resources, add, add_into, fits, format_amount

POLICIES = ("plan", "count")


def gpus(resources: Mapping[str, int]) -> int:
    """GPU amount (milli) of a request or a free-capacity map: every resource named */gpu."""
    total = 0
    for name, amount in resources.items():
        if name == GPU or name.endswith("/gpu"):
            total += amount
    return total


@dataclass
class Decision:
    """Release these pods now; placement maps pod key -> planned node (None: unpinned)."""

    gang_key: GangKey
    placement: dict[str, str | None]
    reason: str
    roll_forward: bool = False


@dataclass
class Waiting:
    """A gang that stays gated this round, and the Event that says why."""

    gang_key: GangKey
    event_reason: str  # "GangWaiting" | "GangUnschedulable" | "GangConflict"
    message: str


@dataclass
class Unfit:
    """Why a gang cannot be placed now."""

    message: str


# ---- working capacity ------------------------------------------------------------------


class _Index:
    """Nodes eligible for one pod constraint, bucketed by free GPU; each bucket sorted by
    (free cpu, free memory, name), so best fit is a bisect and a short scan."""

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.levels: list[int] = []
        self.buckets: dict[int, list[tuple[int, int, str]]] = {}

    def add(self, name: str, free: Mapping[str, int]) -> None:
        level = gpus(free)
        bucket = self.buckets.get(level)
        if bucket is None:
            bucket = self.buckets[level] = []
            bisect.insort(self.levels, level)
        bisect.insort(bucket, (free.get(CPU, 0), free.get(MEMORY, 0), name))

    def remove(self, name: str, free: Mapping[str, int]) -> None:
        level = gpus(free)
        bucket = self.buckets[level]
        entry = (free.get(CPU, 0), free.get(MEMORY, 0), name)
        del bucket[bisect.bisect_left(bucket, entry)]
        if not bucket:
            del self.buckets[level]
            del self.levels[bisect.bisect_left(self.levels, level)]

    def room_for(self, gpu: int) -> int:
        """Upper bound of the pods of `gpu` GPUs that fit: sum of floor(free / gpu)."""
        start = bisect.bisect_left(self.levels, gpu)
        return sum(len(self.buckets[lv]) * (lv // gpu) for lv in self.levels[start:])


# A label key no real label can have, standing for matchFields' metadata.name.
_NAME_FIELD = "\x00metadata.name"
# nodematch's wording for a selector/affinity mismatch, asked of it rather than copied.
_SELECTOR_REASON = node_rejects(
    {"spec": {"nodeSelector": {"k": "v"}}},
    {"metadata": {"name": "", "labels": {}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
)


def _selection_keys(pod: Mapping) -> tuple[tuple[str, ...], bool]:
    """The node labels (and _NAME_FIELD) a pod's node selection reads; and whether it has
    required node-affinity terms (else it is a plain nodeSelector)."""
    spec = pod.get("spec") or {}
    keys = set((spec.get("nodeSelector") or {}).keys())
    terms = required_node_terms(pod)
    for term in terms or []:
        keys.update(e.get("key") for e in term.get("matchExpressions") or [] if isinstance(e.get("key"), str))
        if term.get("matchFields"):
            keys.add(_NAME_FIELD)
    return tuple(sorted(keys)), terms is not None


class _Projection:
    """Nodes grouped by their values of a few label keys: a selector reading only those keys
    treats every node of a group alike, so it is evaluated once per group, not per node."""

    def __init__(self, keys: tuple[str, ...], nodes: Mapping[str, Mapping], class_of: Mapping[str, int]) -> None:
        self.keys = keys
        self.group_of_value: dict[tuple, int] = {}
        self.members: list[list[str]] = []
        self.representatives: list[dict] = []
        self.joint: Counter[tuple[int, int]] = Counter()  # (class, group) -> nodes
        for name, raw in nodes.items():
            labels = (raw.get("metadata") or {}).get("labels") or {}
            value = tuple(name if k == _NAME_FIELD else labels.get(k) for k in keys)
            group = self.group_of_value.get(value)
            if group is None:
                group = self.group_of_value[value] = len(self.members)
                self.members.append([])
                self.representatives.append(
                    {
                        "metadata": {
                            "name": name if _NAME_FIELD in keys else "",
                            "labels": {k: v for k, v in zip(keys, value) if k != _NAME_FIELD and v is not None},
                        }
                    }
                )
            self.members[group].append(name)
            self.joint[(class_of[name], group)] += 1


class Capacity:
    """The free capacity of the nodes as one decision round uses it up.

    free[node] starts as allocatable - used - promised and shrinks with each decision of the
    round. Which nodes a pod may use (nodematch.node_rejects) is worked out per distinct pod
    constraint, not per pod, and not per node either: nodes are grouped into classes by what
    filters apart from labels (readiness, cordon, taints) and, per set of label keys a
    selector reads, by their values of those keys. Constraints that allow the same nodes
    share one index, so a decision costs the same whatever the number of constraints.
    """

    def __init__(self, nodes: Mapping[str, Mapping], free: Mapping[str, Resources]) -> None:
        self.nodes = nodes
        self.free: dict[str, Resources] = {name: dict(free.get(name, {})) for name in nodes}
        self._node_indexes: dict[str, list[_Index]] = {name: [] for name in nodes}
        self._used_gpus: dict[str, int] = {}
        self._by_constraint: dict[str, tuple[_Index, Counter[str]]] = {}
        self._by_signature: dict[tuple, _Index] = {}
        self._projections: dict[tuple[str, ...], _Projection] = {}
        # Node classes: (ready, cordoned, taints) -> a stand-in node without labels.
        self._class_of: dict[str, int] = {}
        self._classes: list[dict] = []
        seen: dict[tuple, int] = {}
        for name, raw in nodes.items():
            spec = raw.get("spec") or {}
            taints = spec.get("taints") or []
            key = (node_is_ready(raw), node_is_cordoned(raw), json.dumps(taints, sort_keys=True))
            cls_id = seen.get(key)
            if cls_id is None:
                cls_id = seen[key] = len(self._classes)
                self._classes.append(
                    {
                        "metadata": {"name": "", "labels": {}},
                        "spec": {"unschedulable": key[1], "taints": taints},
                        "status": {"conditions": [{"type": "Ready", "status": "True" if key[0] else "False"}]},
                    }
                )
            self._class_of[name] = cls_id

    @classmethod
    def from_state(cls, state: ClusterState) -> "Capacity":
        nodes = {name: info.raw for name, info in state.nodes.items()}
        return cls(nodes, {name: state.free(name) for name in nodes})

    def index(self, pod: PodInfo) -> _Index:
        """The index of the nodes the pod may use."""
        return self._eligibility(pod)[0]

    def rejected(self, pod: PodInfo) -> Counter[str]:
        """Why the other nodes may not be used: reason -> number of nodes."""
        return self._eligibility(pod)[1]

    def _eligibility(self, pod: PodInfo) -> tuple[_Index, Counter[str]]:
        found = self._by_constraint.get(pod.constraint_key)
        if found is not None:
            return found
        keys, has_terms = _selection_keys(pod.raw)
        projection = self._projections.get(keys)
        if projection is None:
            projection = self._projections[keys] = _Projection(keys, self.nodes, self._class_of)
        if has_terms:
            groups = frozenset(
                g for g, rep in enumerate(projection.representatives) if matches_node_selection(pod.raw, rep)
            )
        else:  # a plain nodeSelector: exactly the group with those values
            selector = (pod.raw.get("spec") or {}).get("nodeSelector") or {}
            group = projection.group_of_value.get(tuple(selector.get(k) for k in keys))
            groups = frozenset() if group is None else frozenset([group])
        # Readiness, cordon and taints, judged by node_rejects on each class's stand-in.
        without_selection = {"spec": {"tolerations": (pod.raw.get("spec") or {}).get("tolerations") or []}}
        class_reasons = [node_rejects(without_selection, stand_in) for stand_in in self._classes]
        classes = frozenset(c for c, reason in enumerate(class_reasons) if reason is None)
        rejected: Counter[str] = Counter()
        for (cls_id, group), count in projection.joint.items():
            if class_reasons[cls_id] is not None:
                rejected[class_reasons[cls_id]] += count
            elif group not in groups:
                rejected[_SELECTOR_REASON] += count
        signature = (keys, groups, classes)
        index = self._by_signature.get(signature)
        if index is None:
            index = self._by_signature[signature] = _Index()
            for group in groups:
                for name in projection.members[group]:
                    if self._class_of[name] in classes:
                        index.members.add(name)
                        index.add(name, self.free[name])
                        self._node_indexes[name].append(index)
        found = self._by_constraint[pod.constraint_key] = (index, rejected)
        return found

    def used_gpus(self, node: str, state: ClusterState) -> int:
        """GPUs the node's bound pods use (cached for the round)."""
        value = self._used_gpus.get(node)
        if value is None:
            info = state.nodes.get(node)
            value = self._used_gpus[node] = gpus(info.used) if info is not None else 0
        return value

    def take(self, node: str, request: Mapping[str, int], sign: int = 1) -> None:
        """free[node] -= request (sign=-1 gives it back). May go negative (held back)."""
        indexes = self._node_indexes[node]
        for index in indexes:
            index.remove(node, self.free[node])
        add_into(self.free[node], request, -sign)
        for index in indexes:
            index.add(node, self.free[node])

    def _best_among(
        self, index: _Index, request: Mapping[str, int], names: Iterable[str]
    ) -> tuple[int, int, int, str] | None:
        """Best fit among the given nodes (the gang's own): the (free GPU, CPU, memory, name)
        key of the node with the least left where the pod fits, or None."""
        best: tuple[int, int, int, str] | None = None
        for name in names:
            free = self.free[name]
            if name in index.members and fits(request, free):
                key = (gpus(free), free.get(CPU, 0), free.get(MEMORY, 0), name)
                if best is None or key < best:
                    best = key
        return best

    def best_node(self, pod: PodInfo, gang_nodes: Iterable[str] = ()) -> str | None:
        """Best fit for the pod: least GPU left, then a node the gang uses, then least CPU
        and memory left; None when no eligible node has room."""
        index = self.index(pod)
        request = pod.request
        best_gang = self._best_among(index, request, gang_nodes)
        gpu = gpus(request)
        start = bisect.bisect_left(index.levels, gpu) if gpu > 0 else 0
        probe = (request.get(CPU, 0),)
        for level in index.levels[start:]:
            if best_gang is not None and best_gang[0] <= level:
                return best_gang[3]
            bucket = index.buckets[level]
            for i in range(bisect.bisect_left(bucket, probe), len(bucket)):
                name = bucket[i][2]
                if fits(request, self.free[name]):
                    return name
        return best_gang[3] if best_gang is not None else None

    def filling_node(self, pod: PodInfo, gang_nodes: Iterable[str] = ()) -> str | None:
        """The fallback strategy: keep filling the gang's nodes (best fit among them), else
        open the emptiest node with room (most free GPU, then most free CPU)."""
        index = self.index(pod)
        request = pod.request
        best_gang = self._best_among(index, request, gang_nodes)
        if best_gang is not None:
            return best_gang[3]
        gpu = gpus(request)
        stop = bisect.bisect_left(index.levels, gpu) if gpu > 0 else 0
        probe = (request.get(CPU, 0),)
        for level in reversed(index.levels[stop:]):
            bucket = index.buckets[level]
            for i in range(len(bucket) - 1, bisect.bisect_left(bucket, probe) - 1, -1):
                name = bucket[i][2]
                if fits(request, self.free[name]):
                    return name
        return None


# ---- one gang --------------------------------------------------------------------------


def _largest_first(pods: Sequence[PodInfo]) -> list[PodInfo]:
    return sorted(
        pods,
        key=lambda p: (-gpus(p.request), -p.request.get(CPU, 0), -p.request.get(MEMORY, 0), p.key),
    )


def _cpu_first(pods: Sequence[PodInfo]) -> list[PodInfo]:
    return sorted(
        pods,
        key=lambda p: (-p.request.get(CPU, 0), -p.request.get(MEMORY, 0), -gpus(p.request), p.key),
    )


def plan_gang(
    pods: Sequence[PodInfo], candidates: Capacity, min_count: int | None = None
) -> dict[str, str] | Unfit:
    """Place at least `min_count` (default: all) of the pods, as many as fit.

    On success the placement's requests are taken from `candidates` (so the next gang of
    the round sees what is left) and pod key -> node is returned; otherwise nothing is taken
    and Unfit says why.
    """
    if not pods:
        return {}
    need = len(pods) if min_count is None else max(0, min(min_count, len(pods)))
    pruned = _prune(pods, candidates, need)
    if pruned is not None:
        return pruned
    largest = _largest_first(pods)
    tries = [(largest, candidates.best_node)]
    if len({tuple(sorted(p.request.items())) for p in pods}) > 1:
        # Gangs of several shapes get two more tries when best fit fails: CPU-heaviest
        # first, and filling nodes one at a time from the emptiest.
        tries += [(_cpu_first(pods), candidates.best_node), (largest, candidates.filling_node)]
    message = ""
    for order, choose in tries:
        placement, taken, failed = _greedy(order, candidates, need, choose)
        if len(placement) >= need:
            return placement
        if not message:  # said against what is left once the pods that fit are placed
            message = _unfit_message(failed, pods, candidates, len(placement), need)
        for node, request in reversed(taken):
            candidates.take(node, request, -1)
    return Unfit(message)


def _greedy(
    order: list[PodInfo], capacity: Capacity, need: int, choose: Callable[..., str | None]
) -> tuple[dict[str, str], list[tuple[str, Resources]], PodInfo | None]:
    placement: dict[str, str] = {}
    taken: list[tuple[str, Resources]] = []
    gang_nodes: dict[str, None] = {}
    first_failed: PodInfo | None = None
    misses = 0
    for pod in order:
        node = choose(pod, gang_nodes)
        if node is None:
            misses += 1
            first_failed = first_failed or pod
            if len(order) - misses < need:
                break
            continue
        capacity.take(node, pod.request)
        taken.append((node, pod.request))
        placement[pod.key] = node
        gang_nodes[node] = None
    return placement, taken, first_failed


def _prune(pods: Sequence[PodInfo], capacity: Capacity, need: int) -> Unfit | None:
    """A quick no, from the GPU buckets alone, for gangs that plainly cannot fit."""
    gpu_pods = [p for p in pods if gpus(p.request) > 0]
    if not gpu_pods or len({p.constraint_key for p in gpu_pods}) != 1:
        return None
    index = capacity.index(gpu_pods[0])
    smallest = min(gpus(p.request) for p in gpu_pods)
    largest = max(gpu_pods, key=lambda p: gpus(p.request))
    top = index.levels[-1] if index.levels else 0
    if not index.members:
        return Unfit(_no_nodes_message(capacity.rejected(gpu_pods[0]), len(capacity.nodes)))
    if gpus(largest.request) > top and len(pods) - 1 < need:
        return Unfit(_gpu_message(gpus(largest.request), top) + _scope(index, capacity.rejected(gpu_pods[0])))
    needed_gpu_pods = need - (len(pods) - len(gpu_pods))
    room = index.room_for(smallest)
    if needed_gpu_pods > room:
        if room == 0:
            return Unfit(_gpu_message(smallest, top) + _scope(index, capacity.rejected(gpu_pods[0])))
        return Unfit(
            f"needs {needed_gpu_pods} pods of {format_amount(GPU, smallest)} GPU; "
            f"the free GPUs have room for {room}" + _scope(index, capacity.rejected(gpu_pods[0]))
        )
    return None


def _scope(index: _Index, rejected: Counter[str]) -> str:
    """Which nodes a shortage is about, when the pods may not use them all."""
    if not rejected:
        return ""
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))
    return f" (on the {len(index.members)} node(s) its pods may use; {reasons})"


def _gpu_message(gpu: int, top: int) -> str:
    return (
        f"needs {format_amount(GPU, gpu)} {GPU} on one node; "
        f"the largest free is {format_amount(GPU, max(top, 0))}"
    )


def _no_nodes_message(rejected: Counter[str], total: int) -> str:
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))
    return f"0/{total} nodes are available: {reasons or 'no nodes'}"


def _unfit_message(
    failed: PodInfo | None, pods: Sequence[PodInfo], capacity: Capacity, placed: int, need: int
) -> str:
    index = capacity.index(failed or pods[0])
    text = _unfit_text(failed, pods, capacity, placed, need)
    return text if text.startswith("0/") else text + _scope(index, capacity.rejected(failed or pods[0]))


def _unfit_text(
    failed: PodInfo | None, pods: Sequence[PodInfo], capacity: Capacity, placed: int, need: int
) -> str:
    if failed is None:
        return f"only {placed} of {len(pods)} pods can be placed at once; {need} needed"
    index = capacity.index(failed)
    if not index.members:
        return _no_nodes_message(capacity.rejected(failed), len(capacity.nodes))
    request = failed.request
    gpu = gpus(request)
    top = index.levels[-1] if index.levels else 0
    if gpu > top:
        return _gpu_message(gpu, top)
    # Among the nodes with enough GPU, the largest free of each other resource.
    start = bisect.bisect_left(index.levels, gpu) if gpu > 0 else 0
    largest: Resources = {}
    for level in index.levels[start:]:
        for _, _, name in index.buckets[level]:
            for res, amount in capacity.free[name].items():
                if amount > largest.get(res, 0):
                    largest[res] = amount
    short = [res for res, amount in sorted(request.items()) if amount > largest.get(res, 0)]
    if short:
        res = short[0]
        where = f" among nodes with {format_amount(GPU, gpu)} free GPU" if gpu else ""
        return (
            f"needs {format_amount(res, request[res])} {res} on one node; "
            f"the largest free{where} is {format_amount(res, max(largest.get(res, 0), 0))}"
        )
    if placed:
        return f"only {placed} of {len(pods)} pods can be placed at once; {need} needed"
    shown = ", ".join(f"{format_amount(r, a)} {r}" for r, a in sorted(request.items()) if r != "pods")
    return f"needs {shown} on one node; no node has all of it free"


# ---- the baselines ---------------------------------------------------------------------


def count_only_fits(requests: Sequence[Mapping[str, int]], free: Mapping[str, Mapping[str, int]]) -> bool:
    """The seed's check: sum over nodes of floor(free GPUs / GPUs per pod) >= pods.

    Blind to CPU, memory, selectors and taints; kept as a baseline (policy="count")."""
    per_pod = max((gpus(r) for r in requests), default=0)
    if per_pod <= 0:
        return True
    room = sum(max(gpus(f), 0) // per_pod for f in free.values())
    return room >= len(requests)


def totals_only_fits(requests: Sequence[Mapping[str, int]], free: Mapping[str, Mapping[str, int]]) -> bool:
    """Sum of free per resource >= sum of requests: blind to pods being indivisible."""
    need: Resources = {}
    for request in requests:
        add_into(need, request)
    have: Resources = {}
    for f in free.values():
        add_into(have, {k: v for k, v in f.items() if v > 0})
    return fits(need, have)


# ---- one round -------------------------------------------------------------------------


def _order(gangs: Iterable[Gang]) -> list[Gang]:
    return sorted(gangs, key=lambda g: (-g.priority, g.created, g.key))


def _candidates(gang: Gang) -> list[PodInfo]:
    """The gated pods a decision for the gang may release (at most pod_num when waiting)."""
    gated = gang.gated_pods()
    if gang.state == "waiting" and gang.spec is not None:
        return gated[: gang.spec.pod_num]
    return gated


def decide(
    state: ClusterState, now: float, *, policy: str = "plan", starvation_seconds: float = 300.0
) -> tuple[list[Decision], list[Waiting]]:
    """One round: which gangs to release now and where, and why the others wait."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    waiting: list[Waiting] = []
    ready: list[Gang] = []
    for gang in state.gangs.values():
        if gang.state == "conflict":
            waiting.append(Waiting(gang.key, "GangConflict", gang.conflict or "pods disagree"))
        elif gang.state == "incomplete":
            waiting.append(Waiting(gang.key, "GangWaiting", gang.waiting_message()))
        elif gang.state in ("waiting", "partial", "started"):
            ready.append(gang)
    rolls = _order(g for g in ready if g.state == "partial")
    rest = _order(g for g in ready if g.state != "partial")
    if policy == "count":
        decisions, unfit = _decide_count(state, rolls + rest)
        return decisions, waiting + unfit
    capacity = Capacity.from_state(state)
    rivals = _rivals(state)
    decisions: list[Decision] = []
    for gang in rolls + rest:
        pods = _candidates(gang)
        if not pods or any(p.key in state.promises for p in pods):
            continue  # nothing to release, or a release is in flight: its promises hold
        assert gang.spec is not None
        if gang.state == "partial":
            need = min(gang.still_needed, len(pods))
        elif gang.state == "started":
            need = 1
        else:
            need = min(gang.spec.min_available, len(pods))
        result, contested = _place_uncontested(pods, capacity, need, rivals)
        if not isinstance(result, Unfit):
            decisions.append(Decision(gang.key, dict(result), _reason(gang, result), gang.state == "partial"))
            continue
        if contested:
            if gang.state != "started":  # a started gang's extras wait quietly
                waiting.append(Waiting(gang.key, "GangWaiting", _contested_message(contested)))
            continue
        if gang.state == "started":
            continue  # extras wait quietly until one fits
        message = result.message
        if gang.state == "partial":
            message = f"finishing decision {', '.join(gang.decision_ids()) or '?'}: {message}"
        waited = now - (gang.complete_since if gang.complete_since is not None else now)
        if gang.state == "partial" or waited > starvation_seconds:
            held = _hold_back(pods, capacity, need, state)
            if held > 0:
                message += f"; waited {waited:.0f}s, capacity held back on {held} node(s)"
            elif held < 0:
                message += "; it would not fit even if the running pods on the nodes it may use finished"
        waiting.append(Waiting(gang.key, "GangUnschedulable", message))
    return decisions, waiting


# ---- the race between ungating and binding -------------------------------------------

# How many times a plan is redone around contested nodes before the gang waits instead.
_CONTEST_RETRIES = 3
Rivals = list[tuple[PodInfo, list[str]]]


def _rivals(state: ClusterState) -> Rivals:
    """Pods a scheduler may bind at any moment that hold no room of their own, grouped by
    shape (constraint and request): one representative and the keys of all of them."""
    groups: dict[tuple, tuple[PodInfo, list[str]]] = {}
    for key, pod in state.pending.items():
        promise = state.promises.get(key)
        if promise is not None and promise.node is not None:
            continue  # a pinned, released pod: its room is already promised
        shape = (pod.constraint_key, tuple(sorted(pod.request.items())))
        group = groups.setdefault(shape, (pod, []))
        group[1].append(key)
    return list(groups.values())


def _contested(
    placement: Mapping[str, str], pods: Mapping[str, PodInfo], capacity: Capacity, rivals: Rivals
) -> dict[str, list[str]]:
    """Nodes of a placement (already taken from `capacity`) where a rival fits now but
    would not once the gang is there, with the rivals' keys."""
    demand: dict[str, Resources] = {}
    for key, node in placement.items():
        add_into(demand.setdefault(node, {}), pods[key].request)
    contested: dict[str, list[str]] = {}
    for node, amount in demand.items():
        after = capacity.free[node]
        before = add(after, amount)
        for rival, keys in rivals:
            if node in capacity.index(rival).members and fits(rival.request, before) and not fits(rival.request, after):
                contested.setdefault(node, []).extend(keys)
    return contested


def _place_uncontested(
    pods: Sequence[PodInfo], capacity: Capacity, need: int, rivals: Rivals
) -> tuple[dict[str, str] | Unfit, dict[str, list[str]]]:
    """plan_gang, redone with contested nodes closed to the gang; returns the placement (or
    Unfit) and every contested node met on the way, with the pods that contest it."""
    by_key = {p.key: p for p in pods}
    closed: dict[str, Resources] = {}
    seen: dict[str, list[str]] = {}
    try:
        for _ in range(_CONTEST_RETRIES + 1):
            result = plan_gang(pods, capacity, need)
            if isinstance(result, Unfit) or not rivals:
                return result, seen
            contested = _contested(result, by_key, capacity, rivals)
            if not contested:
                return result, seen
            seen.update(contested)
            for key, node in result.items():
                capacity.take(node, by_key[key].request, -1)
            for node in contested:
                closed[node] = {k: v for k, v in capacity.free[node].items() if v > 0}
                capacity.take(node, closed[node])
        return Unfit(_contested_message(seen)), seen
    finally:
        for node, amount in closed.items():
            capacity.take(node, amount, -1)


def _contested_message(contested: Mapping[str, list[str]]) -> str:
    pods = sorted({key for keys in contested.values() for key in keys})
    shown = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
    nodes = ", ".join(sorted(contested)[:3]) + (" ..." if len(contested) > 3 else "")
    return (
        f"waiting for {len(pods)} pending pod(s) ({shown}) that the scheduler may place in the "
        f"room this gang needs on node(s) {nodes}; releasing now could leave the gang partly bound"
    )


def _reason(gang: Gang, placement: Mapping[str, str]) -> str:
    nodes = len(set(placement.values()))
    if gang.state == "partial":
        ids = ", ".join(gang.decision_ids()) or "?"
        return f"finishing decision {ids}: {len(placement)} pod(s) on {nodes} node(s)"
    if gang.state == "started":
        return f"{len(placement)} more pod(s) of a started gang on {nodes} node(s)"
    return f"{len(placement)} pod(s) on {nodes} node(s)"


def _hold_back(pods: Sequence[PodInfo], capacity: Capacity, need: int, state: ClusterState) -> int:
    """Hold capacity for a starving gang; returns the number of nodes held (0: none held,
    -1: none, because the gang would not fit even on emptied nodes).

    Documented simplification: plan the gang on the capacity the nodes would have if their
    running pods finished (free + used), filling the nodes with the most free GPU now first
    (they need the fewest pods to finish), and take the gang's whole request on those nodes
    from this round's capacity. Later gangs may only use the rest; free capacity on the
    chosen nodes goes negative until enough running pods there finish. Nothing is held if
    the gang would not fit even then.
    """
    order = _largest_first(pods)
    index = capacity.index(order[0])
    if any(p.constraint_key != order[0].constraint_key for p in order):
        return 0  # several constraints: keep it simple, no hold
    plan: list[tuple[str, PodInfo]] = []
    remaining = order
    # Visit nodes by most free GPU first, straight from the index (no pass over all nodes
    # unless the gang would not fit even then).
    smallest = min(gpus(p.request) for p in order)
    for level in reversed(index.levels):
        for _, _, name in list(index.buckets.get(level, ())):
            if len(plan) >= need or not remaining:
                break
            if level + capacity.used_gpus(name, state) < smallest:
                continue  # not even the smallest pod would fit here once it empties
            room = dict(capacity.free[name])
            add_into(room, state.nodes[name].used)
            left = []
            for pod in remaining:
                if len(plan) < need and fits(pod.request, room):
                    add_into(room, pod.request, -1)
                    plan.append((name, pod))
                else:
                    left.append(pod)
            remaining = left
        if len(plan) >= need or not remaining:
            break
    if len(plan) < need:
        return -1
    for name, pod in plan:
        capacity.take(name, pod.request)
    return len({name for name, _ in plan})


def _decide_count(state: ClusterState, gangs: list[Gang]) -> tuple[list[Decision], list[Waiting]]:
    """policy="count": the seed's check on Ready, uncordoned nodes, with no promises and no
    pinning. Within the round the GPUs counted for a released gang are taken (first fit)."""
    free: dict[str, Resources] = {}
    for name, node in state.nodes.items():
        if node_is_ready(node.raw) and not node_is_cordoned(node.raw):
            room = dict(node.allocatable)
            add_into(room, node.used, -1)
            free[name] = {GPU: gpus(room)}
    decisions: list[Decision] = []
    waiting: list[Waiting] = []
    for gang in gangs:
        pods = _candidates(gang)
        if not pods or any(p.key in state.promises for p in pods):
            continue
        requests = [p.request for p in pods]
        if not count_only_fits(requests, free):
            if gang.state != "started":
                per_pod = max(gpus(r) for r in requests)
                room = sum(max(f[GPU], 0) // per_pod for f in free.values()) if per_pod else 0
                waiting.append(
                    Waiting(
                        gang.key,
                        "GangUnschedulable",
                        f"count check: {len(pods)} pods of {format_amount(GPU, per_pod)} GPU, "
                        f"free GPUs have room for {room}",
                    )
                )
            continue
        for request in sorted(requests, key=lambda r: -gpus(r)):
            want = gpus(request)
            if want <= 0:
                continue
            for f in free.values():
                if f[GPU] >= want:
                    f[GPU] -= want
                    break
        decisions.append(
            Decision(
                gang.key,
                {p.key: None for p in pods},
                f"count check: {len(pods)} pod(s)",
                gang.state == "partial",
            )
        )
    return decisions, waiting
