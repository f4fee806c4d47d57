"""MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1beta1 in
1.35, behind the MutatingAdmissionPolicy feature gate): defaulting, strategy and validation as
kube-apiserver's registry does them.

- defaulting: pkg/apis/admissionregistration/v1beta1/defaults.go SetDefaults_MutatingAdmissionPolicySpec
  (failurePolicy Fail; matchConstraints as SetDefaults_MatchResources). reinvocationPolicy has no
  default: it is required.
- strategy: pkg/registry/admissionregistration/mutatingadmissionpolicy/strategy.go (generation 1 on
  create, +1 when the spec changes) and .../mutatingadmissionpolicybinding/strategy.go.
- validation: pkg/apis/admissionregistration/validation/validation.go
  validateMutatingAdmissionPolicySpec, validateMutation, validateMutatingAdmissionPolicyBindingSpec;
  the mutating operations are CREATE, UPDATE and CONNECT (supportedMutatingOperations: DELETE cannot
  be mutated). Mutation expressions are compiled (apiserver/admission/cel_mutation.py).

The matching and CEL pieces shared with ValidatingAdmissionPolicy are those of
registry/validatingadmissionpolicy.py. As there, kubesim does not support policy parameters: a
paramKind or paramRef is refused with a Forbidden field error that says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, forbidden, invalid_value, not_supported, required
from ganggate.sim.apimachinery.objectmeta import validate_object_meta
from ganggate.sim.apiserver.admission.cel_mutation import compile_mutation
from ganggate.sim.apiserver.registry import validatingadmissionpolicy as vap

GROUP = "admissionregistration.k8s.io"
VERSION = "v1beta1"
POLICY_KEY = f"mutatingadmissionpolicies.{GROUP}"
BINDING_KEY = f"mutatingadmissionpolicybindings.{GROUP}"
FEATURE_GATE = "MutatingAdmissionPolicy"
PATCH_TYPES = ["ApplyConfiguration", "JSONPatch"]
REINVOCATION_POLICIES = ["IfNeeded", "Never"]
MUTATING_OPERATIONS = ["*", "CONNECT", "CREATE", "UPDATE"]

Obj = dict[str, Any]

prepare_create = vap.prepare_create
prepare_update = vap.prepare_update
prepare_status_update = vap.prepare_status_update


# SetDefaults_MutatingAdmissionPolicySpec sets what the validating policy's does: failurePolicy
# Fail and the matchConstraints' selectors and scopes.
default_policy = vap.default_policy


def default_binding(binding: Obj) -> None:
    vap.default_binding(binding)


def _mutable_operations(path: str, match: Any) -> list[Cause]:
    """"It is only possible to mutate create and update requests": every rule's operations."""
    causes = []
    for rule in (match or {}).get("resourceRules") or [] if isinstance(match, dict) else []:
        for operation in (rule or {}).get("operations") or []:
            if operation not in MUTATING_OPERATIONS:
                causes.append(not_supported(path, operation, MUTATING_OPERATIONS))
    return causes


def _expression(path: str, expression: Any) -> list[Cause]:
    text = str(expression or "")
    if not text.strip():
        return [required(path)]
    compiled = compile_mutation(text)
    if compiled.error is not None:
        return [invalid_value(path, text, compiled.error.replace("compilation error: ", "compilation failed: ", 1))]
    return []


def _validate_mutation(path: str, mutation: Any) -> list[Cause]:
    """validateMutation: the patchType union."""
    mutation = mutation if isinstance(mutation, dict) else {}
    patch_type = mutation.get("patchType")
    apply, json_patch = mutation.get("applyConfiguration"), mutation.get("jsonPatch")
    if not patch_type:
        return [required(f"{path}.patchType")]
    if patch_type not in PATCH_TYPES:
        return [not_supported(f"{path}.patchType", patch_type, PATCH_TYPES)]
    causes: list[Cause] = []
    chosen, other, other_field = (json_patch, apply, "applyConfiguration") if patch_type == "JSONPatch" else (
        apply, json_patch, "jsonPatch")
    chosen_field = "jsonPatch" if patch_type == "JSONPatch" else "applyConfiguration"
    if chosen is None:
        causes.append(required(f"{path}.{chosen_field}", f"must be specified when patchType is {patch_type}"))
    else:
        causes += _expression(f"{path}.{chosen_field}.expression", (chosen or {}).get("expression"))
    if other is not None:
        causes.append(invalid_value(f"{path}.{other_field}", "{" + other_field + "}",
                                    f"must not be specified when patchType is {patch_type}"))
    return causes


def validate_policy(policy: Mapping[str, Any]) -> list[Cause]:
    """ValidateMutatingAdmissionPolicy."""
    causes = validate_object_meta(policy, namespaced=False)
    given = policy.get("spec")
    spec: Mapping[str, Any] = given if isinstance(given, dict) else {}
    failure = spec.get("failurePolicy")
    if failure not in vap.FAILURE_POLICIES:
        causes.append(required("spec.failurePolicy") if failure is None
                      else not_supported("spec.failurePolicy", failure, vap.FAILURE_POLICIES))
    if spec.get("paramKind") is not None:
        causes.append(forbidden("spec.paramKind", vap._NO_PARAMS))
    match = spec.get("matchConstraints")
    if match is None:
        causes.append(required("spec.matchConstraints"))
    else:
        causes += vap._validate_match_resources("spec.matchConstraints", match)
        if isinstance(match, dict) and not match.get("resourceRules"):
            causes.append(required("spec.matchConstraints.resourceRules"))
        causes += _mutable_operations("spec.matchConstraints.resourceRules.operations", match)
    causes += vap._validate_match_conditions("spec.matchConditions", spec.get("matchConditions"))
    causes += vap._validate_variables("spec.variables", spec.get("variables"))
    mutations = spec.get("mutations") or []
    if not mutations:
        causes.append(required("spec.mutations", "mutations must contain at least one item"))
    for index, mutation in enumerate(mutations):
        causes += _validate_mutation(f"spec.mutations[{index}]", mutation)
    reinvocation = spec.get("reinvocationPolicy")
    if not reinvocation:
        causes.append(required("spec.reinvocationPolicy"))
    elif reinvocation not in REINVOCATION_POLICIES:
        causes.append(not_supported("spec.reinvocationPolicy", reinvocation, REINVOCATION_POLICIES))
    return causes


def validate_policy_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    return validate_policy(new)


def validate_binding(binding: Mapping[str, Any]) -> list[Cause]:
    """ValidateMutatingAdmissionPolicyBinding (no validationActions: a binding always mutates)."""
    causes, spec = vap.validate_binding_common(binding)
    causes += _mutable_operations("spec.matchResources.resourceRules.operations", spec.get("matchResources"))
    return causes


def validate_binding_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    return validate_binding(new)
