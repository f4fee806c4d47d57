"""ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1):
defaulting, create/update preparation and validation, as kube-apiserver's registry does them.

- defaulting: pkg/apis/admissionregistration/v1/defaults.go (failurePolicy Fail; matchPolicy
  Equivalent, namespaceSelector and objectSelector `{}` in every MatchResources; a rule's scope `*`);
- strategy: pkg/registry/admissionregistration/validatingadmissionpolicy/strategy.go (generation 1 on
  create, +1 when the spec changes; status is its own subresource, never written through the main
  resource) and .../validatingadmissionpolicybinding/strategy.go;
- validation: pkg/apis/admissionregistration/validation/validation.go
  (ValidateValidatingAdmissionPolicy, ValidateValidatingAdmissionPolicyBinding): the field errors a
  user meets, with every CEL expression compiled (a compile error is `Invalid value: "<expr>":
  compilation failed: ...`).

kubesim does not support policy parameters: a policy with spec.paramKind or a binding with
spec.paramRef is refused with a Forbidden field error that says so (the real server accepts them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, duplicate, forbidden, invalid_value, not_supported, required
from ganggate.sim.apimachinery.objectmeta import dns1123_subdomain_errors, qualified_name_errors, validate_object_meta
from ganggate.sim.apiserver.admission.cel import compile_expression

POLICY_KEY = "validatingadmissionpolicies.admissionregistration.k8s.io"
BINDING_KEY = "validatingadmissionpolicybindings.admissionregistration.k8s.io"
FAILURE_POLICIES = ["Fail", "Ignore"]
MATCH_POLICIES = ["Equivalent", "Exact"]
OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
SCOPES = ["*", "Cluster", "Namespaced"]
REASONS = ["Forbidden", "Invalid", "RequestEntityTooLarge", "Unauthorized"]
ACTIONS = ["Audit", "Deny", "Warn"]
_CEL_IDENTIFIER = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_NO_PARAMS = "kubesim does not support policy parameters (paramKind/paramRef); write the values into the expressions"

Obj = dict[str, Any]


# ---- defaulting -----------------------------------------------------------------------------------
def _default_match_resources(match: Any) -> None:
    """SetDefaults_MatchResources and SetDefaults_Rule for every rule in it."""
    if not isinstance(match, dict):
        return
    match.setdefault("matchPolicy", "Equivalent")
    if match.get("namespaceSelector") is None:
        match["namespaceSelector"] = {}
    if match.get("objectSelector") is None:
        match["objectSelector"] = {}
    for key in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(key) or []:
            if isinstance(rule, dict) and rule.get("scope") is None:
                rule["scope"] = "*"


def default_policy(policy: Obj) -> None:
    """SetDefaults_ValidatingAdmissionPolicySpec."""
    spec = policy.get("spec")
    if not isinstance(spec, dict):
        return
    if spec.get("failurePolicy") is None:
        spec["failurePolicy"] = "Fail"
    _default_match_resources(spec.get("matchConstraints"))


def default_binding(binding: Obj) -> None:
    """SetDefaults_ValidatingAdmissionPolicyBindingSpec (matchResources, when given)."""
    spec = binding.get("spec")
    if isinstance(spec, dict):
        _default_match_resources(spec.get("matchResources"))


# ---- strategy -------------------------------------------------------------------------------------
def prepare_create(obj: Obj) -> None:
    """PrepareForCreate: generation 1, no status from the user."""
    obj.setdefault("metadata", {})["generation"] = 1
    obj.pop("status", None)


def prepare_update(new: Obj, old: Mapping[str, Any]) -> None:
    """PrepareForUpdate: status kept from the stored object; generation +1 when the spec changes."""
    generation = (old.get("metadata") or {}).get("generation", 1)
    new.setdefault("metadata", {})["generation"] = generation + (1 if new.get("spec") != old.get("spec") else 0)
    if "status" in old:
        new["status"] = old["status"]
    else:
        new.pop("status", None)


def prepare_status_update(new: Obj, old: Mapping[str, Any]) -> None:
    """The status subresource is not served: never reached."""


# ---- validation -----------------------------------------------------------------------------------
def _compile_error(path: str, expression: str) -> list[Cause]:
    """A CEL expression that does not compile (convertCELErrorToValidationError: Invalid)."""
    if not expression.strip():
        return [required(path, "expression is not specified")]
    compiled = compile_expression(expression)
    if compiled.error is not None:
        detail = compiled.error.replace("compilation error: ", "", 1)
        return [invalid_value(path, expression, f"compilation failed: {detail}")]
    return []


def _validate_selector(path: str, selector: Any) -> list[Cause]:
    if selector is None:
        return [required(path)]
    if not isinstance(selector, dict):
        return [invalid_value(path, selector, "must be a label selector")]
    causes = []
    for index, expr in enumerate(selector.get("matchExpressions") or []):
        op = (expr or {}).get("operator")
        here = f"{path}.matchExpressions[{index}]"
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            causes.append(not_supported(f"{here}.operator", op, ["DoesNotExist", "Exists", "In", "NotIn"]))
        elif op in ("In", "NotIn") and not expr.get("values"):
            causes.append(required(f"{here}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and expr.get("values"):
            causes.append(forbidden(f"{here}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    return causes


def _validate_rule(path: str, rule: Any) -> list[Cause]:
    """validateNamedRuleWithOperations / validateRuleWithOperations, the essentials."""
    if not isinstance(rule, dict):
        return [invalid_value(path, rule, "must be an object")]
    causes = []
    for key in ("operations", "apiGroups", "apiVersions", "resources"):
        if not rule.get(key):
            causes.append(required(f"{path}.{key}"))
    for index, operation in enumerate(rule.get("operations") or []):
        if operation not in OPERATIONS:
            causes.append(not_supported(f"{path}.operations[{index}]", operation, OPERATIONS))
    scope = rule.get("scope")
    if scope is not None and scope not in SCOPES:
        causes.append(not_supported(f"{path}.scope", scope, SCOPES))
    names = rule.get("resourceNames") or []
    for index, name in enumerate(names):
        if name in names[:index]:
            causes.append(duplicate(f"{path}.resourceNames[{index}]", name))
    return causes


def _validate_match_resources(path: str, match: Any) -> list[Cause]:
    if match is None:
        return []
    if not isinstance(match, dict):
        return [invalid_value(path, match, "must be an object")]
    causes = []
    policy = match.get("matchPolicy")
    if policy not in MATCH_POLICIES:
        causes.append(required(f"{path}.matchPolicy") if policy is None else not_supported(f"{path}.matchPolicy", policy, MATCH_POLICIES))
    causes += _validate_selector(f"{path}.namespaceSelector", match.get("namespaceSelector"))
    causes += _validate_selector(f"{path}.objectSelector", match.get("objectSelector"))
    for key in ("resourceRules", "excludeResourceRules"):
        for index, rule in enumerate(match.get(key) or []):
            causes += _validate_rule(f"{path}.{key}[{index}]", rule)
    return causes


def _validate_match_conditions(path: str, conditions: Any) -> list[Cause]:
    conditions = conditions or []
    causes = []
    if len(conditions) > 64:
        causes.append(Cause(path, "FieldValueTooMany", f"Too many: {len(conditions)}: must have at most 64 items"))
    seen: set[str] = set()
    for index, condition in enumerate(conditions):
        here = f"{path}[{index}]"
        condition = condition if isinstance(condition, dict) else {}
        causes += _compile_error(f"{here}.expression", str(condition.get("expression") or ""))
        name = str(condition.get("name") or "")
        if not name:
            causes.append(required(f"{here}.name"))
        else:
            causes += [invalid_value(f"{here}.name", name, m) for m in qualified_name_errors(name)]
            if name in seen:
                causes.append(duplicate(f"{here}.name", name))
            seen.add(name)
    return causes


def _validate_variables(path: str, variables: Any) -> list[Cause]:
    causes = []
    for index, variable in enumerate(variables or []):
        here = f"{path}[{index}]"
        variable = variable if isinstance(variable, dict) else {}
        name = str(variable.get("name") or "")
        if not name.strip():
            causes.append(required(f"{here}.name", "name is not specified"))
        elif not _CEL_IDENTIFIER.fullmatch(name):
            causes.append(invalid_value(f"{here}.name", name, "name is not a valid CEL identifier"))
        causes += _compile_error(f"{here}.expression", str(variable.get("expression") or ""))
    return causes


def _validate_validation(path: str, validation: Any) -> list[Cause]:
    validation = validation if isinstance(validation, dict) else {}
    causes = _compile_error(f"{path}.expression", str(validation.get("expression") or ""))
    message_expression = validation.get("messageExpression")
    if message_expression is not None and str(message_expression) and not str(message_expression).strip():
        causes.append(invalid_value(f"{path}.messageExpression", message_expression, "must be non-empty if specified"))
    elif message_expression:
        causes += _compile_error(f"{path}.messageExpression", str(message_expression))
    message = validation.get("message")
    if message is not None and str(message) and not str(message).strip():
        causes.append(invalid_value(f"{path}.message", message, "message must be non-empty if specified"))
    elif message and re.search(r"[\n\r]", str(message).strip()):
        causes.append(invalid_value(f"{path}.message", message, "message must not contain line breaks"))
    reason = validation.get("reason")
    if reason is not None and reason not in REASONS:
        causes.append(not_supported(f"{path}.reason", reason, REASONS))
    return causes


def validate_policy(policy: Mapping[str, Any]) -> list[Cause]:
    """ValidateValidatingAdmissionPolicy."""
    causes = validate_object_meta(policy, namespaced=False)
    given = policy.get("spec")
    spec: Mapping[str, Any] = given if isinstance(given, dict) else {}
    failure = spec.get("failurePolicy")
    if failure not in FAILURE_POLICIES:
        causes.append(required("spec.failurePolicy") if failure is None else not_supported("spec.failurePolicy", failure, FAILURE_POLICIES))
    if spec.get("paramKind") is not None:
        causes.append(forbidden("spec.paramKind", _NO_PARAMS))
    match = spec.get("matchConstraints")
    if match is None:
        causes.append(required("spec.matchConstraints"))
    else:
        causes += _validate_match_resources("spec.matchConstraints", match)
        if isinstance(match, dict) and not match.get("resourceRules"):
            causes.append(required("spec.matchConstraints.resourceRules"))
    causes += _validate_match_conditions("spec.matchConditions", spec.get("matchConditions"))
    causes += _validate_variables("spec.variables", spec.get("variables"))
    validations, audits = spec.get("validations") or [], spec.get("auditAnnotations") or []
    if not validations and not audits:
        detail = "validations or auditAnnotations must contain at least one item"
        causes += [required("spec.validations", detail), required("spec.auditAnnotations", detail)]
    for index, validation in enumerate(validations):
        causes += _validate_validation(f"spec.validations[{index}]", validation)
    for index, audit in enumerate(audits):
        audit = audit if isinstance(audit, dict) else {}
        value = str(audit.get("valueExpression") or "")
        if not value.strip():
            causes.append(required(f"spec.auditAnnotations[{index}].valueExpression", "valueExpression is not specified"))
        else:
            causes += _compile_error(f"spec.auditAnnotations[{index}].valueExpression", value)
    return causes


def validate_policy_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateValidatingAdmissionPolicyUpdate: the same rules as on create."""
    return validate_policy(new)


