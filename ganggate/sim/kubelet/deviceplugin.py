"""kubesim's stand-in for the gpushare device plugin: which card a pod's GPU memory is on, and whether it fits.

A node with cards advertises `aliyun.com/gpu-mem` (all its cards' memory, in the plugin's unit)
and `aliyun.com/gpu-count` (cards), as AliyunContainerService/gpushare-device-plugin
pkg/gpu/nvidia/const.go names them; cards are of equal size, node total / count, as
gpushare-scheduler-extender pkg/cache/nodeinfo.go (NewNodeInfo) assumes. The scheduler sees only
those node-level sums. The pod says which card in its annotation `ALIYUN_COM_GPU_MEM_IDX`; its
amount is the sum of its containers' `aliyun.com/gpu-mem` limits (device plugin podutils.go
getGPUMemoryFromPodResource).

`CardLedger` is the kubelet side: the pods it admitted, per node and card. `admit` refuses a pod
whose card index is missing or out of range, that is not an assumed pod (assume time set,
`ALIYUN_COM_GPU_MEM_ASSIGNED` "false": podutils.go isGPUMemoryAssumedPod), or that would
oversubscribe its card, or a card given whole. The real plugin is softer: it answers such a pod
with an "error response" (allocate.go buildErrResponse: NVIDIA_VISIBLE_DEVICES
"no-gpu-has-...-to-run"), so the container starts without a GPU and fails later; kubesim fails the
pod at admission instead, so a placement mistake of the controller shows at once. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ganggate.sim.api.gpushare import GPU_COUNT, GPU_MEM  # re-exported: tests read them here
from ganggate.sim.apimachinery.quantity import QuantityError, value
from ganggate.sim.helpers.podrequests import resource_list

WHOLE_GPU = "nvidia.com/gpu"
CARD_INDEX = "ALIYUN_COM_GPU_MEM_IDX"
POD_AMOUNT = "ALIYUN_COM_GPU_MEM_POD"
ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"

# pkg/kubelet/cm/admission/errors.go: a failed Allocate rejects the pod with this reason and
# "Allocate failed due to %v, which is unexpected"; pkg/kubelet/kubelet.go rejectPod prefixes
# "Pod was rejected: " and sets phase Failed.
REJECT_REASON = "UnexpectedAdmissionError"


@dataclass(frozen=True)
class Cards:
    """A node's shared cards: how many, and the memory of each (node total // count)."""

    count: int
    per_card: int


def node_cards(node: Mapping) -> Cards | None:
    """The node's cards from its allocatable `aliyun.com/gpu-count` and `aliyun.com/gpu-mem`; None without."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        count = value(resource_list({GPU_COUNT: allocatable.get(GPU_COUNT, 0)})[GPU_COUNT])
        total = value(resource_list({GPU_MEM: allocatable.get(GPU_MEM, 0)})[GPU_MEM])
    except QuantityError:
        return None
    if count <= 0 or total <= 0:
        return None
    return Cards(count, total // count)


def _limits_sum(pod: Mapping, resource: str) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if resource in limits:
            try:
                total += value(resource_list({resource: limits[resource]})[resource])
            except QuantityError:
                continue
    return total


def shared_amount(pod: Mapping) -> int:
    """The pod's GPU memory: its containers' `aliyun.com/gpu-mem` limits summed (0: not a sharing pod)."""
    return _limits_sum(pod, GPU_MEM)


def whole_gpus(pod: Mapping) -> int:
    """The whole GPUs (`nvidia.com/gpu` limits) the pod's containers ask, summed."""
    return _limits_sum(pod, WHOLE_GPU)


def card_index(pod: Mapping) -> int | None:
    """The card in `ALIYUN_COM_GPU_MEM_IDX` (a decimal integer, as strconv.Atoi reads it), or None."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(CARD_INDEX)
    text = str(raw).strip() if raw is not None else ""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit():
        return None
    return int(text)


def assumed(pod: Mapping) -> bool:
    """isGPUMemoryAssumedPod: an assume time is set and the assigned flag is "false"."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return ASSUME_TIME in annotations and annotations.get(ASSIGNED) == "false"


