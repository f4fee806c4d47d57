"""The free capacity of the nodes as one decision round uses it up, indexed for best fit.

Fitting is per node and per resource, as the scheduler's NodeResourcesFit filter does it
(pkg/scheduler/framework/plugins/noderesources/fit.go); which nodes a pod may use at all
follows `ganggate.core.fit.nodematch.node_rejects`, worked out once per distinct pod constraint
(see `Capacity`). The two node choices the packer uses live here, next to the index they
read: `best_node` (best fit) and `filling_node` (fill the gang's nodes, else the emptiest).
The index itself, the nodes bucketed by free GPU, is nodeindex.NodeIndex.

Why this module is long: eligibility per constraint, the round's taking and rewinding of room,
and the node choices that read them share one per-round state; split, each part would reach
into the others' internals.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from itertools import islice
from typing import Any

from ganggate.core.fit.gpushare import CardPolicy, NodeCards, WholeGpuPolicy, Workload, best_fit
from ganggate.core.fit.nodematch import (
    matches_node_selection,
    node_rejects,
    required_node_terms,
)
from ganggate.core.fit.resources import CPU, GPU, MEMORY, Resources, copies_fitting, fits, gpus
from ganggate.core.placement.nodeindex import NodeIndex
from ganggate.core.state.cluster import ClusterState, node_filter_key
from ganggate.core.state.letgo import let_go_of_memo
from ganggate.core.state.pods import PodInfo

# A label key no real label can have, standing for matchFields' metadata.name.
_NAME_FIELD = "\x00metadata.name"
def _selector_reason() -> str:
    """nodematch's wording for a selector/affinity mismatch, asked of it rather than copied."""
    reason = node_rejects(
        {"spec": {"nodeSelector": {"k": "v"}}},
        {"metadata": {"name": "", "labels": {}}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
    )
    assert reason is not None, "a node without the selected label is rejected"
    return reason


_SELECTOR_REASON = _selector_reason()


def _selection_keys(pod: Mapping[str, Any]) -> tuple[tuple[str, ...], bool]:
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

    def __init__(self, keys: tuple[str, ...], nodes: Mapping[str, Mapping[str, Any]], class_of: Mapping[str, int]) -> None:
        self.keys = keys
        self.group_of_value: dict[tuple[Any, ...], int] = {}
        self.members: list[list[str]] = []
        self.representatives: list[dict[str, Any]] = []
        self.joint: Counter[tuple[int, int]] = Counter()  # (class, group) -> nodes
        if not keys and nodes:  # no label read (no selector at all, the usual pod): one group
            self.group_of_value[()] = 0
            self.members.append(list(nodes))
            self.representatives.append({"metadata": {"name": "", "labels": {}}})
            self.joint.update((class_of[name], 0) for name in nodes)
            return
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
                            "labels": {k: v for k, v in zip(keys, value, strict=True) if k != _NAME_FIELD and v is not None},
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

    def __init__(
        self, nodes: Mapping[str, Mapping[str, Any]], free: Mapping[str, Resources],
        filter_keys: Mapping[str, tuple[Any, ...]] | None = None,
        *, topology_levels: tuple[str, ...] = (), topology_placed: Mapping[tuple[str, str], frozenset[str]] | None = None,
        cards: Mapping[str, NodeCards] | None = None, card_policy: CardPolicy | None = None,
        whole_gpu_policy: WholeGpuPolicy | None = None, workload: Workload = (),
    ) -> None:
        """`topology_levels`: label keys, widest first (core.topology); `topology_placed`: gang ->
        the nodes of its released members. `cards`: the GPU cards of the nodes that have them,
        used up by the round; `card_policy` (default best fit) picks a sharing pod's card,
        `whole_gpu_policy` (None: plain best fit) a whole-GPU pod's node among nodes with cards,
        both weighing `workload`. What a round is asked to do is fixed when it is built."""
        self.nodes = nodes
        self.free: dict[str, Resources] = {name: dict(free.get(name, {})) for name in nodes}
        self.level: dict[str, int] = {name: gpus(f) for name, f in self.free.items()}  # gpus(free[name])
        # Node -> the indexes it is in; nodes in the same ones share one tuple (see _join).
        self._node_indexes: dict[str, tuple[NodeIndex, ...]] = dict.fromkeys(nodes, ())
        self._used_gpus: dict[str, int] = {}
        self._by_constraint: dict[str, tuple[NodeIndex, Counter[str]]] = {}
        self._by_signature: dict[tuple[Any, ...], NodeIndex] = {}
        self._projections: dict[tuple[str, ...], _Projection] = {}
        self._topology_levels = tuple(topology_levels)
        self.topology_cache: dict[str, dict[str, list[str]]] = {}
        self.topology_free: dict[str, object] = {}  # the round's core.domains caches (FreeGpus, ...)
        self._topology_placed: Mapping[tuple[str, str], frozenset[str]] = topology_placed or {}
        # While set (topology.place), index() is of these nodes alone: (name, nodes).
        self.scope: tuple[str, Collection[str]] | None = None
        self._scoped: dict[tuple[str, str], NodeIndex] = {}
        # (node, its free GPU after) of every take, in order: topology catches up from it.
        self.changed: list[tuple[str, int]] = []
        # While set (core.incremental), each node's free before this round first took from it.
        self.before: dict[str, Resources] | None = None
        # What a policy works out once per round and brings up to date from `changed` (ordering's
        # holds): emptied when `changed` no longer tells every change (start_round, rewind, set_free).
        self.memo: dict[str, object] = {}
        # GPU sharing (core.gpushare): the nodes' cards as the round uses them, and the
        # (node, card, amount) chosen per sharing pod.
        self.cards: dict[str, NodeCards] = dict(cards or {})
        self._card_policy: CardPolicy = best_fit if card_policy is None else card_policy
        self._whole_gpu_policy = whole_gpu_policy
        self._workload: Workload = workload
        self.card_choices: dict[str, tuple[str, int, int]] = {}
        # Node classes: (ready, cordoned, taints) -> a stand-in node without labels.
        self._class_of: dict[str, int] = {}
        self._classes: list[dict[str, Any]] = []
        seen: dict[tuple[Any, ...], int] = {}
        for name, raw in nodes.items():
            key = filter_keys[name] if filter_keys is not None else node_filter_key(raw)
            cls_id = seen.get(key)
            if cls_id is None:
                cls_id = seen[key] = len(self._classes)
                self._classes.append(
                    {
                        "metadata": {"name": "", "labels": {}},
                        "spec": {"unschedulable": key[1], "taints": (raw.get("spec") or {}).get("taints") or []},
                        "status": {"conditions": [{"type": "Ready", "status": "True" if key[0] else "False"}]},
                    }
                )
            self._class_of[name] = cls_id

    @classmethod
    def from_state(
        cls, state: ClusterState, *, topology_placed: Mapping[tuple[str, str], frozenset[str]] | None = None,
        cards: Mapping[str, NodeCards] | None = None, card_policy: CardPolicy | None = None,
        whole_gpu_policy: WholeGpuPolicy | None = None, workload: Workload = (),
    ) -> Capacity:
        """The state's free capacity, with its topology levels, and its GPU cards
        (`cards_of(state)` unless given); the other arguments as the constructor's."""
        nodes = {name: info.view for name, info in state.nodes.items()}
        keys = {name: info.filter_key for name, info in state.nodes.items()}
        return cls(nodes, {name: state.free(name) for name in nodes}, keys,
                   topology_levels=state.topology_levels, topology_placed=topology_placed,
                   cards=cls.cards_of(state) if cards is None else cards, card_policy=card_policy,
                   whole_gpu_policy=whole_gpu_policy, workload=workload)

    @staticmethod
    def cards_of(state: ClusterState) -> dict[str, NodeCards]:
        """The GPU cards of the state's nodes that have them, as a round starts (copies)."""
        out = {}
        for name, info in state.nodes.items():
            if info.card_totals[1] and (cards := state.cards(name)) is not None:
                out[name] = cards
        return out

    # What a round is asked to do, fixed when it is built (read-only).
    topology_levels = property(lambda self: self._topology_levels, doc="Topology label keys, widest first.")
    topology_placed = property(lambda self: self._topology_placed, doc="Gang -> its released members' nodes.")
    card_policy = property(lambda self: self._card_policy, doc="The card a sharing pod gets (core.gpushare).")
    whole_gpu_policy = property(lambda self: self._whole_gpu_policy, doc="Whole-GPU pods on nodes with cards.")
    workload = property(lambda self: self._workload, doc="The workload the card policies weigh.")

    def index(self, pod: PodInfo) -> NodeIndex:
        """The index of the nodes the pod may use (within the scope, when one is set)."""
        if self.scope is None:
            return self._eligibility(pod)[0]
        key = (pod.constraint_key, self.scope[0])
        found = self._scoped.get(key)
        if found is None:
            parent = self._eligibility(pod)[0]
            found = self._scoped[key] = NodeIndex()
            names = [name for name in self.scope[1] if name in parent.members]
            found.fill(names, self.free, self.level)
            self._join(names, found)
        return found

    def drop_scope(self, scope: str) -> None:
        """Forget the indexes made for the scope of this name (topology's one-off unions of
        domains): its nodes stop being re-filed in them at every later take of the round."""
        for key in [key for key in self._scoped if key[1] == scope]:
            index = self._scoped.pop(key)
            node_indexes = self._node_indexes
            left: dict[tuple[NodeIndex, ...], tuple[NodeIndex, ...]] = {}
            for name in index.members:
                old = node_indexes[name]
                new = left.get(old)
                if new is None:
                    new = left[old] = tuple(i for i in old if i is not index)
                node_indexes[name] = new

    def _join(self, names: Iterable[str], index: NodeIndex) -> None:
        """File these nodes as members of `index` too. Nodes that were in the same indexes
        share one tuple of them: a round keeps no container per node for it."""
        node_indexes = self._node_indexes
        joined: dict[tuple[NodeIndex, ...], tuple[NodeIndex, ...]] = {}
        for name in names:
            old = node_indexes[name]
            new = joined.get(old)
            if new is None:
                new = joined[old] = (*old, index)
            node_indexes[name] = new

    def rejected(self, pod: PodInfo) -> Counter[str]:
        """Why the other nodes may not be used: reason -> number of nodes."""
        return self._eligibility(pod)[1]

    def _eligibility(self, pod: PodInfo) -> tuple[NodeIndex, Counter[str]]:
        found = self._by_constraint.get(pod.constraint_key)
        if found is not None:
            return found
        keys, has_terms = _selection_keys(pod.selection)
        projection = self._projections.get(keys)
        if projection is None:
            projection = self._projections[keys] = _Projection(keys, self.nodes, self._class_of)
        if has_terms:
            groups = frozenset(
                g for g, rep in enumerate(projection.representatives) if matches_node_selection(pod.selection, rep)
            )
        else:  # a plain nodeSelector: exactly the group with those values
            selector = pod.selection["spec"].get("nodeSelector") or {}
            group = projection.group_of_value.get(tuple(selector.get(k) for k in keys))
            groups = frozenset() if group is None else frozenset([group])
        # Readiness, cordon and taints, judged by node_rejects on each class's stand-in.
        without_selection = {"spec": {"tolerations": pod.selection["spec"].get("tolerations") or []}}
        class_reasons = [node_rejects(without_selection, stand_in) for stand_in in self._classes]
        classes = frozenset(c for c, reason in enumerate(class_reasons) if reason is None)
        rejected: Counter[str] = Counter()
        for (cls_id, group), count in projection.joint.items():
            reason = class_reasons[cls_id]
            if reason is not None:
                rejected[reason] += count
            elif group not in groups:
                rejected[_SELECTOR_REASON] += count
        signature = (keys, groups, classes)
        index = self._by_signature.get(signature)
        if index is None:
            index = self._by_signature[signature] = NodeIndex()
            class_of = self._class_of
            if len(classes) == len(self._classes):  # every class may be used: no class to test
                names = [n for group in groups for n in projection.members[group]]
            else:
                names = [n for group in groups for n in projection.members[group] if class_of[n] in classes]
            index.fill(names, self.free, self.level)
            self._join(names, index)
        found = self._by_constraint[pod.constraint_key] = (index, rejected)
        return found

    def used_gpus(self, node: str, state: ClusterState) -> int:
        """GPUs the node's bound pods use (cached for the round)."""
        value = self._used_gpus.get(node)
        if value is None:
            info = state.nodes.get(node)
            value = self._used_gpus[node] = gpus(info.used) if info is not None else 0
        return value

    def take(self, node: str, request: Mapping[str, int], times: int = 1) -> None:
        """free[node] -= times * request: `times` copies of it at once (-1 gives one back). May
        go negative (held back). The node moves once in each index, whatever `times` is."""
        self.take_each(request, ((node, times),))

    def take_each(self, request: Mapping[str, int], spots: Iterable[tuple[str, int]]) -> None:
        """take(node, request, times) for each (node, times) of spots (distinct nodes), the
        nodes re-filed in each index together (NodeIndex.move_many)."""
        gpu, cpu, memory = gpus(request), request.get(CPU, 0), request.get(MEMORY, 0)
        whole_cards = -(-gpu // 1000)  # whole GPUs take whole cards
        asked = list(request.items())
        free_of, node_indexes = self.free, self._node_indexes
        before, changed, levels, cards = self.before, self.changed, self.level, self.cards
        moves: dict[NodeIndex, list[Any]] = {}
        for node, times in spots:
            free = free_of[node]
            if before is not None and node not in before:
                before[node] = dict(free)
            old_cpu, old_memory = free.get(CPU, 0), free.get(MEMORY, 0)
            for name, amount in asked:
                free[name] = free.get(name, 0) - times * amount
            # gpus() is linear: the new level needs the request's GPU alone, not a pass over free.
            level = levels[node]
            new_level = levels[node] = level - times * gpu
            move = ((old_cpu, old_memory, node), level, (old_cpu - times * cpu, old_memory - times * memory, node),
                    new_level)
            for index in node_indexes[node]:
                if (index_moves := moves.get(index)) is None:
                    index_moves = moves[index] = []
                index_moves.append(move)
            changed.append((node, new_level))
            if cards and gpu and (node_cards := cards.get(node)) is not None:
                node_cards.take_whole(times * whole_cards)
        for index, index_moves in moves.items():
            index.move_many(index_moves)

    def start_round(self) -> None:
        """Begin a round on a Capacity kept between rounds: every take from now on can be
        given back by `rewind` (core.incremental)."""
        self._used_gpus.clear()
        self.changed.clear()
        let_go_of_memo(self.memo)
        self.before = {}

    def rewind(self) -> None:
        """Give back every take since start_round: free is the cluster's again."""
        for node, free in (self.before or {}).items():
            self.set_free(node, free)
        self.before = None
        self.changed.clear()
        let_go_of_memo(self.memo)
        self.card_choices.clear()

    def indexes_of(self, node: str) -> tuple[NodeIndex, ...]:
        """The indexes the node is in (one per set of constraints that may use it)."""
        return self._node_indexes[node]

    def set_free(self, node: str, free: Mapping[str, int]) -> None:
        """Replace a node's free capacity (a watch event changed it), keeping the indexes."""
        old, level = self.free[node], self.level[node]
        new_level = gpus(free)
        for index in self._node_indexes[node]:
            index.move((old.get(CPU, 0), old.get(MEMORY, 0), node), level,
                       (free.get(CPU, 0), free.get(MEMORY, 0), node), new_level)
        self.free[node], self.level[node] = dict(free), new_level
        self._used_gpus.pop(node, None)
        let_go_of_memo(self.memo)

    def _best_among(
        self, index: NodeIndex, request: Mapping[str, int], names: Iterable[str], at_most: int | None = None
    ) -> tuple[int, int, int, str] | None:
        """Best fit among the given nodes (the gang's own) with at most `at_most` free GPU (None:
        any): the (free GPU, CPU, memory, name) key of the node with the least left where the
        pod fits, or None."""
        best: tuple[int, int, int, str] | None = None
        level = self.level
        # One GPU resource the pod asks, checked first: a full node of the gang's (the usual
        # miss) is ruled out without the whole of fits.
        gpu_key, gpu_amount = next(((k, v) for k, v in request.items() if v > 0 and (k == GPU or k.endswith("/gpu"))),
                                   (GPU, 0))
        for name in names:
            if at_most is not None and level[name] > at_most:
                continue
            free = self.free[name]
            if gpu_amount and free.get(gpu_key, 0) < gpu_amount:
                continue
            if name in index.members and fits(request, free) and self._cards_allow(request, name):
                key = (level[name], free.get(CPU, 0), free.get(MEMORY, 0), name)
                if best is None or key < best:
                    best = key
        return best

    def best_node(self, pod: PodInfo, gang_nodes: Iterable[str] = ()) -> str | None:
        """Best fit for the pod: least GPU left, then a node the gang uses, then least CPU
        and memory left; None when no eligible node has room."""
        if pod.shared_gpu > 0 and self.cards:
            return self.shared_node(pod)
        if self.whole_gpu_policy is not None and self.cards and pod.gpu > 0:
            whole = self.whole_gpu_node(pod)
            if whole is not None:
                return whole
        index = self.index(pod)
        request = pod.request
        gpu = pod.gpu
        start = bisect.bisect_left(index.levels, gpu) if gpu > 0 else 0
        probe = (request.get(CPU, 0),)
        found: str | None = None
        found_level: int | None = None
        for level in index.levels[start:]:
            bucket = index.buckets[level]
            for i in range(bisect.bisect_left(bucket, probe), len(bucket)):
                name = bucket[i][2]
                if fits(request, self.free[name]) and self._cards_allow(request, name):
                    found, found_level = name, level
                    break
            if found is not None:
                break
        # A node of the gang's wins when it leaves no more GPU than the best of the index (the
        # gang's nodes are in the index, so only those at found_level or below can win).
        best_gang = self._best_among(index, request, gang_nodes, found_level)
        if best_gang is not None:
            return best_gang[3]
        if found is not None and gpu <= 0 and self.whole_gpu_policy is not None and found in self.cards:
            # A pod asking no GPU, best fit's node has cards: a node without cards that holds it
            # goes first (its CPU strands no GPU there); else the policy (FGD) weighs where its
            # CPU strands the fewest GPUs, as the reference scores every pod.
            return self._first_fit_without_cards(index, request) or self.whole_gpu_node(pod) or found
        return found

    def _first_fit_without_cards(self, index: NodeIndex, request: Mapping[str, int]) -> str | None:
        """Best fit's node for a pod asking no GPU among the nodes without cards, or None."""
        probe = (request.get(CPU, 0),)
        cards, free = self.cards, self.free
        for level in index.levels:
            bucket = index.buckets[level]
            for i in range(bisect.bisect_left(bucket, probe), len(bucket)):
                name = bucket[i][2]
                if name not in cards and fits(request, free[name]):
                    return name
        return None

    def best_fit_run(self, pod: PodInfo, count: int) -> list[tuple[str, int]]:
        """Where best fit puts `count` pods of this pod's shape, one after another, on a gang
        with no node yet: (node, how many) in order, fewer than `count` in all when the rest
        fit nowhere. Nothing is taken. For pods asking whole GPUs, without GPU cards.

        Why one pass of the index gives the same nodes as best_node pod by pod: the first
        node that fits in the index's (free GPU, CPU, memory, name) order wins, keeps winning
        while the shape fits on it (see packing._repeats_best_fit), and once it is full the
        nodes before it still do not fit and it fits no more (nor, a gang node, does it win
        its tie-break): so the next pod goes to the next node that fits in the same order."""
        index = self.index(pod)
        request = {name: amount for name, amount in pod.request.items() if amount > 0}  # (what fitting reads)
        probe = (request.get(CPU, 0),)
        free = self.free
        out: list[tuple[str, int]] = []
        left = count
        for level in index.levels[bisect.bisect_left(index.levels, pod.gpu):]:
            bucket = index.buckets[level]
            for _, _, name in islice(bucket, bisect.bisect_left(bucket, probe), None):
                copies = copies_fitting(request, free[name], left)
                if copies > 0:
                    out.append((name, copies))
                    left -= copies
                    if not left:
                        return out
        return out

    def filling_node(self, pod: PodInfo, gang_nodes: Iterable[str] = ()) -> str | None:
        """The fallback strategy: keep filling the gang's nodes (best fit among them), else
        open the emptiest node with room (most free GPU, then most free CPU)."""
        if pod.shared_gpu > 0 and self.cards:
            return self.shared_node(pod)
        index = self.index(pod)
        request = pod.request
        best_gang = self._best_among(index, request, gang_nodes)
        if best_gang is not None:
            return best_gang[3]
        gpu = pod.gpu
        stop = bisect.bisect_left(index.levels, gpu) if gpu > 0 else 0
        probe = (request.get(CPU, 0),)
        for level in reversed(index.levels[stop:]):
            bucket = index.buckets[level]
            for i in range(len(bucket) - 1, bisect.bisect_left(bucket, probe) - 1, -1):
                name = bucket[i][2]
                if fits(request, self.free[name]) and self._cards_allow(request, name):
                    return name
        return None

    # ---- GPU sharing: cards ----------------------------------------------------------------

    def _cards_allow(self, request: Mapping[str, int], name: str) -> bool:
        """A whole-GPU request on a node with cards needs that many cards nobody shares."""
        cards = self.cards.get(name) if self.cards else None
        return cards is None or cards.idle() >= -(-gpus(request) // 1000)

    def shared_node(self, pod: PodInfo) -> str | None:
        """The node for a pod asking a share of one card: the (node, card) the card policy picks.
        The card is taken at once and recorded in card_choices (a pod chosen again first gives
        its earlier card back)."""
        self.release_cards([pod.key])
        candidates = self._card_candidates(pod, pod.shared_gpu)
        cpu = pod.request.get(CPU, 0)
        choice: tuple[str, int] | None = self.card_policy(pod.shared_gpu, candidates, self.workload, cpu_milli=cpu) if candidates else None
        if choice is None:
            return None
        self.cards[choice[0]].take(choice[1], pod.shared_gpu, pod.key)
        self.card_choices[pod.key] = (choice[0], choice[1], pod.shared_gpu)
        return choice[0]

    def whole_gpu_node(self, pod: PodInfo) -> str | None:
        """The node whole_gpu_policy picks for a whole-GPU pod (or one asking no GPU: 0 cards)
        among the nodes with cards (None: none, and the plain best fit decides, e.g. on nodes
        without cards)."""
        assert self.whole_gpu_policy is not None
        candidates = self._card_candidates(pod)
        whole, cpu = -(-pod.gpu // 1000), pod.request.get(CPU, 0)
        return self.whole_gpu_policy(whole, candidates, self.workload, cpu_milli=cpu) if candidates else None

    def _card_candidates(self, pod: PodInfo, amount: int = 0) -> list[NodeCards]:
        """The cards of the nodes the pod may use and fits on (with a card holding `amount`), each
        told the CPU and memory free on its node now (a policy may ask whether a shape fits)."""
        out = []
        request, all_cards, all_free = pod.request, self.cards, self.free
        for name in sorted(self.index(pod).members):
            cards = all_cards.get(name)
            if cards is None or (amount and not cards.has_room(amount)):
                continue
            free = all_free[name]
            if fits(request, free):
                cards.free_cpu_milli = free.get(CPU, 0)
                cards.free_memory_bytes = free.get(MEMORY, 0) // 1000
                out.append(cards)
        return out

    def release_cards(self, pod_keys: Iterable[str]) -> None:
        """Give back the cards chosen for these pods (placements the round gave up)."""
        for key in pod_keys:
            choice = self.card_choices.pop(key, None)
            if choice is not None:
                node, card, amount = choice
                self.cards[node].give_back(card, amount, key)
