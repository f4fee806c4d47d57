"""The words a user reads: why a gang does not fit, what it waits for, what a release did.

Said against the capacity left once the pods that fit are placed, and scoped to the nodes a
gang's pods may use when selectors, affinity or taints rule some out (nodematch's wording).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence

from ganggate.core.fit.resources import GPU, PODS, Resources, format_amount, gpus
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.nodeindex import NodeIndex
from ganggate.core.state.gangs import Gang
from ganggate.core.state.pods import PodInfo


def plural(count: int, noun: str) -> str:
    """'1 pod', '2 pods': every count a user reads goes through here."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def amount_text(resource: str, milli: int) -> str:
    """An amount of a resource as a sentence says it: '1 GPU', '6 GPUs', '0.5 GPU', '2 pods',
    '64 cpu', '512Gi memory', '2 example.com/fpga'."""
    if resource == PODS:
        return plural(milli // 1000, "pod")
    shown = format_amount(resource, milli)
    if resource == GPU:
        return f"{shown} GPU" if milli <= 1000 else f"{shown} GPUs"
    return f"{shown} {resource}"


def scope_note(index: NodeIndex, rejected: Counter[str]) -> str:
    """Which nodes a shortage is about, when the pods may not use them all."""
    if not rejected:
        return ""
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))
    return f" (on the {plural(len(index.members), 'node')} its pods may use; {reasons})"


def gpu_message(gpu: int, top: int) -> str:
    """A pod needs more GPU on one node than any node has free."""
    return (
        f"needs {format_amount(GPU, gpu)} {GPU} on one node; "
        f"the largest free is {format_amount(GPU, max(top, 0))}"
    )


def no_nodes_message(rejected: Counter[str], total: int) -> str:
    """No node may take the pod at all; worded like the scheduler's FitError
    (NoNodeAvailableMsg, pkg/scheduler/framework/types.go)."""
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))
    return f"0/{total} nodes are available: {reasons or 'no nodes'}"


def unfit_message(
    failed: PodInfo | None, pods: Sequence[PodInfo], capacity: Capacity, placed: int, need: int
) -> str:
    """Why packing fell short, scoped to the nodes the pods may use."""
    index = capacity.index(failed or pods[0])
    text = _unfit_text(failed, pods, capacity, placed, need)
    return text if text.startswith("0/") else text + scope_note(index, capacity.rejected(failed or pods[0]))


def _unfit_text(
    failed: PodInfo | None, pods: Sequence[PodInfo], capacity: Capacity, placed: int, need: int
) -> str:
    if failed is None:
        return f"only {placed} of {len(pods)} pods can be placed at once; {need} needed"
    index = capacity.index(failed)
    if not index.members:
        return no_nodes_message(capacity.rejected(failed), len(capacity.nodes))
    request = failed.request
    gpu = gpus(request)
    top = index.levels[-1] if index.levels else 0
    if gpu > top:
        return gpu_message(gpu, top)
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


def contested_message(contested: Mapping[str, list[str]]) -> str:
    """A gang waits for pending pods that may bind into the room it needs (see contention)."""
    pods = sorted({key for keys in contested.values() for key in keys})
    shown = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
    nodes = ", ".join(sorted(contested)[:3]) + (" ..." if len(contested) > 3 else "")
    return (
        f"waiting for {plural(len(pods), 'pending pod')} ({shown}) that the scheduler may place in the "
        f"room this gang needs on {'node' if len(contested) == 1 else 'nodes'} {nodes}; releasing now "
        f"could leave the gang partly bound"
    )


def decision_reason(gang: Gang, placement: Mapping[str, str]) -> str:
    """What a release does, for its Event."""
    nodes = len(set(placement.values()))
    if gang.state == "partial":
        ids = ", ".join(gang.decision_ids()) or "?"
        return f"finishing decision {ids}: {plural(len(placement), 'pod')} on {plural(nodes, 'node')}"
    if gang.state == "started":
        return f"{plural(len(placement), 'more pod')} of a started gang on {plural(nodes, 'node')}"
    return f"{plural(len(placement), 'pod')} on {plural(nodes, 'node')}"


def excess_message(gang: Gang, pod: PodInfo) -> str:
    """The GangExcessMember text: a pod beyond the gang's group-pod-num, and when it goes."""
    declared = gang.spec.pod_num if gang.spec is not None else 0
    return (f"pod {pod.name} is beyond the {plural(declared, 'pod')} gang {gang.namespace}/{gang.name} declares "
            f"(scheduling.k8s.io/group-pod-num), with {plural(gang.live_count, 'live pod')} of which "
            f"{gang.released_count} released; it stays gated, holding nothing, and is released (oldest first) "
            "when a live member ends")


def excess_note(gang: Gang) -> str:
    """The `ganggate status` note of a gang with pods beyond its group-pod-num, or ""."""
    extra = gang.excess_pods()
    if not extra:
        return ""
    names = ", ".join(p.name for p in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    declared = gang.spec.pod_num if gang.spec is not None else 0
    return (f"GangExcessMember: {plural(len(extra), 'pod')} beyond group-pod-num {declared} held gated ({names}) "
            "until a live member ends")
