"""kubesim's MutatingAdmissionPolicy plugin: CEL mutations applied in the API server, before the
mutating webhooks (pkg/kubeapiserver/options/plugins.go AllOrderedPlugins: MutatingAdmissionPolicy,
then MutatingAdmissionWebhook), sharing their reinvocation round.

It follows k8s.io/apiserver/pkg/admission/plugin/policy/mutating: dispatcher.go (dispatchInvocations:
matchConditions, each mutation in order, defaulting after each, reinvocation bookkeeping),
generic/policy_dispatcher.go (Dispatch: definition then binding matching, failurePolicy over the
errors, one Forbidden whose message is the first error's "policy '<p>' with binding '<b>' denied
request: <err>"), reinvocationcontext.go, patch/json_patch.go (a failed `test` leaves the object as
it was) and patch/smd.go (ApplyConfiguration: a structured merge that refuses atomic lists).
Matching (matchConstraints, bindings' matchResources, selectors) and the CEL activation are those of
ValidatingAdmissionPolicy (apiserver/admission/policy.py).

Known differences: policies run in name order and each policy's bindings in name order; params are
not supported (the registry refuses them); the ApplyConfiguration merge knows the pod's list-map keys
(apiserver/patch.py MERGE_KEYS) and set-lists (finalizers), and treats every other list as atomic, so
it may refuse a patch the real server's schema would merge; kubesim admits pods only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver import rfc6902
from ganggate.sim.apiserver.admission.cel import EvaluationError, evaluate_conditions
from ganggate.sim.apiserver.admission.cel_mutation import (
    JSON_PATCH_TYPE,
    OBJECT_TYPE,
    ObjectValue,
    evaluate_mutation,
    plain,
    type_name_errors,
)
from ganggate.sim.apiserver.admission.policy import PolicyChain, Request, Variables
from ganggate.sim.apiserver.admission.policy_plan import PreparedPolicy
from ganggate.sim.apiserver.patch import MERGE_KEYS
from ganggate.sim.apiserver.registry.mutatingadmissionpolicy import BINDING_KEY, POLICY_KEY
from ganggate.sim.apiserver.watch import clone

_SET_LISTS = ("finalizers",)  # listType=set of scalars: merged as a union


@dataclass
class ReinvocationContext:
    """policyReinvokeContext (reinvocationcontext.go) plus the request's shared should-reinvoke flag."""

    last_output: dict | None = None
    previously_invoked: set[tuple[str, str]] = field(default_factory=set)
    reinvoke: set[tuple[str, str]] = field(default_factory=set)
    should_reinvoke: bool = False

    def require_reinvoking_previously_invoked(self) -> None:
        self.reinvoke |= self.previously_invoked
        self.previously_invoked = set()


@dataclass(frozen=True)
class _PolicyError:
    policy: str
    binding: str | None
    message: str
    reason: str = ""
    fail: bool = True

    def text(self) -> str:
        if self.binding is not None:
            return f"policy '{self.policy}' with binding '{self.binding}' denied request: {self.message}"
        return f'policy "{self.policy}" denied request: {self.message}'


class MutationError(Exception):
    """One mutation could not be applied (a configuration error; failurePolicy decides)."""


