"""AdmissionReview in, AdmissionReview out: the webhook's parsing and decisions, with no I/O.

The shapes follow k8s.io/api/admission/v1/types.go (AdmissionReview, AdmissionRequest,
AdmissionResponse). Everything here is pure so that it can be tested exhaustively; the
aiohttp shell in `webhook/server.py` only moves bytes and counts outcomes.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson  # parses a review 3-5x faster than json (bench/bench_webhook.py: server CPU per review)

from ganggate.admission.sharing import shares_gpu, sharing_problem, solo_annotations
from ganggate.admission.templates import WORKLOADS, pod_of, pod_templates
from ganggate.contract import (
    DEFAULT_MAX_POD_NUM,
    DEFAULT_SCHEDULER_NAMES,
    DEFAULT_SHARED_RESOURCES,
    GATE_NAME,
    GROUP_NAME,
    IMMUTABLE_ANNOTATIONS,
    ContractError,
    GangSpec,
    gang_annotations,
    has_gang_annotations,
    has_gate,
    parse_gang,
)
from ganggate.podgroups import GATED_FOR_ANNOTATION, conflicting_names, ganggate_admits, pod_group_name

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# The scheduler a pod gets when spec.schedulerName is empty
# (pkg/apis/core/v1/defaults.go SetDefaults_PodSpec: v1.DefaultSchedulerName).
DEFAULT_SCHEDULER = "default-scheduler"

# Outcomes, as counted by the metrics and logged.
GATED = "gated"  # allowed, with a patch that adds the gate
ALREADY_GATED = "already_gated"  # allowed, the gate is there already (reinvocation)
NOT_GANG = "not_gang"  # allowed: no gang annotations, another kind, another operation
OTHER_SCHEDULER = "other_scheduler"  # allowed untouched: a scheduler ganggate does not serve
UPDATE_OK = "update_ok"  # allowed: an update that leaves the gang annotations alone
DENIED = "denied"  # allowed: false
MALFORMED = "malformed"  # HTTP 400: not an AdmissionReview at all
WORKLOAD_OK = "workload_ok"  # allowed: a workload (Job, JobSet, ...) whose gang pod templates pass
OUTCOMES = (GATED, ALREADY_GATED, NOT_GANG, OTHER_SCHEDULER, UPDATE_OK, DENIED, MALFORMED, WORKLOAD_OK)


class MalformedReview(ValueError):
    """A body that is not a usable AdmissionReview; answered with HTTP 400."""


@dataclass(frozen=True)
class ReviewPolicy:
    """What the webhook accepts: the largest gang and the schedulers ganggate serves."""

    max_pod_num: int = DEFAULT_MAX_POD_NUM
    scheduler_names: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_SCHEDULER_NAMES))
    #: Shared GPU resources (docs/gpu-sharing.md): a pod asking one is gated, as a gang of one
    #: when it has no gang annotations, so that ganggate picks its card.
    shared_resources: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_SHARED_RESOURCES))
    #: Pods naming a PodGroup (ganggate.podgroups): gated when ganggate admits them.
    podgroups: str = "auto"
    native_gang_scheduling: bool = False


@dataclass(frozen=True)
class Decision:
    """The webhook's answer to one request, before it is wrapped into an AdmissionReview."""

    outcome: str
    allowed: bool = True
    patch: jsonpatch.JsonPatch | None = None
    code: int | None = None
    message: str | None = None


def parse_body(body: bytes | str) -> dict[str, Any]:
    """Decode and check an AdmissionReview body; raise MalformedReview saying what is wrong."""
    try:
        review = orjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:  # (orjson.JSONDecodeError is a ValueError)
        raise MalformedReview(f"body is not JSON: {exc}") from None
    return check_review(review)


def check_review(review: Any) -> dict[str, Any]:
    """Check the envelope of an already decoded AdmissionReview."""
    if not isinstance(review, dict):
        raise MalformedReview(f"body must be a JSON object (an AdmissionReview), not {type(review).__name__}")
    if review.get("apiVersion") != API_VERSION:
        raise MalformedReview(f"apiVersion must be {API_VERSION!r}, got {review.get('apiVersion')!r}")
    if review.get("kind") != KIND:
        raise MalformedReview(f"kind must be {KIND!r}, got {review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid is missing or not a non-empty string")
    for key in ("object", "oldObject"):
        value = request.get(key)
        if value is not None and not isinstance(value, dict):
            raise MalformedReview(f"request.{key} must be an object, not {type(value).__name__}")
    return review


