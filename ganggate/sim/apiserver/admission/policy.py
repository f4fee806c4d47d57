"""kubesim's validating admission by policy: ValidatingAdmissionPolicies and their bindings, evaluated
as kube-apiserver's ValidatingAdmissionPolicy plugin does (GA in 1.30).

Follows k8s.io/apiserver/pkg/admission/plugin/policy/validating: dispatcher.go (Dispatch: for each
policy whose matchConstraints match, each binding of it whose matchResources match; the first Deny
decision refuses the request as `admission.NewForbidden` with the decision's reason and code; Warn
adds a `Warning` header; Audit would write an audit annotation), validator.go (Validate:
matchConditions first, then every validation; an evaluation error is a Deny under failurePolicy Fail
and ignored under Ignore; the message is messageExpression's value, else `message`, else "failed
expression: <expression>") and ../matching/matching.go (Matches: namespaceSelector, objectSelector,
excludeResourceRules, resourceRules with resourceNames). The API server runs it after the mutating
webhooks and after the object's own validation, just before storage (registry/generic/registry/
store.go: createValidation / updateValidation, and deleteValidation before a delete).

CEL: each expression is compiled once per text (kubesim/apiserver/admission/cel.py) and evaluated with the
variables `object`, `oldObject` (null on CREATE; `object` is null on DELETE), `request` (the
AdmissionRequest, without object/oldObject), `namespaceObject`, `params` (always null: kubesim
refuses policies with paramKind, see apiserver/registry/validatingadmissionpolicy.py) and `variables` (each computed on
first use, at most once per evaluation, as cel-go's composition does).

What is read of the policies and bindings per request is made once per change of their stored
objects (apiserver/admission/policy_plan.py), as kube-apiserver's policy source compiles each
definition once per generation.

Not modelled: auditAnnotations (kubesim has no audit log; they are accepted and not evaluated), the
Audit action (logged), `authorizer` (an expression using it fails to evaluate, so failurePolicy
decides), matchPolicy Equivalent (kubesim serves one version of each resource), the type checking
that fills status.typeChecking, the CEL cost budget, and policies on subresources other than status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver.admission.cel import EvaluationError, evaluate_conditions, evaluate_value
from ganggate.sim.apiserver.admission.cel_fast import CelError
from ganggate.sim.apiserver.admission.matching import (
    Requirement,
    SelectorError,
    labels_match,
    request_kind,
    rule_matches,
    selector_requirements,
)
from ganggate.sim.apiserver.admission.policy_plan import Plan, PreparedPolicy, variable_expressions
from ganggate.sim.apiserver.admission.webhook import admission_request
from ganggate.sim.apiserver.registry.validatingadmissionpolicy import BINDING_KEY, POLICY_KEY

log = logging.getLogger("ganggate.sim.apiserver.admission.policy")

# k8s.io/apiserver/pkg/apis/cel/config.go MaxEvaluatedMessageExpressionSizeBytes.
MAX_MESSAGE_BYTES = 5 * 1024
_REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


@dataclass(frozen=True)
class Request:
    """What the policies see of one request (admission.Attributes)."""

    operation: str
    kind: Mapping[str, str]
    resource: Mapping[str, str]
    sub_resource: str | None
    namespace: str
    name: str
    obj: Mapping[str, Any] | None
    old_obj: Mapping[str, Any] | None
    dry_run: bool
    user_info: Mapping[str, Any]


@dataclass(frozen=True)
class _Decision:
    """A Deny decision of one binding (PolicyDecision with its definition and binding)."""

    policy: str
    binding: str | None
    message: str
    reason: str = "Invalid"


class Variables(Mapping[str, Any]):
    """`variables`: each named expression evaluated on first use, then remembered (composition)."""

    def __init__(self, definitions: list[Mapping[str, Any]] | dict[str, str], activation: dict[str, Any]) -> None:
        # a dict is already name -> expression (variable_expressions, prepared once per policy)
        self._expressions = definitions if isinstance(definitions, dict) else variable_expressions(definitions)
        self._activation = activation
        self._values: dict[str, Any] = {}
        self._errors: dict[str, str] = {}

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name in self._errors:
            raise CelError(self._errors[name])
        if name not in self._expressions:
            raise KeyError(name)
        try:
            value = evaluate_value(self._expressions[name], self._activation)
        except EvaluationError as exc:
            self._errors[name] = str(exc)
            raise CelError(str(exc)) from None
        self._values[name] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._expressions)

    def __len__(self) -> int:
        return len(self._expressions)

    def __contains__(self, name: object) -> bool:
        return name in self._expressions


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


class PolicyChain:
    """Evaluates the stored policies and bindings over one request at a time (synchronously: CEL
    needs no I/O)."""

    policy_key, binding_key = POLICY_KEY, BINDING_KEY  # the stored kinds (MutatingPolicyChain: its own)

    def __init__(self, list_objects: Callable[[str], list[dict]], count: Callable[[str], int],
                 get_namespace: Callable[[str], dict | None],
                 last_write: Callable[[str], int] | None = None) -> None:
        self._list = list_objects
        self._count = count
        self._get_namespace = get_namespace
        # The store's revision of the last write of a kind (Store.last_write): when given, the plan is
        # kept while neither kind was written, without listing them; otherwise it is kept while the
        # listed objects are the very ones it was made from.
        self._last_write = last_write
        self._plan_made: Plan | None = None
        self._plan_stamp: tuple[int, int] | None = None

    def _plan(self) -> Plan:
        """The plan of the stored policies and bindings, rebuilt when one of them changed."""
        plan = self._plan_made
        if self._last_write is not None:
            stamp = (self._last_write(self.policy_key), self._last_write(self.binding_key))
            if plan is not None and stamp == self._plan_stamp:
                return plan
            self._plan_stamp = stamp
            plan = self._plan_made = Plan(self._list(self.policy_key), self._list(self.binding_key))
            return plan
        policies, bindings = self._list(self.policy_key), self._list(self.binding_key)
        if plan is None or not plan.same(policies, bindings):
            plan = self._plan_made = Plan(policies, bindings)
        return plan

    def validate(self, request: Request) -> list[str]:
        """The warnings to send back; raises errors.ApiError when a Deny decision refuses the request."""
        if not self.may_match(request.operation, request.resource, request.sub_resource, request.namespace):
            return []  # nothing is bound, or no policy's rules name the request: none can apply
        plan = self._plan()
        denied: list[_Decision] = []
        warnings: list[str] = []
        for policy, bound in plan.bound:
            if self._matches(request, (policy.get("spec") or {}).get("matchConstraints"), plan=plan) is True:
                self._dispatch(policy, bound, request, denied, warnings, plan)
        if denied:
            raise self._refusal(request, denied[0])
        return warnings

    def _dispatch(self, policy: Mapping[str, Any], bindings: list[dict], request: Request,
                  denied: list[_Decision], warnings: list[str], plan: Plan) -> None:
        """One policy's bindings (dispatcher.go Dispatch's inner loop)."""
        name = policy["metadata"]["name"]
        spec = policy.get("spec") or {}
        fail = spec.get("failurePolicy", "Fail") != "Ignore"
        for binding in bindings:
            binding_name = binding["metadata"]["name"]
            matched = self._matches(request, (binding.get("spec") or {}).get("matchResources"), binding=True, plan=plan)
            if isinstance(matched, str):  # a configuration error
                if fail:
                    denied.append(_Decision(name, binding_name, f"failed to configure binding: {matched}"))
                continue
            if not matched:
                continue
            actions = (binding.get("spec") or {}).get("validationActions") or []
            for decision in self._evaluate(spec, name, binding_name, request, fail, plan.prepared[id(policy)]):
                if "Deny" in actions:
                    denied.append(decision)
                if "Warn" in actions:
                    warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{name}' with binding "
                                    f"'{binding_name}': {decision.message}")
                if "Audit" in actions:
                    log.info("ValidatingAdmissionPolicy %s (binding %s) audit: %s", name, binding_name, decision.message)

    def _evaluate(self, spec: Mapping[str, Any], policy: str, binding: str, request: Request,
                  fail: bool, prepared: PreparedPolicy) -> list[_Decision]:
        """validator.go Validate: the Deny decisions of one policy for one request."""
        activation = self._activation(request, prepared)
        activation["variables"] = Variables(prepared.variables, activation)
        conditions = spec.get("matchConditions") or []
        if conditions:
            matched = evaluate_conditions(conditions, activation)
            if matched.error is not None:
                return [_Decision(policy, binding, matched.error)] if fail else []
            if not matched.matches:
                return []
        decisions = []
        for validation in spec.get("validations") or []:
            expression = str(validation.get("expression", ""))
            try:
                result = evaluate_value(expression, activation)
                if not isinstance(result, bool):
                    raise EvaluationError(f"expression '{expression}' resulted in error: "
                                          f"must evaluate to bool, got {type(result).__name__}")
            except EvaluationError as exc:
                if fail:
                    decisions.append(_Decision(policy, binding, str(exc)))
                continue
            if not result:
                decisions.append(_Decision(policy, binding, self._message(validation, activation),
                                           str(validation.get("reason") or "Invalid")))
        return decisions

    @staticmethod
    def _message(validation: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
        """messageExpression's value (a one-line string of at most 5 KiB), else message, else the expression."""
        message = ""
        if validation.get("messageExpression"):
            try:
                value = evaluate_value(str(validation["messageExpression"]), activation)
            except EvaluationError as exc:
                log.debug("error while evaluating messageExpression: %s", exc)
                value = None
            if isinstance(value, str):
                value = value.strip()
                if len(value.encode()) <= MAX_MESSAGE_BYTES and "\n" not in value:
                    message = value
        if not message and str(validation.get("message") or "").strip():
            message = str(validation["message"]).strip()
        return message or f"failed expression: {str(validation.get('expression', '')).strip()}"

    def _activation(self, request: Request, prepared: PreparedPolicy | None = None) -> dict[str, Any]:
        """The CEL variables; `request` and `namespaceObject` left null when no expression of the
        policy names them (prepared), since then no expression can read them."""
        if prepared is not None and not prepared.needs_request:
            return {"object": request.obj, "oldObject": request.old_obj, "request": None, "params": None,
                    "namespaceObject": self._namespace_object(request) if prepared.needs_namespace else None}
        review = admission_request(
            uid="", operation=request.operation, kind=request.kind, resource=request.resource,
            sub_resource=request.sub_resource, namespace=request.namespace, name=request.name,
            obj=None, old_obj=None, dry_run=request.dry_run, user_info=request.user_info,
        )
        for dropped in ("object", "oldObject"):
            review.pop(dropped)
        return {"object": request.obj, "oldObject": request.old_obj, "request": review, "params": None,
                "namespaceObject": self._namespace_object(request)
                if prepared is None or prepared.needs_namespace else None}

    def _namespace_object(self, request: Request) -> Mapping[str, Any] | None:
        """cel.CreateNamespaceObject: the request's namespace (none for cluster-scoped objects and namespaces)."""
        if not request.namespace or (request.kind.get("kind") == "Namespace" and not request.kind.get("group")):
            return None
        namespace = self._get_namespace(request.namespace)
        if namespace is None:
            return None
        return {key: namespace[key] for key in ("apiVersion", "kind", "metadata", "spec", "status") if key in namespace}

    def _matches(self, request: Request, match: Any, binding: bool = False, plan: Plan | None = None) -> bool | str:
        """matching.go Matches: True, False, or (for a binding) the text of a configuration error.

        A binding without matchResources matches everything (policy_matcher.go BindingMatches).
        A definition whose selectors cannot be evaluated does not match (Dispatch drops that error).
        """
        if match is None:
            return binding
        # The rules before the selectors: matching.go evaluates the selectors first but holds
        # their errors until the rules matched ("now that we know this applies to this request
        # otherwise, if there were selector errors, return them"), so a request the rules leave
        # out does not match whatever the selectors say; checked first, it costs no namespace
        # lookup (most writes: a status, a binding, an Event).
        if any(self._rule_matches(rule, request) for rule in match.get("excludeResourceRules") or []):
            return False
        rules = match.get("resourceRules") or []
        if rules and not any(self._rule_matches(rule, request) for rule in rules):
            return False
        parse = selector_requirements if plan is None else plan.selector
        try:
            if not self._namespace_matches(request, match.get("namespaceSelector"), parse):
                return False
            requirements = parse(match.get("objectSelector"))
            if requirements and not any(o is not None and labels_match(requirements, _labels(o))
                                        for o in (request.obj, request.old_obj)):
                return False
        except (SelectorError, LookupError) as exc:
            return str(exc) if binding else False
        return True

    def may_match(self, operation: str, resource: Mapping[str, str], sub_resource: str | None, namespace: str) -> bool:
        """False when no bound policy's matchConstraints rules name the request: then no policy
        can apply to it (the rules are part of every match, `_matches`), and its admission need
        not copy the object nor build a request for the policies."""
        if not self._count(self.binding_key) or not self._count(self.policy_key):
            return False
        # rules.go Matcher.Matches reads of the request only these (the scope: whether it has a namespace)
        key = request_kind(operation, resource, sub_resource, namespace)
        plan = self._plan()
        known = plan.may_match.get(key)
        if known is None:
            known = plan.may_match[key] = self._may_match(operation, resource, sub_resource, namespace)
        return known

    def _may_match(self, operation: str, resource: Mapping[str, str], sub_resource: str | None, namespace: str) -> bool:
        for policy in self._list(self.policy_key):  # (resourceNames and the exclusions left to `_matches`)
            rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []
            if not rules or any(rule_matches(rule, operation=operation, resource=resource, sub_resource=sub_resource,
                                             namespace=namespace) for rule in rules):
                return True
        return False

    def _namespace_matches(self, request: Request, selector: Any,
                           parse: Callable[[Any], list[Requirement]] = selector_requirements) -> bool:
        """namespace/matcher.go MatchNamespaceSelector (cluster-scoped objects other than namespaces always match)."""
        requirements = parse(selector)
        if not requirements:
            return True
        is_namespace = request.resource.get("resource") == "namespaces" and not request.resource.get("group")
        if not request.namespace and not is_namespace:
            return True
        if is_namespace and request.operation in ("CREATE", "UPDATE") and not request.sub_resource:
            labels = _labels(request.obj)
        else:
            namespace = self._get_namespace(request.namespace or request.name)
            if namespace is None:
                raise LookupError(f'namespaces "{request.namespace or request.name}" not found')
            labels = _labels(namespace)
        return labels_match(requirements, labels)

    @staticmethod
    def _rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
        """A NamedRuleWithOperations: the rule, then resourceNames (matching.go matchesResourceRules)."""
        if not rule_matches(rule, operation=request.operation, resource=request.resource,
                            sub_resource=request.sub_resource, namespace=request.namespace):
            return False
        names = rule.get("resourceNames") or []
        return not names or request.name in names

    @staticmethod
    def _refusal(request: Request, decision: _Decision) -> errors.ApiError:
        """admission.NewForbidden with the decision's reason and reasonToCode (dispatcher.go)."""
        if decision.binding is not None:
            text = (f"ValidatingAdmissionPolicy '{decision.policy}' with binding '{decision.binding}' "
                    f"denied request: {decision.message}")
        else:
            text = f"ValidatingAdmissionPolicy '{decision.policy}' denied request: {decision.message}"
        resource, group = request.resource.get("resource", ""), request.resource.get("group", "")
        qualified = f"{resource}.{group}" if group else resource
        meta = (request.obj or {}).get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or ("Unknown" if request.obj is None else "")
        name = name or request.name or "Unknown"
        return errors.ApiError(
            _REASON_CODES.get(decision.reason, 422), decision.reason, f'{qualified} "{name}" is forbidden: {text}',
            name=name, group=group, kind=resource, causes=[errors.Cause("", "", text)],
        )


# Warnings of the request being served (k8s.io/apiserver/pkg/warning keeps them in the request's
# context); aiohttp runs each request in its own task, so a ContextVar holds them per request.
_WARNINGS: ContextVar[list[str] | None] = ContextVar("kubesim_policy_warnings", default=None)


def begin_request() -> None:
    """Forget the warnings of an earlier request served by the same task."""
    _WARNINGS.set(None)


def add_warnings(messages: list[str]) -> None:
    if messages:
        current = _WARNINGS.get()
        if current is None:
            current = []
            _WARNINGS.set(current)
        current.extend(messages)


def take_warnings() -> list[str]:
    """The request's policy warnings, for its `Warning` header."""
    current = _WARNINGS.get() or []
    _WARNINGS.set(None)
    return list(current)
