"""Whether a waiting gang can ever fit the cluster as it is, and if not, why (`GangCannotFit`).

A gang that does not fit now may fit later, when running pods finish and their room frees up.
A gang that would not fit even if every node were empty, ready and untainted never will, until
the nodes change: it asks more than the cluster's allocatable, a pod larger than any node, a
domain larger than any domain of its required level, a node label or selector no node carries,
or a resource no node has. Telling the two apart saves an operator from waiting for a gang that
cannot start, and says what to fix (a label key that nearly matches one the nodes carry).

Judged against each node's allocatable and labels, never its free capacity, readiness, cordon
or taints (those change as the cluster runs: counting them would call a wait endless that is
not). Conservative: "never" only when one of the causes above is proven, so a gang of several
shapes is judged by totals that are necessary, not sufficient. The node picture (allocatable
per node kind, which nodes a selection matches, each domain's room) is worked out once per node
layout (`ClusterState.layout_version`, bumped by any change to the nodes a round reads), so a
gang that waits round after round costs a cache look-up; a node that joins starts afresh, and
the gang is judged again in the next round. Pure: no I/O, no clock.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ganggate.core.fit.gpushare import equal_cards
from ganggate.core.fit.nodematch import canonical_json, matches_node_selection, required_node_terms
from ganggate.core.fit.resources import GPU, PODS, Resources, copies_fitting, gpus
from ganggate.core.placement.cannot_fit import (
    card_size_message,
    cluster_size_message,
    domain_gpus,
    domain_size_message,
    missing_resource_message,
    node_size_message,
    selector_message,
    topology_label_message,
    totals_message,
)
from ganggate.core.placement.domains import domain_of
from ganggate.core.placement.topology import gang_request
from ganggate.core.state.cluster import ClusterState, NodeInfo
from ganggate.core.state.pods import PodInfo

#: The Event reason of a gang that can never fit the cluster as it is.
CANNOT_FIT = "GangCannotFit"
#: Answers kept per node layout before they start over (bounds the memory of a long stable layout).
_MAX_ANSWERS = 10000


@dataclass(frozen=True)
class Never:
    """Why a gang can never fit the cluster as it is: `cause` names the kind (selector, label,
    resource, node-size, cluster-size, topology-label, domain-size), `message` says it to a user."""

    cause: str
    message: str


# ---- the node picture, once per layout ----------------------------------------------------


class _Picture:
    """What the checks read of the nodes, for one node layout: each distinct allocatable and how
    many nodes have it, the label keys and resources the nodes carry, and the nodes each pod
    selection matches (by constraint), cached as they are asked for."""

    def __init__(self, state: ClusterState) -> None:
        self.version = state.layout_version
        self.nodes: list[NodeInfo] = list(state.nodes.values())
        self._label_keys: Counter[str] | None = None
        # Nodes alike share one allocatable object (cluster._NODE_PARTS): each is read once.
        distinct = {id(n.allocatable): n.allocatable for n in self.nodes}.values()
        self.resources: set[str] = {r for allocatable in distinct for r, a in allocatable.items() if a > 0}
        # By the label-reading part of a pod's node selection (its tolerations do not count
        # here): gangs that differ only in tolerations share one pass over the nodes.
        self.selection_of: dict[str, str] = {}  # constraint key -> selection key
        self.matching: dict[str, list[NodeInfo]] = {}
        self.kinds: dict[str, Counter[tuple[tuple[str, int], ...]]] = {}
        self.domains: dict[tuple[Any, ...], dict[str, list[NodeInfo]]] = {}
        self.answers: dict[tuple[Any, ...], Never | None] = {}

    @property
    def label_keys(self) -> Counter[str]:
        """How many nodes carry each label key (read for messages and suggestions only)."""
        if self._label_keys is None:
            self._label_keys = Counter(k for n in self.nodes for k in n.labels)
        return self._label_keys

    def selection(self, pod: PodInfo) -> str:
        """The key of what the pod's node selection reads of labels (nodeSelector, required terms)."""
        found = self.selection_of.get(pod.constraint_key)
        if found is None:
            spec = pod.selection.get("spec") or {}
            found = self.selection_of[pod.constraint_key] = canonical_json(
                [spec.get("nodeSelector") or {}, required_node_terms(pod.selection)])
        return found

    def matching_nodes(self, pod: PodInfo) -> list[NodeInfo]:
        """The nodes whose labels (and name) the pod's node selection accepts."""
        key = self.selection(pod)
        found = self.matching.get(key)
        if found is None:
            spec = pod.selection.get("spec") or {}
            selector = list((spec.get("nodeSelector") or {}).items())
            if required_node_terms(pod.selection) is not None:
                found = [n for n in self.nodes if matches_node_selection(pod.selection, n.view)]
            elif not selector:
                found = self.nodes
            elif len(selector) == 1:  # the usual selector: one label (what matches_node_selection checks)
                (label, value), = selector
                found = [n for n in self.nodes if n.labels.get(label) == value]
            else:
                found = [n for n in self.nodes if all(n.labels.get(k) == v for k, v in selector)]
            self.matching[key] = found
        return found

    def kinds_of(self, pod: PodInfo) -> Counter[tuple[tuple[str, int], ...]]:
        """The distinct allocatables of the nodes the pod may use, and how many have each."""
        key = self.selection(pod)
        found = self.kinds.get(key)
        if found is None:
            found = self.kinds[key] = _kinds(self.matching_nodes(pod))
        return found

    def domains_of(self, pods: Sequence[PodInfo], level: str, levels: tuple[str, ...]) -> dict[str, list[NodeInfo]]:
        """The nodes the pods may use, grouped by their domain at the level (domains.domain_of)."""
        selections = tuple(sorted({self.selection(p) for p in pods}))
        key = (selections, level, levels)
        found = self.domains.get(key)
        if found is None:
            nodes = {n.name: n for p in {self.selection(p): p for p in pods}.values() for n in self.matching_nodes(p)}
            found = self.domains[key] = {}
            for node in nodes.values():
                found.setdefault(domain_of(node.view, level, levels), []).append(node)
        return found


