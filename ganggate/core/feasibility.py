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

import difflib
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ganggate.core.cluster import ClusterState, NodeInfo
from ganggate.core.domains import domain_of, level_name
from ganggate.core.explain import amount_text, plural
from ganggate.core.nodematch import canonical_json, matches_node_selection, required_node_terms
from ganggate.core.pods import PodInfo
from ganggate.core.resources import GPU, PODS, Resources, copies_fitting, gpus
from ganggate.core.topology import gang_request

#: The Event reason of a gang that can never fit the cluster as it is.
CANNOT_FIT = "GangCannotFit"


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
        self.domains: dict[tuple, dict[str, list[NodeInfo]]] = {}
        self.answers: dict[tuple, Never | None] = {}

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


_PICTURES: "weakref.WeakKeyDictionary[ClusterState, _Picture]" = weakref.WeakKeyDictionary()


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
        picture.answers[key] = _judge(pods, need, picture, required, state.topology_levels)
    return picture.answers[key]


def _shapes(pods: Sequence[PodInfo]) -> tuple:
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
            return Never("selector", selector_message(pod.selection, picture))
    # Pods of one template share their request object: each distinct one is looked at once.
    counts: Counter[tuple[str, int]] = Counter((p.constraint_key, id(p.request)) for p in pods)
    shapes = {(p.constraint_key, id(p.request)): p for p in pods}
    for pod in shapes.values():
        missing = [r for r, a in sorted(pod.request.items()) if a > 0 and r not in picture.resources]
        if missing:
            return Never("resource", missing_resource_message(missing[0], picture.resources))
    too_big = sorted((sorted(p.request.items()), s) for s, p in shapes.items()
                     if not _room(p.request, picture.kinds_of(p), 1))
    if too_big and len(pods) - sum(counts[s] for _, s in too_big) < need:
        pod = shapes[too_big[0][1]]
        return Never("node-size", node_size_message(pod, usable[pod.constraint_key]))
    found = _cluster_size(pods, need, usable, picture)
    if found is not None or required is None:
        return found
    return _topology(pods, need, usable, picture, required, levels)


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
        return Never("cluster-size", (
            f"needs {amount_text(res, asked[res])} for {plural(need, 'pod')} in all, more than the "
            f"{plural(len(nodes), 'node')} it may use have even when empty ({amount_text(res, have.get(res, 0))})"
            f": it can never fit until nodes are added, or the gang asks for less"))
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
    largest = max(sorted(groups), key=lambda d: (_domain_gpus(groups[d]), rooms[d]))
    carried = picture.label_keys.get(required, 0)
    if not carried:
        return Never("topology-label", topology_label_message(pods, need, required, largest, groups[largest],
                                                              picture.label_keys))
    return Never("domain-size", domain_size_message(pods, need, required, largest, groups[largest]))


def _domain_gpus(nodes: Iterable[NodeInfo]) -> int:
    return sum(gpus(n.allocatable) for n in nodes)


# ---- the words ---------------------------------------------------------------------------

UNTIL = "it can never fit until"


def did_you_mean(word: str, choices: Iterable[str], counts: Mapping[str, int] | None = None) -> str:
    """' (did you mean example.com/rack, which 8 nodes carry?)' for the choice nearest a word
    that nothing matches, or '' when none is near (difflib)."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.75)
    if not close:
        return ""
    if counts is not None:
        return f" (did you mean {close[0]}, which {plural(counts[close[0]], 'node')} carry?)".replace(
            "1 node carry", "1 node carries")
    return f" (did you mean {close[0]}?)"


def selector_message(selection: Mapping, picture: _Picture) -> str:
    """No node carries what the pods' nodeSelector or required node affinity asks for."""
    spec = selection.get("spec") or {}
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    nodes = picture.nodes
    for label, value in sorted(selector.items()):
        if label not in picture.label_keys:
            return (f"its pods' nodeSelector asks for the label {label}={value}, which no node carries"
                    f"{did_you_mean(label, picture.label_keys, picture.label_keys)}: {UNTIL} a node with "
                    f"that label joins, or the selector is fixed")
        values = sorted({n.labels[label] for n in nodes if label in n.labels})
        if value not in values:
            shown = ", ".join(values[:5]) + (f" and {len(values) - 5} more" if len(values) > 5 else "")
            return (f"its pods' nodeSelector asks for {label}={value}, which no node carries (the nodes' "
                    f"{label} is {shown}){did_you_mean(value, values)}: {UNTIL} a node labelled "
                    f"{label}={value} joins, or the selector is fixed")
    if selector and required_node_terms(selection) is None:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
        return (f"no node carries all the labels its pods' nodeSelector asks for ({shown}): {UNTIL} a node "
                f"with all of them joins, or the selector is fixed")
    absent = sorted({e.get("key") for term in required_node_terms(selection) or []
                     for e in term.get("matchExpressions") or []
                     if e.get("operator") in ("In", "Exists", "Gt", "Lt") and e.get("key") not in picture.label_keys
                     and isinstance(e.get("key"), str)})
    hint = ""
    if absent:
        hint = (f"; no node carries the label {absent[0]}"
                f"{did_you_mean(absent[0], picture.label_keys, picture.label_keys)}")
    return (f"no node matches its pods' required node affinity{hint}: {UNTIL} a node that matches joins, "
            f"or the affinity is fixed")