def validate_binding_common(binding: Mapping[str, Any]) -> tuple[list[Cause], Mapping[str, Any]]:
    """What a validating and a mutating policy binding share: metadata, policyName, no paramRef,
    matchResources; the causes and the binding's spec."""
    causes = validate_object_meta(binding, namespaced=False)
    given = binding.get("spec")
    spec: Mapping[str, Any] = given if isinstance(given, dict) else {}
    policy_name = str(spec.get("policyName") or "")
    if not policy_name:
        causes.append(required("spec.policyName"))
    else:
        causes += [invalid_value("spec.policyName", policy_name, m) for m in dns1123_subdomain_errors(policy_name)]
    if spec.get("paramRef") is not None:
        causes.append(forbidden("spec.paramRef", _NO_PARAMS))
    causes += _validate_match_resources("spec.matchResources", spec.get("matchResources"))
    return causes, spec


def validate_binding(binding: Mapping[str, Any]) -> list[Cause]:
    """ValidateValidatingAdmissionPolicyBinding."""
    causes, spec = validate_binding_common(binding)
    actions = spec.get("validationActions") or []
    for index, action in enumerate(actions):
        if action not in ACTIONS:
            causes.append(not_supported(f"spec.validationActions[{index}]", action, ACTIONS))
        if action in actions[:index]:
            causes.append(duplicate(f"spec.validationActions[{index}]", action))
    if "Deny" in actions and "Warn" in actions:
        causes.append(invalid_value("spec.validationActions", actions, "must not contain both Deny and Warn (repeating the "
                                    "same validation failure information in the API response and headers serves no purpose)"))
    if not actions:
        causes.append(required("spec.validationActions", "at least one validation action is required"))
    return causes


def validate_binding_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateValidatingAdmissionPolicyBindingUpdate: the same rules as on create."""
    return validate_binding(new)