_PICTURES: weakref.WeakKeyDictionary[ClusterState, _Picture] = weakref.WeakKeyDictionary()


def _picture(state: ClusterState) -> _Picture:
    found = _PICTURES.get(state)
    if found is None or found.version != state.layout_version:
        found = _PICTURES[state] = _Picture(state)
    return found


def _kinds(nodes: Iterable[NodeInfo]) -> Counter[tuple[tuple[str, int], ...]]:
    """The nodes' distinct allocatables and how many have each (nodes share few)."""
    by_object = Counter(id(n.allocatable) for n in nodes)  # nodes alike share one (cluster._NODE_PARTS)
    objects = {id(n.allocatable): n.allocatable for n in nodes}
    out: Counter[tuple[tuple[str, int], ...]] = Counter()
    for key, count in by_object.items():
        out[tuple(sorted(objects[key].items()))] += count
    return out


def _room(request: Resources, kinds: Mapping[tuple[tuple[str, int], ...], int], at_most: int) -> int:
    """How many pods of this request nodes of these kinds (_kinds) hold when empty (at most `at_most`)."""
    found = 0
    for allocatable, count in kinds.items():
        found += count * max(copies_fitting(request, dict(allocatable), at_most), 0)
        if found >= at_most:
            return at_most
    return found


# ---- the judgement -----------------------------------------------------------------------


def never_fits(pods: Sequence[PodInfo], need: int, state: ClusterState) -> Never | None:
    """Why `need` of these pods (one gang's, as a round would release them) can never be placed
    on the cluster's nodes as they are, or None when they may fit once room frees up."""
    if not pods or need <= 0 or not state.nodes:  # no nodes yet (a start-up): nothing to judge
        return None
    picture = _picture(state)
    required = gang_request(pods)[0]
    key = (_shapes(pods), need, required, state.topology_levels)
    if key not in picture.answers:
        if len(picture.answers) >= _MAX_ANSWERS:  # a long stable layout with gangs of ever new shapes
            picture.answers.clear()
        picture.answers[key] = _judge(pods, need, picture, required, state.topology_levels)
    return picture.answers[key]


def _shapes(pods: Sequence[PodInfo]) -> tuple[Any, ...]:
    """The gang's pod shapes (constraint, request) and how many of each: what the answer reads
    of the pods. Pods of one template share their request and constraint objects (pods.Shared),
    so the usual gang of one shape is told apart by identity, without a sort per pod."""
    first = pods[0]
    request, constraint = first.request, first.constraint_key
    if all(p.request is request and p.constraint_key is constraint for p in pods):
        return (((constraint, tuple(sorted(request.items()))), len(pods)),)
    return tuple(sorted(Counter((p.constraint_key, tuple(sorted(p.request.items()))) for p in pods).items()))