class MutatingPolicyChain(PolicyChain):
    """Evaluates the stored MutatingAdmissionPolicies and bindings over one request."""

    policy_key, binding_key = POLICY_KEY, BINDING_KEY

    def __init__(self, list_objects: Callable[[str], list[dict]], count: Callable[[str], int],
                 get_namespace: Callable[[str], dict | None],
                 default: Callable[[Request, dict], None] | None = None,
                 last_write: Callable[[str], int] | None = None) -> None:
        super().__init__(list_objects, count, get_namespace, last_write)
        self._default_object = default

    def active(self) -> bool:
        """True when some policy is bound (otherwise nothing can apply)."""
        return bool(self._count(BINDING_KEY)) and bool(self._count(POLICY_KEY))

    def admit(self, request: Request, current: dict, context: ReinvocationContext, reinvoking: bool) -> dict:
        """The object after every matching policy's mutations; raises errors.ApiError to refuse."""
        if not self.active():
            return current
        if reinvoking and context.last_output is not None and current != context.last_output:
            # The webhooks changed the object since the policies last ran: reinvoke the eligible ones.
            context.require_reinvoking_previously_invoked()
        result = self._dispatch_mutations(request, current, context, reinvoking)
        context.last_output = result  # every later mutation makes a new object: no copy needed
        return result

    def _dispatch_mutations(self, request: Request, current: dict, context: ReinvocationContext,
                            reinvoking: bool) -> dict:
        plan = self._plan()
        problems: list[_PolicyError] = []
        dirty = False
        for policy, bound in plan.bound:  # policies in name order, each with its bindings in name order
            name = policy["metadata"]["name"]
            spec = policy.get("spec") or {}
            fail = spec.get("failurePolicy", "Fail") != "Ignore"
            if self._matches(self._with(request, current), spec.get("matchConstraints"), plan=plan) is not True:
                continue
            for binding in bound:
                binding_name = binding["metadata"]["name"]
                matched = self._matches(self._with(request, current), (binding.get("spec") or {}).get("matchResources"),
                                        binding=True, plan=plan)
                if isinstance(matched, str):
                    problems.append(_PolicyError(name, binding_name, f"failed to configure binding: {matched}", fail=fail))
                    continue
                if not matched:
                    continue
                current, applied = self._invoke(spec, name, binding_name, request, current, context, reinvoking,
                                                problems, fail, plan.prepared[id(policy)])
                dirty = dirty or applied
        if dirty:
            # dispatcher.go: a mutated (Dirty) object makes every eligible policy run again in the
            # reinvocation round, and asks for that round.
            context.require_reinvoking_previously_invoked()
            context.should_reinvoke = True
        failing = [p for p in problems if p.fail]
        if failing:
            raise self._mutation_refusal(request, failing)
        return current

    def _invoke(self, spec: Mapping[str, Any], policy: str, binding: str, request: Request, current: dict,
                context: ReinvocationContext, reinvoking: bool, problems: list[_PolicyError],
                fail: bool, prepared: PreparedPolicy) -> tuple[dict, bool]:
        """One (policy, binding) invocation: (the object after its mutations, whether any was applied)."""
        key = (policy, binding)
        activation = self._activation(self._with(request, current), prepared)
        activation["variables"] = Variables(prepared.variables, activation)
        conditions = spec.get("matchConditions") or []
        if conditions:
            matched = evaluate_conditions(conditions, activation)
            if matched.error is not None:
                problems.append(_PolicyError(policy, binding, matched.error, "Invalid", fail))
                return current, False
            if not matched.matches:
                return current, False
        if reinvoking and key not in context.reinvoke:
            return current, False
        before = current
        applied = False
        for mutation in spec.get("mutations") or []:
            activation = self._activation(self._with(request, current), prepared)
            activation["variables"] = Variables(prepared.variables, activation)
            try:
                patched = apply_mutation(mutation, current, activation)
            except MutationError as exc:
                problems.append(_PolicyError(policy, binding, str(exc), "Invalid", fail))
                continue
            if self._default_object is not None:
                self._default_object(request, patched)
            current = patched
            applied = True
        if current != before:
            context.require_reinvoking_previously_invoked()
            context.should_reinvoke = True
        if spec.get("reinvocationPolicy") == "IfNeeded":
            context.previously_invoked.add(key)
        return current, applied

    @staticmethod
    def _with(request: Request, current: dict) -> Request:
        return Request(request.operation, request.kind, request.resource, request.sub_resource, request.namespace,
                       request.name, current, request.old_obj, request.dry_run, request.user_info)

    @staticmethod
    def _mutation_refusal(request: Request, failing: list[_PolicyError]) -> errors.ApiError:
        """Dispatch's Forbidden: the first error's message and reason, every error as a cause."""
        resource, group = request.resource.get("resource", ""), request.resource.get("group", "")
        meta = (request.obj or {}).get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or request.name or ""
        first = failing[0]
        return errors.ApiError(403, first.reason or "Forbidden", first.text(), name=name, group=group, kind=resource,
                               causes=[errors.Cause("", "", p.text()) for p in failing])


