"""The words of GangCannotFit: why a gang can never fit the cluster as it is, as sentences that
name the label, resource or domain at fault and suggest the likely fix (the nearest label key or
resource the nodes carry, difflib). `feasibility` decides; this module only says it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ganggate.contract import SHARED_GPU_MEMORY
from ganggate.core.fit.nodematch import required_node_terms
from ganggate.core.fit.resources import GPU, PODS, gpus
from ganggate.core.placement.domains import level_name
from ganggate.core.placement.explain import amount_text, plural
from ganggate.core.state.cluster import NodeInfo
from ganggate.core.state.pods import PodInfo

UNTIL = "it can never fit until"


def domain_gpus(nodes: Iterable[NodeInfo]) -> int:
    """The GPUs the nodes have allocatable, in all."""
    return sum(gpus(n.allocatable) for n in nodes)


def totals_message(resource: str, asked: int, have: int, need: int, nodes: int) -> str:
    """Pods of several shapes ask more of a resource in all than the nodes they may use have."""
    return (f"needs {amount_text(resource, asked)} for {plural(need, 'pod')} in all, more than the "
            f"{plural(nodes, 'node')} it may use have even when empty ({amount_text(resource, have)}): {UNTIL} "
            f"nodes are added, or the gang asks for less")


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


def selector_message(selection: Mapping[str, Any], nodes: Sequence[NodeInfo], label_keys: Mapping[str, int]) -> str:
    """No node carries what the pods' nodeSelector or required node affinity asks for."""
    spec = selection.get("spec") or {}
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    for label, value in sorted(selector.items()):
        if label not in label_keys:
            return (f"its pods' nodeSelector asks for the label {label}={value}, which no node carries"
                    f"{did_you_mean(label, label_keys, label_keys)}: {UNTIL} a node with "
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
                     if e.get("operator") in ("In", "Exists", "Gt", "Lt") and e.get("key") not in label_keys
                     and isinstance(e.get("key"), str)})
    hint = ""
    if absent:
        hint = (f"; no node carries the label {absent[0]}"
                f"{did_you_mean(absent[0], label_keys, label_keys)}")
    return (f"no node matches its pods' required node affinity{hint}: {UNTIL} a node that matches joins, "
            f"or the affinity is fixed")


def card_size_message(amount: int, largest: int, node: str) -> str:
    """A pod asks more of one GPU card's memory than any card of the nodes it may use has."""
    if not largest:
        return (f"a pod needs {amount} {SHARED_GPU_MEMORY} on one GPU card, but none of the nodes it may use has "
                f"GPU cards for sharing: {UNTIL} a node with cards joins")
    return (f"a pod needs {amount} {SHARED_GPU_MEMORY} on one GPU card, but the largest card of the nodes it may "
            f"use holds {largest} ({node}): {UNTIL} a node with larger cards joins, or the pod asks for less")


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
    gpu = domain_gpus(nodes)
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