@dataclass
class _NodeUse:
    shared: dict[int, dict[str, int]] = field(default_factory=dict)  # card -> pod key -> amount
    whole: dict[str, int] = field(default_factory=dict)  # pod key -> whole cards


class CardLedger:
    """The pods admitted on each node's cards, as the device plugins on those nodes hold them."""

    def __init__(self) -> None:
        self._nodes: dict[str, _NodeUse] = {}
        self._where: dict[str, str] = {}  # pod key -> node

    def used(self, node: str, card: int) -> int:
        use = self._nodes.get(node)
        return sum((use.shared.get(card) or {}).values()) if use else 0

    def admit(self, key: str, pod: Mapping, node: Mapping) -> str | None:
        """Record the pod on its card (or its whole cards); return why the device plugin refuses it, else None.

        A pod already recorded is admitted again without change (a restarted kubelet re-reads it)."""
        if key in self._where:
            return None
        amount, whole = shared_amount(pod), whole_gpus(pod)
        cards = node_cards(node)
        name = node["metadata"]["name"]
        if amount <= 0 and (whole <= 0 or cards is None):
            return None  # nothing of ours: other device plugins and resources are not checked here
        if cards is None:
            return f"node {name} advertises no {GPU_COUNT} and {GPU_MEM}"
        use = self._nodes.setdefault(name, _NodeUse())
        busy = {card for card, pods in use.shared.items() if pods}
        whole_taken = sum(use.whole.values())
        if amount <= 0:
            if whole_taken + whole + len(busy) > cards.count:
                return (f"{whole} whole GPU(s) requested but only {cards.count - whole_taken - len(busy)} of the "
                        f"{cards.count} cards of node {name} are neither given whole nor shared")
            use.whole[key] = whole
            self._where[key] = name
            return None
        if whole > 0:
            return f"the pod asks both {WHOLE_GPU} and {GPU_MEM}"
        card = card_index(pod)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if card is None:
            return f"annotation {CARD_INDEX}={annotations.get(CARD_INDEX)!r} is not a card index"
        if not 0 <= card < cards.count:
            return f"card index {card} is out of range: node {name} has {cards.count} card(s)"
        if not assumed(pod):
            return (f"not an assumed pod: {ASSUME_TIME} must be set and {ASSIGNED} \"false\" "
                    f"(got {annotations.get(ASSIGNED)!r})")
        if card not in busy and whole_taken + len(busy) + 1 > cards.count:
            return f"card {card} of node {name} is given whole to another pod"
        held = self.used(name, card)
        if held + amount > cards.per_card:
            return (f"card {card} of node {name} has {cards.per_card - held} of {cards.per_card} {GPU_MEM} free, "
                    f"the pod asks {amount}")
        use.shared.setdefault(card, {})[key] = amount
        self._where[key] = name
        return None

    def release(self, key: str) -> None:
        """Forget the pod (it finished, failed or was deleted): its memory is free again."""
        name = self._where.pop(key, None)
        use = self._nodes.get(name or "")
        if use is None:
            return
        use.whole.pop(key, None)
        for pods in use.shared.values():
            pods.pop(key, None)


UNIT_BYTES = {"GiB": 1 << 30, "MiB": 1 << 20}  # gpushare-device-plugin --memory-unit (GiB by default)


def parse_card_memory(text: str, unit: str = "GiB") -> int:
    """A card's memory in the gpushare unit: "16Gi" -> 16 (GiB), "16Gi" -> 16384 (MiB); a bare number is
    already in the unit. ValueError when it is not a whole, positive number of units."""
    if unit not in UNIT_BYTES:
        raise ValueError(f"gpu memory unit {unit!r}: expected one of {', '.join(UNIT_BYTES)}")
    raw = str(text).strip()
    if raw.isdigit():
        amount = int(raw)
    else:
        try:
            nbytes = value(resource_list({"m": raw})["m"])
        except QuantityError as exc:
            raise ValueError(f"gpu memory per card {text!r}: {exc}") from None
        if nbytes % UNIT_BYTES[unit]:
            raise ValueError(f"gpu memory per card {text!r} is not a whole number of {unit}")
        amount = nbytes // UNIT_BYTES[unit]
    if amount <= 0:
        raise ValueError(f"gpu memory per card {text!r} must be positive")
    return amount
