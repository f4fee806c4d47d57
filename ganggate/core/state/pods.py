"""One pod as the controller sees it: its request, gang annotations, gates and binding.

Read from a pod object once per watch event (`PodInfo.from_pod`); the gang bookkeeping
(`ganggate.core.state.gangs`) and the cluster picture (`ganggate.core.state.cluster`) both hold these, so
it sits below both of them. Pure: no I/O.

Compact on purpose (issue #11: 100,000 pods): the pod object is not kept, only the fields
decisions and the shell read; values many pods share (requests, node selection, gang specs,
gates, owner references, namespaces) are one object each, not one per pod (`Shared`), and what
a pod's spec decides is read once per distinct spec (`SpecCache`), not once per pod.

Why this module is long: PodInfo is made of the shared pieces defined here (PodTraits,
SpecFacts, the caches that share them); apart, each would reach into the others' privates.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar, overload

from ganggate.contract import (
    DECISION_ANNOTATION,
    DEFAULT_MAX_POD_NUM,
    GATE_NAME,
    GROUP_NAME,
    SOLO_ANNOTATION,
    ContractError,
    GangSpec,
    parse_gang,
    parse_timeout,
)
from ganggate.core.fit.gpushare import QuantityError, card_of, held_amount, shared_amount
from ganggate.core.fit.nodematch import canonical_json, selection_key
from ganggate.core.fit.resources import GPU, Resources, gpus, pod_requests
from ganggate.core.state.dra import pod_claim_refs

TERMINATED_PHASES = ("Succeeded", "Failed")
#: A preemptor's reservation, written on its pods (read by core.reservation; defined here,
#: below it, because PodInfo keeps the annotation's value).
PREEMPTION_ANNOTATION = "ganggate.io/preemption"
# Per-pod identity that the pods of one template differ by: the Job controller gives each pod of
# an Indexed Job the hostname "<job-name>-<index>" (kubernetes/enhancements
# keps/sig-apps/2214-indexed-job/README.md, "Pod detail"); nodeName is empty on a gated pod.
IDENTITY_SPEC_FIELDS = ("hostname", "nodeName")


_Key = TypeVar("_Key", bound=Hashable)
_Made = TypeVar("_Made")


class Shared:
    """One object per distinct value, for values many pods repeat (a Job's pods share their
    request, selection, owner): `one(key, make)` returns the object kept for `key`, making it
    on first sight. Bounded: past `limit` entries it starts over (sharing is lost for old
    values, never correctness: the objects are never modified)."""

    def __init__(self, limit: int = 20000) -> None:
        self.limit = limit
        self._kept: dict[Hashable, Any] = {}

    @overload
    def one(self, key: _Key) -> _Key: ...
    @overload
    def one(self, key: Hashable, make: Callable[[], _Made]) -> _Made: ...
    def one(self, key: Hashable, make: Callable[[], Any] | None = None) -> Any:
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            found = self._kept[key] = key if make is None else make()
        return found


_VALUES = Shared()  # hashable values: gates, gang specs, owner references, annotation values
_REQUESTS = Shared()  # request dicts, by their items
_SELECTIONS = Shared()  # node-selection objects, by constraint key
_LABELS = Shared()  # label dicts, by their items
_SHAPES = Shared(limit=1000)  # spec shapes: long strings, so few are kept past their pods
_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def _deadline(spec: Mapping[str, Any]) -> int | None:
    """spec.activeDeadlineSeconds when a positive integer (the API server refuses anything else)."""
    value = spec.get("activeDeadlineSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_time(value: object) -> float:
    """An RFC 3339 timestamp as epoch seconds (0.0 when absent or unreadable)."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def json_annotation(annotations: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """The JSON object a ganggate annotation records, or None when absent or not an object."""
    return json_object(annotations.get(key))


def json_object(text: str | None) -> dict[str, Any] | None:
    """A JSON object read from an annotation's value, or None when empty or not an object."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def spec_shape(spec: Mapping[str, Any]) -> str:
    """The pod's spec apart from its per-pod identity (IDENTITY_SPEC_FIELDS), as canonical JSON:
    pods of one template have the same (controller.release.patches validates one per shape)."""
    return canonical_json({k: v for k, v in spec.items() if k not in IDENTITY_SPEC_FIELDS})