def missing_resource_message(resource: str, have: Iterable[str]) -> str:
    """The pods ask for a resource no node has."""
    return (f"its pods ask for {resource}, a resource no node has{did_you_mean(resource, have)}: "
            f"{UNTIL} a node with {resource} joins, or the pods ask for a resource the nodes have")


def node_size_message(pod: PodInfo, nodes: Sequence[NodeInfo]) -> str:
    """A pod asks more of one resource than any node it may use has, even empty."""
    request = pod.request
    order = sorted((r for r, a in request.items() if a > 0 and r != PODS), key=lambda r: (r != GPU, r))
    for res in order + [PODS]:
        largest = max((n.allocatable.get(res, 0) for n in nodes), default=0)
        if request.get(res, 0) > largest:
            return (f"a pod needs {amount_text(res, request[res])} on one node, but the largest node it may use "
                    f"has {amount_text(res, largest)} allocatable: {UNTIL} a larger node joins, or the pod asks "
                    f"for less")
    return (f"a pod needs {_shape(request)} on one node, and no node it may use has all of it even when empty: "
            f"{UNTIL} a larger node joins, or the pod asks for less")


def _shape(request: Mapping[str, int]) -> str:
    return ", ".join(amount_text(r, a) for r, a in sorted(request.items(), key=lambda i: (i[0] != GPU, i[0]))
                     if r != PODS and a > 0)


def _binding(pod: PodInfo, kinds: Mapping[tuple[tuple[str, int], ...], int], need: int) -> list[str]:
    """The resources besides GPU that hold the room of the pod's shape below what its GPUs
    alone would allow (what a message must name: '8 GPUs and 100 cpu each')."""
    gpu_only = {r: a for r, a in pod.request.items() if r == GPU}
    if not gpu_only:
        return sorted(r for r, a in pod.request.items() if a > 0 and r != PODS)
    base = _room(gpu_only, kinds, need)
    return [r for r, a in sorted(pod.request.items())
            if r != GPU and a > 0 and _room({**gpu_only, r: a}, kinds, need) < base]


def _per_pod(pod: PodInfo, named: Sequence[str] = ()) -> str:
    """'8 GPUs each', '8 GPUs and 100 cpu each' (the GPUs and the resources `named`)."""
    shown = [amount_text(GPU, gpus(pod.request))] if gpus(pod.request) else []
    shown += [amount_text(r, pod.request[r]) for r in named if r != GPU]
    if not shown:
        return "no resources each"
    return (", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]) + " each"


def cluster_size_message(pod: PodInfo, need: int, room: int, nodes: int, named: Sequence[str] = ()) -> str:
    """More pods of one shape than the nodes hold, even empty."""
    held = "none" if room == 0 else f"only {room}"
    verb = "holds" if nodes == 1 else "hold"
    return (f"needs {plural(need, 'pod')} of {_per_pod(pod, named)}, but the {plural(nodes, 'node')} it may use {verb} "
            f"{held} even when empty: {UNTIL} nodes are added, or the gang asks for less")


def _demand(pods: Sequence[PodInfo], need: int) -> str:
    """'6 GPUs' (the fewest `need` of the pods ask), or '8 pods' when they ask for no GPU."""
    demand = sum(sorted(gpus(p.request) for p in pods)[:need])
    return amount_text(GPU, demand) if demand else plural(need, "pod")


def _holds(nodes: Sequence[NodeInfo]) -> str:
    gpu = _domain_gpus(nodes)
    return f"{amount_text(GPU, gpu)} allocatable" if gpu else f"{plural(len(nodes), 'node')}"


def topology_label_message(pods: Sequence[PodInfo], need: int, level: str, largest: str, nodes: Sequence[NodeInfo],
                           label_keys: Mapping[str, int]) -> str:
    """The required level is a label no node carries: each node is a domain of its own, and none
    holds the gang."""
    noun = level_name(level)
    return (f"needs {_demand(pods, need)} in one {noun}, but no node carries the label {level}"
            f"{did_you_mean(level, label_keys, label_keys)}, so each node is a {noun} of its own, and the "
            f"largest ({largest.removeprefix('node ')}) has {_holds(nodes)}: {UNTIL} nodes carry the label, or "
            f"the gang's scheduling.k8s.io/group-topology-required names one they carry")


def domain_size_message(pods: Sequence[PodInfo], need: int, level: str, largest: str,
                        nodes: Sequence[NodeInfo]) -> str:
    """Every domain of the required level is smaller than the gang, even empty."""
    noun = level_name(level)
    return (f"needs {_demand(pods, need)} in one {noun}, more than any {noun} holds even when empty: the "
            f"largest ({largest}) has {_holds(nodes)}: {UNTIL} a larger {noun} is made, or the gang asks for "
            f"a wider level or fewer pods")
