"""One pod as the controller sees it: its request, gang annotations, gates and binding.

Read from a pod object once per watch event (`PodInfo.from_pod`); the gang bookkeeping
(`ganggate.core.gangs`) and the cluster picture (`ganggate.core.cluster`) both hold these, so
it sits below both of them. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from datetime import datetime
from typing import Mapping

from ganggate.contract import (
    DECISION_ANNOTATION,
    DEFAULT_MAX_POD_NUM,
    ContractError,
    GangSpec,
    has_gate,
    parse_gang,
    parse_timeout,
)
from ganggate.core.gpushare import QuantityError, card_of, held_amount, shared_amount
from ganggate.core.nodematch import selection_key
from ganggate.core.resources import GPU, Resources, gpus, pod_requests

TERMINATED_PHASES = ("Succeeded", "Failed")


def parse_time(value: object) -> float:
    """An RFC 3339 timestamp as epoch seconds (0.0 when absent or unreadable)."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def json_annotation(annotations: Mapping[str, str], key: str) -> dict | None:
    """The JSON object a ganggate annotation records, or None when absent or not an object."""
    raw = annotations.get(key)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _disruption(pod: Mapping) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "Disrupted")
    return None


def _timeout(annotations: Mapping[str, str]) -> int | None:
    value = parse_timeout(annotations)
    return value if isinstance(value, int) else None


def _shared_gpu(pod: Mapping) -> int:
    """The shared GPU memory the pod asks; 0 when unreadable (the webhook denies such pods)."""
    try:
        return shared_amount(pod)
    except QuantityError:
        return 0


def _gpu_card(annotations: Mapping[str, str]) -> tuple[int, int] | None:
    card = card_of(annotations)
    return None if card is None else (card, held_amount(annotations))


@dataclass
class PodInfo:
    """What the controller needs to know of one pod."""

    uid: str
    namespace: str
    name: str
    key: str
    request: Resources
    priority: int
    created: float
    gang: GangSpec | ContractError | None
    gated: bool
    node_name: str | None
    phase: str
    decision: dict | None
    scheduler_name: str
    owned: bool
    raw: dict
    #: Equal for pods that may use exactly the same nodes (selector, affinity, tolerations).
    constraint_key: str = ""
    #: Any scheduling gate at all (ganggate's or another system's, e.g. Kueue's).
    has_gates: bool = False
    #: metadata.deletionTimestamp is set: the pod is going away (graceful deletion). Until the
    #: DELETED event a bound one still holds its requests on its node, as the scheduler counts
    #: it (its NodeInfo keeps every assigned pod until the pod object is gone), but it is no
    #: longer a member of its gang: a replacement may already exist.
    terminating: bool = False
    #: The reason of the pod's DisruptionTarget condition (status True), when it has one:
    #: PreemptionByScheduler, DeletionByTaintManager, EvictionByEvictionAPI, DeletionByPodGC,
    #: TerminationByKubelet (k8s.io/api/core/v1 DisruptionTarget reasons).
    disruption: str | None = None
    #: group-timeout-seconds, when valid and set.
    timeout_seconds: int | None = None
    #: Shared GPU memory asked (aliyun.com/gpu-mem, whole units of the node's unit; 0: none).
    shared_gpu: int = 0
    #: The (card index, amount) the pod's gpushare annotations record, when it has a card.
    gpu_card: tuple[int, int] | None = None

    @cached_property
    def gpu(self) -> int:
        """GPU amount (milli) of the request, worked out once (the planner asks it per node tried)."""
        return gpus(self.request)

    @cached_property
    def gpu_resources(self) -> tuple[str, ...]:
        """The GPU resources (every name */gpu) the pod asks a positive amount of."""
        return tuple(k for k, v in self.request.items() if v > 0 and (k == GPU or k.endswith("/gpu")))

    @property
    def terminated(self) -> bool:
        return self.phase in TERMINATED_PHASES

    @classmethod
    def from_pod(cls, pod: dict, max_pod_num: int = DEFAULT_MAX_POD_NUM) -> "PodInfo":
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        namespace = meta.get("namespace") or "default"
        name = meta.get("name") or ""
        return cls(
            uid=meta.get("uid") or "",
            namespace=namespace,
            name=name,
            key=f"{namespace}/{name}",
            request=pod_requests(pod),
            priority=int(spec.get("priority") or 0),
            created=parse_time(meta.get("creationTimestamp")),
            gang=parse_gang(annotations, max_pod_num),
            gated=has_gate(spec),
            node_name=spec.get("nodeName") or None,
            phase=(pod.get("status") or {}).get("phase") or "Pending",
            decision=json_annotation(annotations, DECISION_ANNOTATION),
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            owned=any(
                isinstance(ref, Mapping) and ref.get("controller") is True
                for ref in meta.get("ownerReferences") or []
            ),
            raw=pod,
            constraint_key=selection_key(pod),
            has_gates=bool(spec.get("schedulingGates")),
            terminating=bool(meta.get("deletionTimestamp")),
            disruption=_disruption(pod),
            timeout_seconds=_timeout(annotations),
            shared_gpu=_shared_gpu(pod),
            gpu_card=_gpu_card(annotations),
        )

    @property
    def member(self) -> bool:
        """Counts toward its gang: neither terminated nor being deleted."""
        return not self.terminated and not self.terminating

    @property
    def schedulable_pending(self) -> bool:
        """Unbound, ungated, alive and not being deleted (the scheduler skips a pod with a
        deletionTimestamp): a scheduler may bind it at any moment."""
        return not self.node_name and not self.has_gates and self.member