def _disruption(pod: Mapping[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "Disrupted")
    return None


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    """PodScheduled is False with reason Unschedulable: the scheduler tried and found no node
    (k8s.io/api/core/v1 PodReasonUnschedulable; a gated pod's reason is SchedulingGated)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled":
            return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
    return False


def _timeout(annotations: Mapping[str, str]) -> int | None:
    value = parse_timeout(annotations)
    return value if isinstance(value, int) else None


def _shared_gpu(pod: Mapping[str, Any]) -> int:
    """The shared GPU memory the pod asks; 0 when unreadable (the webhook denies such pods)."""
    try:
        return shared_amount(pod)
    except QuantityError:
        return 0


def _gpu_card(annotations: Mapping[str, str]) -> tuple[int, int] | None:
    card = card_of(annotations)
    return None if card is None else (card, held_amount(annotations))


def _text(value: object) -> str:
    """A string many objects repeat (namespace, node, phase, label), one copy of it."""
    return sys.intern(value) if isinstance(value, str) else ""


def _gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the pod's scheduling gates in order ("" for an entry without one)."""
    names = tuple(_text(g.get("name")) if isinstance(g, Mapping) else "" for g in spec.get("schedulingGates") or [])
    return _VALUES.one(names)


def _controller_ref(meta: Mapping[str, Any]) -> Mapping[str, str] | None:
    """The pod's controller ownerReference (apiVersion, kind, name, uid as present), or None.
    Only one reference may have controller set (ValidateOwnerReferences in
    k8s.io/apimachinery/pkg/api/validation/objectmeta.go), so the first is the one."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            items = tuple((k, ref[k]) for k in ("apiVersion", "kind", "name", "uid") if k in ref)
            return _VALUES.one(("owner", items), functools.partial(dict, items))
    return None


def _selection(spec: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The node-selection part of the spec (nodeSelector, required node affinity,
    tolerations), shaped as a pod so nodematch reads it; one object per constraint key."""
    def make() -> dict[str, Any]:
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        part: dict[str, Any] = {"tolerations": spec.get("tolerations") or []}
        if spec.get("nodeSelector") is not None:
            part["nodeSelector"] = spec["nodeSelector"]
        if required:
            part["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        return {"spec": part}
    return _SELECTIONS.one(key, make)


def _labels(meta: Mapping[str, Any]) -> Mapping[str, str]:
    labels = meta.get("labels") or {}
    if not labels:
        return _NO_LABELS
    items = tuple((_text(k), _text(v)) for k, v in labels.items())
    return _LABELS.one(items, lambda: dict(items))


def _traits(meta: Mapping[str, Any], annotations: Mapping[str, str], owner: Mapping[str, str] | None,
            facts: SpecFacts) -> PodTraits:
    """The pod's PodTraits, shared with every pod that has the same."""
    labels = _labels(meta)
    group_name = annotations.get(GROUP_NAME)
    gated = GATE_NAME in facts.gates
    values: dict[str, Any] = dict(
        preemption_policy=facts.preemption_policy,
        gates=facts.gates,
        group_name=_text(group_name) if group_name is not None else None,
        decided=DECISION_ANNOTATION in annotations,
        solo=SOLO_ANNOTATION in annotations,
        reservation=annotations.get(PREEMPTION_ANNOTATION),
        has_annotations=meta.get("annotations") is not None,
        shape=facts.shape if gated else "",
    )
    key = (tuple(labels.items()), None if owner is None else tuple(owner.items()), facts.constraint_key,
           *values.values())
    return _TRAITS.one(key, lambda: PodTraits(labels=labels, controller_ref=owner, selection=facts.selection,
                                              **values))


@dataclass(frozen=True, slots=True, eq=False)
class SpecFacts:
    """What PodInfo reads from a pod's spec alone, its identity fields apart: the same for every
    pod of one template, so `SpecCache` works it out once per distinct spec."""

    request: Resources
    gpu: int
    gpu_resources: tuple[str, ...]
    constraint_key: str
    selection: Mapping[str, Any]
    gates: tuple[str, ...]
    shared_gpu: int
    priority: int
    scheduler_name: str
    preemption_policy: str | None
    #: spec_shape(spec).
    shape: str
    #: spec.resourceClaims as (entry, "template" | "claim", name) (core.state.dra).
    claims: tuple[tuple[str, str, str], ...] = ()


def _read_spec(pod: Mapping[str, Any], spec: Mapping[str, Any], shape: str) -> SpecFacts:
    """SpecFacts read from the spec itself (what SpecCache does with a spec not seen lately)."""
    request = pod_requests(pod)
    request = _REQUESTS.one(tuple(request.items()), lambda: request)
    constraint_key = _VALUES.one(selection_key(pod))
    return SpecFacts(
        request=request,
        gpu=_VALUES.one(gpus(request)),
        gpu_resources=_VALUES.one(tuple(k for k, v in request.items() if v > 0 and (k == GPU or k.endswith("/gpu")))),
        constraint_key=constraint_key,
        selection=_selection(spec, constraint_key),
        gates=_gates(spec),
        shared_gpu=_shared_gpu(pod),
        priority=int(spec.get("priority") or 0),
        scheduler_name=_text(spec.get("schedulerName") or "default-scheduler"),
        preemption_policy=_text(spec.get("preemptionPolicy")) or None,
        shape=_SHAPES.one(shape),
        claims=_VALUES.one(pod_claim_refs(spec)) if spec.get("resourceClaims") else (),
    )


class SpecCache:
    """SpecFacts by spec: a pod whose spec (identity fields apart) equals one seen lately gets
    that one's facts without reading its spec again, where a relist or an event would otherwise
    parse the requests and write the canonical JSON of every pod (issue #11: 100,000 pods).

    Exact: a hit needs `==` on the whole spec, and equal specs read alike. (`==` also equates
    1, 1.0 and true, which canonical JSON does not; the API server serves each spec field with
    one type (k8s.io/api/core/v1 types.go), so two served specs never differ that way.)
    Candidates are looked up by a hint pods of one template share (namespace, owner, gang), the
    last `per_hint` distinct specs each; a wrong hint costs a miss, never a wrong answer. What is
    kept to compare with is a copy (decoded from the shape), never the caller's objects, so a
    pod object changed in place later cannot change an answer. Bounded: past `limit` hints it
    starts over."""

    def __init__(self, limit: int = 512, per_hint: int = 4) -> None:
        self.limit, self.per_hint = limit, per_hint
        self._seen: dict[Hashable, list[tuple[dict[str, Any], SpecFacts]]] = {}

    def facts(self, pod: Mapping[str, Any], spec: Mapping[str, Any], hint: Hashable) -> SpecFacts:
        """The SpecFacts of `pod`, whose spec is `spec`; `hint` picks the specs compared with."""
        if any(name in spec for name in IDENTITY_SPEC_FIELDS):
            spec = {k: v for k, v in spec.items() if k not in IDENTITY_SPEC_FIELDS}
        seen = self._seen.get(hint)
        if seen is None:
            if len(self._seen) >= self.limit:
                self._seen.clear()
            seen = self._seen[hint] = []
        for kept, facts in seen:
            if kept == spec:
                return facts
        shape = canonical_json(spec)
        facts = _read_spec(pod, spec, shape)
        seen.insert(0, (json.loads(shape), facts))
        del seen[self.per_hint:]
        return facts


_SPECS = SpecCache()


@dataclass(frozen=True, slots=True, eq=False)
class PodTraits:
    """The parts of a pod many pods repeat that decisions in a round do not read: kept once
    per distinct combination (PodInfo.from_pod shares them), so a pod costs one slot for all."""

    #: metadata.labels (PodDisruptionBudget selectors read them).
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    #: The controller ownerReference: apiVersion, kind, name, uid (as present), or None.
    controller_ref: Mapping[str, str] | None = None
    #: spec.preemptionPolicy (set from the PriorityClass at admission), when set.
    preemption_policy: str | None = None
    #: The node-selection part of the spec in a pod's shape (spec.nodeSelector, the required
    #: node affinity, spec.tolerations), for nodematch: shared by pods of one constraint_key.
    selection: Mapping[str, Any] = field(default_factory=lambda: {"spec": {}})
    #: The names of spec.schedulingGates, in order (a release patch removes ours by index).
    gates: tuple[str, ...] = ()
    #: The annotations ganggate reads beyond the gang's: group-name as written (also when the
    #: gang does not parse), whether a decision is recorded at all, gang-of-one, and the
    #: preemption reservation's JSON.
    group_name: str | None = None
    decided: bool = False
    solo: bool = False
    reservation: str | None = None
    #: Whether metadata.annotations is present (a release patch adds the map or a key to it).
    has_annotations: bool = False
    #: spec_shape() of a gated pod ("" for others: only gated pods are released), for the
    #: release's one dry run per shape.
    shape: str = ""


_NO_TRAITS = PodTraits()
_TRAITS = Shared()  # PodTraits, by the values they hold


@dataclass(slots=True)
class PodInfo:
    """What the controller needs to know of one pod (never modified once made)."""

    uid: str
    namespace: str
    #: "<namespace>/<name>" (the name is read off it: one string per pod, not two).
    key: str
    request: Resources
    priority: int
    created: float
    gang: GangSpec | ContractError | None
    gated: bool
    node_name: str | None
    phase: str
    decision: dict[str, Any] | None
    scheduler_name: str
    #: Equal for pods that may use exactly the same nodes (selector, affinity, tolerations).
    constraint_key: str = ""
    #: metadata.deletionTimestamp is set: the pod is going away (graceful deletion). Until the
    #: DELETED event a bound one still holds its requests on its node, as the scheduler counts
    #: it (its NodeInfo keeps every assigned pod until the pod object is gone), but it is no
    #: longer a member of its gang: a replacement may already exist.
    terminating: bool = False
    #: The reason of the pod's DisruptionTarget condition (status True), when it has one:
    #: PreemptionByScheduler, DeletionByTaintManager, EvictionByEvictionAPI, DeletionByPodGC,
    #: TerminationByKubelet (k8s.io/api/core/v1 DisruptionTarget reasons).
    disruption: str | None = None
    #: The scheduler reported it cannot place the pod now (PodScheduled False, reason
    #: Unschedulable): for a released member pinned to a node, see core.policy.planloss.
    unschedulable: bool = False
    #: group-timeout-seconds, when valid and set.
    timeout_seconds: int | None = None
    #: Shared GPU memory asked (aliyun.com/gpu-mem, whole units of the node's unit; 0: none).
    shared_gpu: int = 0
    #: The (card index, amount) the pod's gpushare annotations record, when it has a card.
    gpu_card: tuple[int, int] | None = None
    #: What the pods of one template repeat and only the shell or rare checks read (labels,
    #: owner, selection, gates, annotations, shape): one shared PodTraits, read via properties.
    traits: PodTraits = field(default_factory=lambda: _NO_TRAITS)
    #: GPU amount (milli) of the request, worked out once (the planner asks it per node tried).
    gpu: int = 0
    #: The GPU resources (every name */gpu) the pod asks a positive amount of.
    gpu_resources: tuple[str, ...] = ()
    #: spec.activeDeadlineSeconds, when set: the kubelet ends the pod that long after its
    #: status.startTime (pkg/kubelet/active_deadline.go), a run-time bound the guard reads.
    deadline_seconds: int | None = None
    #: status.startTime as epoch seconds (0.0: not started).
    started: float = 0.0
    #: status.nominatedNodeName: where the scheduler holds room for it (set by a release's
    #: nomination or by scheduler preemption).
    nominated_node: str | None = None
    #: spec.resourceClaims as (entry, "template" | "claim", name), and the DRA devices they ask
    #: that ClusterState added to `request` (core.state.dra).
    claims: tuple[tuple[str, str, str], ...] = ()
    dra_demand: Resources | None = None

    labels = property(lambda self: self.traits.labels)
    controller_ref = property(lambda self: self.traits.controller_ref)
    preemption_policy = property(lambda self: self.traits.preemption_policy)
    selection = property(lambda self: self.traits.selection)
    gates = property(lambda self: self.traits.gates)
    group_name = property(lambda self: self.traits.group_name)
    decided = property(lambda self: self.traits.decided)
    solo = property(lambda self: self.traits.solo)
    reservation = property(lambda self: self.traits.reservation)
    has_annotations = property(lambda self: self.traits.has_annotations)
    shape = property(lambda self: self.traits.shape)

    @property
    def name(self) -> str:
        return self.key[len(self.namespace) + 1:]

    @property
    def owned(self) -> bool:
        """It has a controller (an ownerReference with controller: true)."""
        return self.controller_ref is not None

    @property
    def has_gates(self) -> bool:
        """Any scheduling gate at all (ganggate's or another system's, e.g. Kueue's)."""
        return bool(self.gates)

    @property
    def terminated(self) -> bool:
        return self.phase in TERMINATED_PHASES

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], max_pod_num: int = DEFAULT_MAX_POD_NUM) -> PodInfo:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        namespace = _text(meta.get("namespace") or "default")
        name = meta.get("name") or ""
        gang = parse_gang(annotations, max_pod_num)
        owner = _controller_ref(meta)
        facts = _SPECS.facts(pod, spec, (namespace, owner and owner.get("uid"), annotations.get(GROUP_NAME)))
        return cls(
            uid=meta.get("uid") or "",
            namespace=namespace,
            key=f"{namespace}/{name}",
            request=facts.request,
            priority=facts.priority,
            created=_VALUES.one(parse_time(meta.get("creationTimestamp"))),
            gang=_VALUES.one(gang) if isinstance(gang, GangSpec) else gang,
            gated=GATE_NAME in facts.gates,
            node_name=_text(spec.get("nodeName")) or None,
            phase=_text((pod.get("status") or {}).get("phase") or "Pending"),
            decision=json_annotation(annotations, DECISION_ANNOTATION),
            scheduler_name=facts.scheduler_name,
            constraint_key=facts.constraint_key,
            terminating=bool(meta.get("deletionTimestamp")),
            disruption=_disruption(pod),
            unschedulable=_unschedulable(pod),
            timeout_seconds=_timeout(annotations),
            shared_gpu=facts.shared_gpu,
            gpu_card=_gpu_card(annotations),
            traits=_traits(meta, annotations, owner, facts),
            gpu=facts.gpu,
            gpu_resources=facts.gpu_resources,
            deadline_seconds=_deadline(spec),
            started=parse_time((pod.get("status") or {}).get("startTime")),
            nominated_node=_text((pod.get("status") or {}).get("nominatedNodeName")) or None,
            claims=facts.claims,
        )

    @property
    def ends_by(self) -> float | None:
        """When the kubelet ends the pod at the latest (startTime + activeDeadlineSeconds);
        None when either is unknown."""
        if self.deadline_seconds is None or not self.started:
            return None
        return self.started + self.deadline_seconds

    @property
    def member(self) -> bool:
        """Counts toward its gang: neither terminated nor being deleted."""
        return not self.terminated and not self.terminating

    @property
    def schedulable_pending(self) -> bool:
        """Unbound, ungated, alive and not being deleted (the scheduler skips a pod with a
        deletionTimestamp): a scheduler may bind it at any moment."""
        return not self.node_name and not self.has_gates and self.member