def _is_pod(request: Mapping[str, Any]) -> bool:
    """True for the pods resource itself (not a subresource such as pods/status or pods/binding)."""
    kind = request.get("kind")
    if not isinstance(kind, Mapping) or kind.get("kind") != "Pod" or kind.get("group", "") != "":
        return False
    return not request.get("subResource")


def _section(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """A nested object that may be absent (empty) but must be an object when present."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedReview(f"{where}.{key} must be an object, not {type(value).__name__}")
    return value


def _annotations(pod: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    metadata = _section(pod, "metadata", where)
    return _section(metadata, "annotations", f"{where}.metadata")


def scheduler_name(spec: Mapping[str, Any]) -> str:
    """The scheduler a pod spec asks for; absent or empty counts as default-scheduler."""
    name = spec.get("schedulerName")
    if name is not None and not isinstance(name, str):
        raise MalformedReview(f"spec.schedulerName must be a string, not {type(name).__name__}")
    return name or DEFAULT_SCHEDULER


# The three shapes of the gate patch, built and checked by the jsonpatch library once at import
# (they are constant; building them per request cost half of a review's CPU time).
_GATE = {"name": GATE_NAME}
_PATCH_NEW_SPEC = jsonpatch.JsonPatch([{"op": "add", "path": "/spec", "value": {"schedulingGates": [_GATE]}}])
_PATCH_APPEND = jsonpatch.JsonPatch([{"op": "add", "path": "/spec/schedulingGates/-", "value": _GATE}])
# For an absent or null list: "add" creates or replaces the member (RFC 6902 section 4.1).
_PATCH_NEW_LIST = jsonpatch.JsonPatch([{"op": "add", "path": "/spec/schedulingGates", "value": [_GATE]}])


def encode_patch(patch: jsonpatch.JsonPatch) -> str:
    """A JSONPatch as an AdmissionReview response carries it: its JSON, base64-encoded."""
    return base64.b64encode(patch.to_string().encode()).decode()


# The three gate patches are constants: encoded once, not per review.
_ENCODED = {id(p): encode_patch(p) for p in (_PATCH_NEW_SPEC, _PATCH_APPEND, _PATCH_NEW_LIST)}


def gate_patch(spec: Mapping[str, Any] | None) -> jsonpatch.JsonPatch:
    """The JSONPatch that adds ganggate's gate, creating the list and keeping other gates."""
    if spec is None:
        return _PATCH_NEW_SPEC
    if isinstance(spec.get("schedulingGates"), list):
        return _PATCH_APPEND
    return _PATCH_NEW_LIST


def _deny(error: ContractError, code: int = 422) -> Decision:
    return Decision(outcome=DENIED, allowed=False, code=code, message=error.message())


def _solo_patch(pod: Mapping[str, Any], raw_spec: Mapping[str, Any] | None, request_uid: str) -> jsonpatch.JsonPatch:
    """The gate, plus the annotations that make a sharing pod a gang of one."""
    metadata = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else None
    return _with_annotations(pod, raw_spec, solo_annotations((metadata or {}).get("name"), request_uid))


def _with_annotations(pod: Mapping[str, Any], raw_spec: Mapping[str, Any] | None,
                      added: Mapping[str, str]) -> jsonpatch.JsonPatch:
    """The gate, plus these annotations (the map created if the pod has none)."""
    metadata = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else None
    ops = list(gate_patch(raw_spec).patch)
    if metadata is None:
        ops.append({"op": "add", "path": "/metadata", "value": {"annotations": added}})
    elif metadata.get("annotations") is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": added})
    else:
        ops += [{"op": "add", "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"), "value": value}
                for key, value in added.items()]
    return jsonpatch.JsonPatch(ops)


