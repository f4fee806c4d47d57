"""GPU sharing in a decision round: the card of every sharing pod of a placement, the gpushare
annotations its decision carries, and the observed workload a card policy such as FGD weighs.
Pure; the per-card fit itself is `capacity.Capacity.shared_node`'s (docs/gpu-sharing.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ganggate.core.fit.gpushare import NodeCards, Workload, card_shortfall, decision_annotations
from ganggate.core.fit.resources import CPU
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.gpushare_fgd import target_workload
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.outcome import Unfit
from ganggate.core.state.pods import PodInfo


def observed_workload(state: ClusterState, cards: Mapping[str, NodeCards], coverage: float = 0.95) -> Workload:
    """The target workload FGD weighs: the pods the cluster holds (bound, or waiting to be), as
    (share of a card in thousandths, whole GPUs, CPU, memory) shapes, the most common ones
    covering `coverage` of them (the typical pods of the FGD artifact's runs: pods asking no GPU
    included, 95%). A share is the pod's amount over the most common card size of the nodes
    with cards (`cards`: Capacity.cards_of(state)). Empty when no pod asks for GPU."""
    sizes: dict[int, int] = {}
    for node_cards in cards.values():
        for size in node_cards.capacity:
            sizes[size] = sizes.get(size, 0) + 1
    card = max(sizes, key=lambda size: (sizes[size], size)) if sizes else 0
    shapes = []
    for pod in state.pods.values():
        if pod.terminated:
            continue
        whole = pod.gpu // 1000
        if pod.shared_gpu > 0 and card:
            shapes.append((min(1000, pod.shared_gpu * 1000 // card), 0, pod.request.get(CPU, 0), 0))
        elif whole > 0:
            shapes.append((0, whole, pod.request.get(CPU, 0), 0))
        elif pod.shared_gpu <= 0:
            shapes.append((0, 0, pod.request.get(CPU, 0), 0))
    if not any(share or whole for share, whole, _, _ in shapes):
        return ()
    return target_workload(shapes, coverage)


def with_cards(pods: Sequence[PodInfo], placement: dict[str, str], capacity: Capacity) -> dict[str, str] | Unfit:
    """The placement, with a card for every sharing pod in it. A pod placed without one (a
    preemptor's reserved node, planned before any card was chosen) gets the policy's card on
    its node now; when none holds it the whole placement is given back and the gang waits."""
    if not capacity.cards:
        return placement  # no node has cards: no pod needs one
    by_key = {p.key: p for p in pods}
    missing = [key for key, node in placement.items()
               if by_key[key].shared_gpu > 0 and node in capacity.cards
               and capacity.card_choices.get(key, ("",))[0] != node]
    for key in missing:
        pod, node = by_key[key], placement[key]
        capacity.release_cards([key])
        choice = capacity.card_policy(pod.shared_gpu, [capacity.cards[node]], capacity.workload,
                                      cpu_milli=pod.request.get(CPU, 0))  # as Capacity.shared_node
        if choice is None:
            message = f"pod {key}: " + card_shortfall(pod.shared_gpu, [capacity.cards[node]])
            for placed, where in placement.items():
                capacity.take(where, by_key[placed].request, -1)
            capacity.release_cards(placement)
            return Unfit(message)
        capacity.cards[node].take(choice[1], pod.shared_gpu, key)
        capacity.card_choices[key] = (node, choice[1], pod.shared_gpu)
    return placement


def card_annotations(placement: dict[str, str], capacity: Capacity, now: float) -> dict[str, dict[str, str]]:
    """pod key -> the gpushare annotations of its card, for the sharing pods of a placement."""
    out: dict[str, dict[str, str]] = {}
    if not capacity.card_choices:
        return out
    for key, node in placement.items():
        choice = capacity.card_choices.get(key)
        if choice is not None and choice[0] == node:
            _, card, amount = choice
            out[key] = decision_annotations(card, amount, capacity.cards[node].capacity[card], int(now * 1e9))
    return out