def apply_mutation(mutation: Mapping[str, Any], current: dict, activation: Mapping[str, Any]) -> dict:
    """One mutation's result (a new object); MutationError says why it could not be applied."""
    patch_type = mutation.get("patchType")
    if patch_type == "JSONPatch":
        expression = str((mutation.get("jsonPatch") or {}).get("expression") or "")
        return _json_patch(expression, current, activation)
    expression = str((mutation.get("applyConfiguration") or {}).get("expression") or "")
    return _apply_configuration(expression, current, activation)


def _evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    try:
        return evaluate_mutation(expression, activation)
    except EvaluationError as exc:
        raise MutationError(str(exc)) from None


def _json_patch(expression: str, current: dict, activation: Mapping[str, Any]) -> dict:
    """patch/json_patch.go jsonPatcher.Patch."""
    value = _evaluate(expression, activation)
    if not isinstance(value, list):
        raise MutationError("type mismatch: JSONPatchType.expression should evaluate to array")
    operations = []
    for item in value:
        if not isinstance(item, ObjectValue) or item.type_name != JSON_PATCH_TYPE:
            raise MutationError("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch")
        operation: dict[str, Any] = {"op": str(item.get("op", "")), "path": str(item.get("path", ""))}
        if item.get("from"):
            operation["from"] = str(item["from"])
        if "value" in item:
            mismatches = type_name_errors(item["value"]) if isinstance(item["value"], ObjectValue) else []
            if mismatches:
                raise MutationError("type mismatch: " + "\n".join(mismatches))
            operation["value"] = plain(item["value"])
        operations.append(operation)
    # Applied as a webhook's patch is (both with gopkg.in/evanphx/json-patch.v4), to a copy: a
    # failed `test` leaves the object unpatched, any other failure is "JSON Patch: <error>".
    try:
        return rfc6902.apply(clone(current), operations)
    except rfc6902.TestFailed:
        return clone(current)
    except rfc6902.PatchError as exc:
        raise MutationError(f"JSON Patch: {exc}") from None


def _apply_configuration(expression: str, current: dict, activation: Mapping[str, Any]) -> dict:
    """patch/smd.go applyConfigPatcher.Patch and ApplyStructuredMergeDiff."""
    value = _evaluate(expression, activation)
    if not isinstance(value, ObjectValue) or value.type_name != OBJECT_TYPE:
        raise MutationError(f"unsupported return type from ApplyConfiguration expression: {type(value).__name__}")
    mismatches = type_name_errors(value)
    if mismatches:
        raise MutationError("type mismatch: " + "\n".join(mismatches))
    patch = plain(value)
    atomics = _atomics(patch, "")
    if atomics:
        raise MutationError(f"invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: "
                            f"{', '.join(atomics)}")
    return _merge(current, patch)


def _atomics(value: Any, path: str) -> list[str]:
    """findAtomics: the lists in an apply configuration that the pod's schema makes atomic."""
    found: list[str] = []
    if isinstance(value, dict):
        for name, item in value.items():
            here = f"{path}.{name}"
            if isinstance(item, list):
                if name not in MERGE_KEYS and name not in _SET_LISTS:
                    found.append(here)
                    continue
                for index, element in enumerate(item):
                    found += _atomics(element, f"{here}[{index}]")
            else:
                found += _atomics(item, here)
    return found


def _merge(live: Any, patch: Any, name: str = "") -> Any:
    """The apply configuration merged into the live object, as a new object (the live one is left as
    it was; what the patch does not reach is shared): maps field by field, list-maps by key, set-lists
    by value (typed.TypedValue.Merge over the fields an apply configuration may hold). The patch is JSON
    data (`plain`): watch.clone copies it."""
    if isinstance(patch, dict) and isinstance(live, dict):
        out = dict(live)
        for key, value in patch.items():
            out[key] = _merge(live[key], value, key) if key in live else clone(value)
        return out
    if isinstance(patch, list) and isinstance(live, list):
        if name in _SET_LISTS:
            return live + [item for item in patch if item not in live]
        merge_key = MERGE_KEYS.get(name)
        merged = list(live)
        for item in patch:
            index = next((i for i, existing in enumerate(merged) if isinstance(existing, dict) and isinstance(item, dict)
                          and merge_key in item and existing.get(merge_key) == item.get(merge_key)), None)
            if index is None:
                merged.append(clone(item))
            else:
                merged[index] = _merge(merged[index], item)
        return merged
    return clone(patch)