def decide_create(pod: Mapping[str, Any], policy: ReviewPolicy, request_uid: str = "") -> Decision:
    """Gate a valid gang pod (or a pod asking a shared GPU, as a gang of one), deny an invalid
    one, leave everything else alone."""
    annotations = _annotations(pod, "request.object")
    raw_spec = pod.get("spec")
    if raw_spec is not None and not isinstance(raw_spec, Mapping):
        raise MalformedReview(f"request.object.spec must be an object, not {type(raw_spec).__name__}")
    spec = raw_spec or {}
    sharing = bool(policy.shared_resources) and shares_gpu(spec, policy.shared_resources)
    if pod_group_name(pod) is not None and not sharing:
        if (problem := conflicting_names(pod)) is not None:
            return Decision(DENIED, allowed=False, code=422, message=problem)
        if not has_gang_annotations(annotations):
            return _decide_podgroup_pod(pod, spec, raw_spec, policy)
    if not sharing and not has_gang_annotations(annotations):
        return Decision(NOT_GANG)
    if scheduler_name(spec) not in policy.scheduler_names:
        return Decision(OTHER_SCHEDULER)
    if sharing:
        problem = sharing_problem(spec, policy.shared_resources)
        if problem is not None:
            return Decision(DENIED, allowed=False, code=422, message=problem)
        if not has_gang_annotations(annotations):
            node = spec.get("nodeName")
            if node:
                return Decision(DENIED, allowed=False, code=422, message=(
                    f"spec.nodeName={node!r} on a pod asking a shared GPU "
                    f"({', '.join(sorted(policy.shared_resources))}): ganggate picks its GPU card before the "
                    "pod is bound; use a nodeSelector instead"))
            if has_gate(spec):
                return Decision(ALREADY_GATED)
            return Decision(GATED, patch=_solo_patch(pod, raw_spec, request_uid))
    gang = parse_gang(annotations, policy.max_pod_num)
    if isinstance(gang, ContractError):
        return _deny(gang)
    assert isinstance(gang, GangSpec)
    node = spec.get("nodeName")
    if node:
        return Decision(
            DENIED,
            allowed=False,
            code=422,
            message=(
                f"spec.nodeName={node!r} on a pod with annotation {GROUP_NAME}={gang.name!r}: "
                "a gang pod must not be bound at creation, a bound pod cannot be gated"
            ),
        )
    gates = spec.get("schedulingGates")
    if gates is not None and not isinstance(gates, list):
        return Decision(
            DENIED, allowed=False, code=400, message=f"spec.schedulingGates={gates!r}: must be a list"
        )
    if has_gate(spec):
        return Decision(ALREADY_GATED)
    return Decision(GATED, patch=gate_patch(raw_spec))


def _decide_podgroup_pod(pod: Mapping[str, Any], spec: Mapping[str, Any], raw_spec: Mapping[str, Any] | None,
                         policy: ReviewPolicy) -> Decision:
    """A pod naming a PodGroup: gated when ganggate admits PodGroup pods (ganggate.podgroups),
    left alone for the scheduler's own gang plugin otherwise."""
    if scheduler_name(spec) not in policy.scheduler_names:
        return Decision(OTHER_SCHEDULER)
    if not ganggate_admits(policy.podgroups, policy.native_gang_scheduling):
        return Decision(NOT_GANG)
    group = pod_group_name(pod)
    if spec.get("nodeName"):
        return Decision(DENIED, allowed=False, code=422, message=(
            f"spec.nodeName={spec['nodeName']!r} on a pod of PodGroup {group!r}: a gang pod must not be bound at "
            "creation, a bound pod cannot be gated"))
    gates = spec.get("schedulingGates")
    if gates is not None and not isinstance(gates, list):
        return Decision(DENIED, allowed=False, code=400, message=f"spec.schedulingGates={gates!r}: must be a list")
    if has_gate(spec):
        return Decision(ALREADY_GATED)
    return Decision(GATED, patch=_with_annotations(pod, raw_spec, {GATED_FOR_ANNOTATION: str(group)}))


def decide_update(old: Mapping[str, Any], new: Mapping[str, Any], policy: ReviewPolicy) -> Decision:
    """Deny any update that adds, changes or removes a gang annotation; pass the rest untouched."""
    before = gang_annotations(_annotations(old, "request.oldObject"))
    after = gang_annotations(_annotations(new, "request.object"))
    if before == after:
        return Decision(UPDATE_OK)
    spec = old.get("spec")
    # spec.schedulerName is immutable, so the old pod tells whose pod this is.
    if isinstance(spec, Mapping) and scheduler_name(spec) not in policy.scheduler_names:
        return Decision(OTHER_SCHEDULER)
    for key in IMMUTABLE_ANNOTATIONS:
        if (key in before) != (key in after) or before.get(key) != after.get(key):
            was = "<absent>" if key not in before else repr(before[key])
            return _deny(
                ContractError(key, after.get(key), f"is immutable once the pod exists (was {was})")
            )
    raise AssertionError("unreachable: the annotations differ")  # pragma: no cover


