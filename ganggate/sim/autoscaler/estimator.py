"""Will these pods fit, and how many new nodes do they need: the scheduling simulation of
cluster-autoscaler (simulator/scheduling/hinting_simulator.go TrySchedulePods, first fit over the
snapshot's nodes) and its BinpackingNodeEstimator (estimator/binpacking_estimator.go: pods placed
first fit on nodes added one at a time from the group's template). Pure; the filters are
resources, node affinity and taints, as the scheduler's predicates the simulator runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ganggate.sim.helpers import nodeaffinity, taints
from ganggate.sim.helpers.podrequests import node_allocatable, pod_requests


@dataclass
class Slot:
    """A node of the simulation: what is left of it, and the pods the simulation put there."""

    node: Mapping[str, Any]
    free: dict[str, int]
    placed: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str((self.node.get("metadata") or {}).get("name"))


def slot_of(node: Mapping[str, Any], bound: Iterable[Mapping[str, Any]] = ()) -> Slot:
    """A node less the requests of the pods bound to it."""
    free = dict(node_allocatable(node))
    for pod in bound:
        for name, amount in pod_requests(pod).items():
            free[name] = free.get(name, 0) - amount
    return Slot(node, free)


def fits(pod: Mapping[str, Any], slot: Slot, requests: Mapping[str, int] | None = None) -> bool:
    """NodeResourcesFit, NodeAffinity and TaintToleration on one node of the simulation."""
    requests = pod_requests(pod) if requests is None else requests
    if any(amount > slot.free.get(name, 0) for name, amount in requests.items() if amount):
        return False
    if not nodeaffinity.matches(pod, slot.node):
        return False
    return taints.untolerated_taint(taints.node_taints(slot.node), taints.pod_tolerations(pod)) is None


def take(slot: Slot, pod: Mapping[str, Any], requests: Mapping[str, int]) -> None:
    for name, amount in requests.items():
        slot.free[name] = slot.free.get(name, 0) - amount
    slot.placed.append(str((pod.get("metadata") or {}).get("name")))


def place(pods: Iterable[Mapping[str, Any]], slots: list[Slot]) -> list[Mapping[str, Any]]:
    """Place each pod on the first slot it fits (taking its room); return the pods that fit nowhere."""
    left = []
    for pod in pods:
        requests = pod_requests(pod)
        slot = next((s for s in slots if fits(pod, s, requests)), None)
        if slot is None:
            left.append(pod)
        else:
            take(slot, pod, requests)
    return left


def estimate(pods: list[Mapping[str, Any]], template: Mapping[str, Any], limit: int) -> tuple[int, list[Mapping[str, Any]]]:
    """How many nodes of this template the pods need (at most `limit`), and the pods left without one."""
    new: list[Slot] = []
    left = []
    for pod in pods:
        requests = pod_requests(pod)
        slot = next((s for s in new if fits(pod, s, requests)), None)
        if slot is None and len(new) < limit:
            candidate = slot_of(template)
            slot = candidate if fits(pod, candidate, requests) else None
            if slot is not None:
                new.append(slot)
        if slot is None:
            left.append(pod)
        else:
            take(slot, pod, requests)
    return len(new), left
