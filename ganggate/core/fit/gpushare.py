"""GPU sharing per card: a node's cards, who holds their memory, and which card a pod gets.

The default scheduler sees only a node's sum of `aliyun.com/gpu-mem`, so a node with two cards of
8 free "fits" a pod of 12 that fits on no card. This module models the cards as the gpushare
scheduler extender does (AliyunContainerService/gpushare-scheduler-extender pkg/cache/nodeinfo.go:
cards of equal size, node total / card count; a card's use is the ALIYUN_COM_GPU_MEM_POD of the
pods whose ALIYUN_COM_GPU_MEM_IDX names it) and holds the policies that choose a card. Pure.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ganggate.contract import (
    GPUSHARE_ASSIGNED,
    GPUSHARE_ASSUME_TIME,
    GPUSHARE_CARD_INDEX,
    GPUSHARE_CARD_TOTAL,
    GPUSHARE_POD_AMOUNT,
    SHARED_GPU_COUNT,
    SHARED_GPU_MEMORY,
)
from ganggate.core.fit.resources import GPU, QuantityError, parse_nanos, unit_value


class PodShape(NamedTuple):
    """One shape of the target workload (FGD's "target workload"), with how often it occurs."""

    share_milli: int  # share of one card's memory, 0..1000 (0: no shared GPU)
    whole_gpus: int  # whole cards (nvidia.com/gpu)
    cpu_milli: int
    memory_bytes: int
    weight: float


#: The observed mix of pod shapes; plain 5-tuples in PodShape's order are accepted too.
Workload = Sequence[PodShape]


@dataclass
class NodeCards:
    """One node's cards as the planner sees them. Amounts are in the node's gpu-mem unit."""

    node: str
    capacity: list[int]  # per card
    used: list[int]  # per card: shared memory held by bound or promised pods
    whole: int = 0  # cards given whole (nvidia.com/gpu): the emptiest cards, not shared
    #: What else is free on the node, for policies that ask whether a shape fits at all
    #: (None: not known, treated as unlimited).
    free_cpu_milli: int | None = None
    free_memory_bytes: int | None = None
    #: Who holds each card: card index -> pod keys (namespace/name), for `ganggate status --gpus`.
    holders: dict[int, list[str]] = field(default_factory=dict)

    def whole_cards(self) -> set[int]:
        """The cards counted as given whole: the `whole` least used ones (lowest index first)."""
        if self.whole <= 0:  # the usual case, asked for every candidate node of every pod: no sort
            return set()
        order = sorted(range(len(self.capacity)), key=lambda card: (self.used[card], card))
        return set(order[: max(0, self.whole)])

    def free(self, card: int) -> int:
        """Memory still free on one card (0 for a card given whole)."""
        if card in self.whole_cards():
            return 0
        return max(0, self.capacity[card] - self.used[card])

    def fits(self, amount: int) -> list[int]:
        """Indexes of the cards with at least `amount` free (cards given whole excluded)."""
        taken = self.whole_cards()
        return [
            card
            for card in range(len(self.capacity))
            if card not in taken and self.capacity[card] - self.used[card] >= amount
        ]

    def has_room(self, amount: int) -> bool:
        """Whether some card has `amount` free (cards given whole excluded): `fits` without the list."""
        if self.whole <= 0:
            return any(capacity - used >= amount for capacity, used in zip(self.capacity, self.used, strict=True))
        return bool(self.fits(amount))

    def idle(self) -> int:
        """Cards nobody uses at all and not given whole: what a whole-GPU pod may still take."""
        return max(0, sum(1 for used in self.used if used == 0) - self.whole)

    def take(self, card: int, amount: int, holder: str = "") -> None:
        """Count `amount` of `card` as used (a bound pod, or one the round just placed)."""
        self.used[card] += amount
        if holder:
            self.holders.setdefault(card, []).append(holder)

    def give_back(self, card: int, amount: int, holder: str = "") -> None:
        """Undo `take`: a placement the round gave up."""
        self.used[card] -= amount
        if holder and holder in self.holders.get(card, []):
            self.holders[card].remove(holder)
            if not self.holders[card]:
                del self.holders[card]

    def take_whole(self, count: int) -> None:
        """Count `count` more cards as given whole (negative: give them back)."""
        self.whole += count

    def copy(self) -> NodeCards:
        return NodeCards(
            self.node,
            list(self.capacity),
            list(self.used),
            self.whole,
            self.free_cpu_milli,
            self.free_memory_bytes,
            {card: list(keys) for card, keys in self.holders.items()},
        )


def equal_cards(total: int, count: int) -> list[int]:
    """A node's cards when only its totals are known: `count` cards of total // count each, as
    gpushare-scheduler-extender pkg/cache/nodeinfo.go NewNodeInfo (newDeviceInfo(i, total/count))."""
    if count <= 0 or total <= 0:
        return []
    return [total // count] * count


def node_totals(node: Mapping[str, Any]) -> tuple[int, int]:
    """A node's (total shared GPU memory, card count) from status.capacity, as the extender's
    GetTotalGPUMemory and GetGPUCountInNode read them (pkg/utils/node.go; Value(), rounded up);
    (0, 0) when absent or unreadable."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        total = unit_value(parse_nanos(capacity.get(SHARED_GPU_MEMORY, 0)))
        count = unit_value(parse_nanos(capacity.get(SHARED_GPU_COUNT, 0)))
    except QuantityError:
        return 0, 0
    return (total, count) if total > 0 and count > 0 else (0, 0)


def shared_amount(pod: Mapping[str, Any]) -> int:
    """The shared GPU memory a pod asks: the sum over its containers of limits[aliyun.com/gpu-mem],
    whole units rounded up, as gpushare's GetGPUMemoryFromPodResource (pkg/utils/pod.go) sums
    `val.Value()`. Raises QuantityError for a value that is not a quantity."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if SHARED_GPU_MEMORY in limits:
            total += unit_value(parse_nanos(limits[SHARED_GPU_MEMORY]))
    return total


def _atoi(value: object) -> int | None:
    """strconv.Atoi: an optional sign and decimal digits, nothing else."""
    if not isinstance(value, str):
        return None
    text = value[1:] if value[:1] in "+-" else value
    if not text.isascii() or not text.isdigit():
        return None
    return int(value)


def card_of(annotations: Mapping[str, str] | None) -> int | None:
    """The card a pod holds, from ALIYUN_COM_GPU_MEM_IDX (GetGPUIDFromAnnotation: unreadable or
    negative means none)."""
    index = _atoi((annotations or {}).get(GPUSHARE_CARD_INDEX))
    return index if index is not None and index >= 0 else None


def held_amount(annotations: Mapping[str, str] | None) -> int:
    """The memory a pod holds on its card, from ALIYUN_COM_GPU_MEM_POD (the extender's
    GetGPUMemoryFromPodAnnotation: unreadable or negative counts 0)."""
    amount = _atoi((annotations or {}).get(GPUSHARE_POD_AMOUNT))
    return amount if amount is not None and amount > 0 else 0


def node_cards(
    node: str,
    total: int,
    count: int,
    held: Sequence[tuple[int, int, str]] = (),
    whole: int = 0,
) -> NodeCards:
    """A node's cards from its totals and the (card, amount, pod key) of the pods holding them.
    A card index the node does not have is skipped, as the extender's addOrUpdatePod does."""
    capacity = equal_cards(total, count)
    cards = NodeCards(node, capacity, [0] * len(capacity), whole)
    for card, amount, key in held:
        if 0 <= card < len(capacity):
            cards.take(card, amount, key)
    return cards


def decision_annotations(card: int, amount: int, card_total: int, assume_time_ns: int) -> dict[str, str]:
    """The annotations the device plugin reads, in the extender's format (pkg/utils/pod.go
    PatchPodAnnotationSpec: decimal ints, assigned "false", assume time in unix nanoseconds)."""
    return {
        GPUSHARE_CARD_INDEX: str(card),
        GPUSHARE_CARD_TOTAL: str(card_total),
        GPUSHARE_POD_AMOUNT: str(amount),
        GPUSHARE_ASSIGNED: "false",
        GPUSHARE_ASSUME_TIME: str(assume_time_ns),
    }


def cards_of(annotations: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[int, int]]:
    """pod key -> (card, amount), read back from a decision's per-pod annotations."""
    out = {}
    for key, found in annotations.items():
        card = card_of(found)
        if card is not None:
            out[key] = (card, held_amount(found))
    return out


def mixes_whole_and_shared(pod: Mapping[str, Any]) -> list[str]:
    """Names of containers that ask both whole GPUs and shared GPU memory (refused: the two
    device plugins would each hand the container a card)."""
    out = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
        if GPU in asked and SHARED_GPU_MEMORY in asked:
            out.append(str(container.get("name") or ""))
    return out


def card_shortfall(amount: int, candidates: Sequence[NodeCards]) -> str:
    """Why a pod asking `amount` of one card's memory fits on no card of these nodes."""
    head = f"needs {amount} {SHARED_GPU_MEMORY} on one GPU card"
    if not candidates or not any(cards.capacity for cards in candidates):
        return f"{head}; none of the nodes it may use has GPU cards for sharing"
    largest = max((size, cards.node) for cards in candidates for size in cards.capacity)
    if amount > largest[0]:
        return f"{head}; the largest card of the nodes it may use holds {largest[0]} ({largest[1]}): it can never fit"
    most = max(((cards.free(card), cards.node, card) for cards in candidates for card in range(len(cards.capacity))),
               key=lambda found: found[0])
    split = max(candidates, key=lambda cards: sum(cards.free(c) for c in range(len(cards.capacity))))
    split_free = [split.free(c) for c in range(len(split.capacity))]
    note = ""
    if sum(split_free) >= amount:
        note = f"; {split.node} has {sum(split_free)} free in all, split {' + '.join(map(str, split_free))} across cards"
    return f"{head}; the most free on one card is {most[0]} ({most[1]} card {most[2]}){note}"


# ---- policies ------------------------------------------------------------------------------

#: Chooses, for a pod asking `amount` of one card's memory, a (node, card) among the candidates
#: (nodes that already pass the per-node fit), or None when no card holds it. Called as
#: policy(amount, candidates, workload, cpu_milli=<the pod's CPU request>).
CardPolicy = Callable[..., "tuple[str, int] | None"]
#: Optionally, the node for a pod asking `gpus` whole cards among candidates (FGD's whole_node):
#: called as policy(gpus, candidates, workload, cpu_milli=...), None when none has that many idle.
WholeGpuPolicy = Callable[..., "str | None"]


def best_fit(amount: int, candidates: Sequence[NodeCards], workload: Workload = (),
             cpu_milli: int = 0) -> tuple[str, int] | None:
    """The tightest card: least memory left after the pod (ties: node name, then card index).
    The extender's allocateGPUID does the same within one node."""
    best: tuple[int, str, int] | None = None
    for cards in candidates:
        for card in cards.fits(amount):
            key = (cards.free(card) - amount, cards.node, card)
            if best is None or key < best:
                best = key
    return None if best is None else (best[1], best[2])


def random_fit(seed: int = 0) -> CardPolicy:
    """A policy choosing uniformly among the cards that fit, from its own seeded generator."""
    rng = random.Random(seed)

    def choose(amount: int, candidates: Sequence[NodeCards], workload: Workload = (),
               cpu_milli: int = 0) -> tuple[str, int] | None:
        options = [(cards.node, card) for cards in candidates for card in cards.fits(amount)]
        return rng.choice(options) if options else None

    return choose


#: The policies by name are `ganggate.controller.config.card_policy_named`'s ("fgd" lives in
#: ganggate.core.placement.gpushare_fgd, which imports this module, so this one cannot name it).
#: The policy the controller uses unless told otherwise: FGD, which allocated at least as many
#: GPUs as best-fit at every point of every list of the benchmark (docs/gpu-sharing.md).
DEFAULT_POLICY = "fgd"

__all__ = [
    "CardPolicy",
    "DEFAULT_POLICY",
    "NodeCards",
    "PodShape",
    "QuantityError",
    "WholeGpuPolicy",
    "Workload",
    "best_fit",
    "card_of",
    "card_shortfall",
    "cards_of",
    "decision_annotations",
    "equal_cards",
    "held_amount",
    "mixes_whole_and_shared",
    "node_cards",
    "node_totals",
    "random_fit",
    "shared_amount",
]