def _workload(request: Mapping[str, Any]) -> tuple[str, str] | None:
    """(group, kind) of a workload whose pod templates the webhook checks (not a subresource)."""
    kind = request.get("kind")
    if not isinstance(kind, Mapping) or request.get("subResource"):
        return None
    key = (str(kind.get("group") or ""), str(kind.get("kind") or ""))
    return key if key in WORKLOADS else None


def template_decision(group: str, kind: str, obj: Mapping[str, Any], policy: ReviewPolicy) -> Decision:
    """The workload's decision: the first denial of a pod made of one of its templates (the pod's
    own message and code), else what its templates add up to."""
    outcomes = set()
    for _, template in pod_templates(group, kind, obj):
        try:
            decision = decide_create(pod_of(template), policy)
        except MalformedReview:
            continue  # a template of the wrong shape is the API server's validation to refuse
        if not decision.allowed:
            return decision
        outcomes.add(decision.outcome)
    if outcomes & {GATED, ALREADY_GATED}:
        return Decision(WORKLOAD_OK)
    return Decision(OTHER_SCHEDULER if OTHER_SCHEDULER in outcomes else NOT_GANG)


def decide_workload(request: Mapping[str, Any], group: str, kind: str, policy: ReviewPolicy) -> Decision:
    """Deny a workload CREATE or UPDATE whose pod template no pod could pass. An UPDATE that leaves
    a template's problem as it was (a label, a finalizer on a Job admitted while the webhook was
    down) passes: only the change is judged."""
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return Decision(NOT_GANG)
    decision = template_decision(group, kind, obj, policy)
    old = request.get("oldObject")
    if not decision.allowed and request.get("operation") == "UPDATE" and isinstance(old, Mapping):
        if template_decision(group, kind, old, policy).message == decision.message:
            return Decision(WORKLOAD_OK)
    return decision


def decide(request: Mapping[str, Any], policy: ReviewPolicy) -> Decision:
    """The decision for one checked AdmissionRequest (see check_review)."""
    if not _is_pod(request):
        workload = _workload(request)
        return decide_workload(request, *workload, policy) if workload else Decision(NOT_GANG)
    operation = request.get("operation")
    pod = request.get("object")
    if operation == "CREATE":
        if pod is None:
            raise MalformedReview("request.object is required for CREATE")
        return decide_create(pod, policy, str(request.get("uid") or ""))
    if operation == "UPDATE":
        old = request.get("oldObject")
        if pod is None or old is None:
            raise MalformedReview("request.object and request.oldObject are required for UPDATE")
        return decide_update(old, pod, policy)
    return Decision(NOT_GANG)


def response_for(review: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
    """Wrap a decision into the AdmissionReview answer, echoing apiVersion, kind and uid."""
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": decision.allowed}
    if decision.patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = _ENCODED.get(id(decision.patch)) or encode_patch(decision.patch)
    if not decision.allowed:
        response["status"] = {
            "status": "Failure",
            "code": decision.code,
            "reason": "Invalid" if decision.code == 422 else "BadRequest",
            "message": decision.message,
        }
    return {"apiVersion": review["apiVersion"], "kind": review["kind"], "response": response}


def review(body: bytes | str, policy: ReviewPolicy) -> tuple[dict[str, Any], Decision]:
    """Answer one AdmissionReview body; raise MalformedReview for a body that is not one."""
    checked = parse_body(body)
    decision = decide(checked["request"], policy)
    return response_for(checked, decision), decision


def describe(body_review: Mapping[str, Any]) -> str:
    """namespace/name of the reviewed object, for log lines (generateName when not named yet)."""
    request = body_review.get("request") or {}
    obj = request.get("object") or request.get("oldObject") or {}
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = request.get("name") or meta.get("name") or (f"{meta.get('generateName', '')}<generated>")
    namespace = request.get("namespace") or meta.get("namespace") or ""
    return f"{namespace}/{name}"