def _judge(pods: Sequence[PodInfo], need: int, picture: _Picture, required: str | None,
           levels: tuple[str, ...]) -> Never | None:
    by_constraint = {p.constraint_key: p for p in pods}
    usable: dict[str, list[NodeInfo]] = {}
    for constraint, pod in by_constraint.items():
        usable[constraint] = nodes = picture.matching_nodes(pod)
        if not nodes:
            return Never("selector", selector_message(pod.selection, picture.nodes, picture.label_keys))
    # Pods of one template share their request object: each distinct one is looked at once.
    counts: Counter[tuple[str, int]] = Counter((p.constraint_key, id(p.request)) for p in pods)
    shapes = {(p.constraint_key, id(p.request)): p for p in pods}
    for pod in shapes.values():
        missing = [r for r, a in sorted(pod.request.items()) if a > 0 and r not in picture.resources]
        if missing:
            return Never("resource", missing_resource_message(missing[0], picture.resources))
    for pod in shapes.values():
        if pod.shared_gpu > 0 and (largest := _largest_card(usable[pod.constraint_key]))[0] < pod.shared_gpu:
            return Never("card-size", card_size_message(pod.shared_gpu, *largest))
    too_big = sorted((sorted(p.request.items()), s) for s, p in shapes.items()
                     if not _room(p.request, picture.kinds_of(p), 1))
    if too_big and len(pods) - sum(counts[s] for _, s in too_big) < need:
        pod = shapes[too_big[0][1]]
        return Never("node-size", node_size_message(pod, usable[pod.constraint_key]))
    found = _cluster_size(pods, need, usable, picture)
    if found is not None or required is None:
        return found
    return _topology(pods, need, usable, picture, required, levels)


def _largest_card(nodes: Sequence[NodeInfo]) -> tuple[int, str]:
    """(memory, node) of the largest GPU card for sharing among the nodes (0 when none has cards),
    the cards of a node being its total split evenly (gpushare.equal_cards)."""
    return max(((max(equal_cards(*n.card_totals), default=0), n.name) for n in nodes if n.card_totals[1]),
               default=(0, ""))


def _one_shape(pods: Sequence[PodInfo]) -> bool:
    first = pods[0]
    return all(p.request == first.request and p.constraint_key == first.constraint_key for p in pods)


def _least(pods: Sequence[PodInfo], need: int) -> Resources:
    """Per resource, the least that `need` of the pods ask in all (a lower bound of any `need`)."""
    names = {r for p in pods for r in p.request}
    return {r: sum(sorted(p.request.get(r, 0) for p in pods)[:need]) for r in names}


def _total(nodes: Iterable[NodeInfo]) -> Resources:
    out: Resources = {}
    for node in nodes:
        for name, amount in node.allocatable.items():
            out[name] = out.get(name, 0) + amount
    return out


def _cluster_size(pods: Sequence[PodInfo], need: int, usable: Mapping[str, list[NodeInfo]],
                  picture: _Picture) -> Never | None:
    """More than the nodes the pods may use hold, even empty."""
    if _one_shape(pods):
        nodes = usable[pods[0].constraint_key]
        kinds = picture.kinds_of(pods[0])
        room = _room(pods[0].request, kinds, need)
        if room < need:
            return Never("cluster-size", cluster_size_message(pods[0], need, room, len(nodes), _binding(pods[0], kinds, need)))
        return None
    nodes = list({n.name: n for found in usable.values() for n in found}.values())
    have, asked = _total(nodes), _least(pods, need)
    short = [r for r, amount in sorted(asked.items(), key=lambda item: (item[0] != GPU, item[0]))
             if amount > have.get(r, 0)]
    if short:
        res = short[0]
        return Never("cluster-size", totals_message(res, asked[res], have.get(res, 0), need, len(nodes)))
    return None


def _topology(pods: Sequence[PodInfo], need: int, usable: Mapping[str, list[NodeInfo]], picture: _Picture,
              required: str, levels: tuple[str, ...]) -> Never | None:
    """A required level whose every domain is too small for the gang (or that no node carries,
    so that each node is a domain of its own)."""
    groups = picture.domains_of(pods, required, levels)
    if _one_shape(pods):
        rooms = {d: _room(pods[0].request, _kinds(members), need) for d, members in groups.items()}
        fits = any(r >= need for r in rooms.values())
    else:
        asked = _least(pods, need)
        totals = {d: _total(members) for d, members in groups.items()}
        fits = any(all(a <= t.get(r, 0) for r, a in asked.items()) for t in totals.values())
        rooms = {d: gpus(t) // 1000 for d, t in totals.items()}
    if fits:
        return None
    largest = max(sorted(groups), key=lambda d: (domain_gpus(groups[d]), rooms[d]))
    carried = picture.label_keys.get(required, 0)
    if not carried:
        return Never("topology-label", topology_label_message(pods, need, required, largest, groups[largest],
                                                              picture.label_keys))
    return Never("domain-size", domain_size_message(pods, need, required, largest, groups[largest]))


def _binding(pod: PodInfo, kinds: Mapping[tuple[tuple[str, int], ...], int], need: int) -> list[str]:
    """The resources besides GPU that hold the room of the pod's shape below what its GPUs
    alone would allow (what a message must name: '8 GPUs and 100 cpu each')."""
    gpu_only = {r: a for r, a in pod.request.items() if r == GPU}
    if not gpu_only:
        return sorted(r for r, a in pod.request.items() if a > 0 and r != PODS)
    base = _room(gpu_only, kinds, need)
    return [r for r, a in sorted(pod.request.items())
            if r != GPU and a > 0 and _room({**gpu_only, r: a}, kinds, need) < base]
