"""Which mutating webhooks apply to a request: ordering, defaults, rules and selectors.

Pure functions over MutatingWebhookConfiguration dicts as the API serves them. They follow
k8s.io/apiserver/pkg/admission/plugin/webhook: generic/webhook.go (ShouldCallHook: the
namespace selector, then the object selector, then the rules), predicates/rules/rules.go,
predicates/namespace/matcher.go and predicates/object/matcher.go. The CEL matchConditions,
evaluated after these, live in kubesim/apiserver/admission/cel.py.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Requirement:
    """One label requirement; operators as in k8s.io/apimachinery/pkg/labels/selector.go."""

    key: str
    operator: str  # "=", "in", "notin", "exists", "!" (does not exist)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.operator == "notin":
            return not present or labels[self.key] not in self.values
        if self.operator == "exists":
            return present
        return not present


def labels_match(requirements: list[Requirement], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)


class SelectorError(ValueError):
    """A webhook's label selector cannot be parsed (the real server answers 500)."""


@dataclass(frozen=True)
class Webhook:
    """One mutating webhook with its API defaults filled in, and where it came from."""

    uid: str  # "<configuration>/<webhook>/<index>": unique even if names repeat
    configuration: str
    spec: Mapping[str, Any] = field(repr=False)

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def failure_policy(self) -> str:
        return str(self.spec.get("failurePolicy") or "Fail")

    @property
    def ignore_failures(self) -> bool:
        return self.failure_policy == "Ignore"

    @property
    def reinvoke_if_needed(self) -> bool:
        return self.spec.get("reinvocationPolicy") == "IfNeeded"

    @property
    def timeout_seconds(self) -> int:
        value = self.spec.get("timeoutSeconds")
        return 10 if value is None else int(value)

    @property
    def side_effects(self) -> str | None:
        return self.spec.get("sideEffects")

    # Read once per webhook (a Webhook is made once per change of its configuration, and its spec is
    # its own copy): the parsed selectors (or why they cannot be parsed), and whether any match
    # condition names `request`.
    @functools.cached_property
    def _namespace_selector(self) -> list[Requirement] | SelectorError:
        return parse_selector(self.spec.get("namespaceSelector"))

    @functools.cached_property
    def _object_selector(self) -> list[Requirement] | SelectorError:
        return parse_selector(self.spec.get("objectSelector"))

    @functools.cached_property
    def conditions_read_request(self) -> bool:
        """Whether a matchConditions expression may read `request` (its text holds the word at all)."""
        return names_variable(self.spec.get("matchConditions") or [], "request")


def parse_selector(selector: Mapping[str, Any] | None) -> list[Requirement] | SelectorError:
    """selector_requirements, its SelectorError returned rather than raised: parsed once and kept,
    the error is raised where the selector is used (`requirements_of`)."""
    try:
        return selector_requirements(selector)
    except SelectorError as exc:
        return exc


def requirements_of(parsed: list[Requirement] | SelectorError) -> list[Requirement]:
    """What `parse_selector` gave, its error raised now."""
    if isinstance(parsed, SelectorError):
        raise parsed
    return parsed


def names_variable(value: Any, variable: str) -> bool:
    """Whether any text of `value` (expressions, as JSON data) names the CEL variable: an identifier
    is a whole word of an expression, so text nowhere holding the word cannot read it (conservative:
    a message or a string literal holding the word only counts as naming it)."""
    return re.search(rf"\b{re.escape(variable)}\b", json.dumps(value)) is not None


def request_kind(operation: str, resource: Mapping[str, str], sub_resource: str | None,
                 namespace: str) -> tuple[str, str, str, str, str | None, bool]:
    """All that rules.go Matcher.Matches reads of a request (of the namespace, whether there is one):
    the key under which whether some rules match it may be remembered."""
    return (operation, resource.get("group", ""), resource.get("version", ""), resource.get("resource", ""),
            sub_resource, bool(namespace))


def same_objects(made_from: Sequence[Any], now: Sequence[Any]) -> bool:
    """Whether `now` lists the very objects `made_from` did (stored objects are never changed in
    place: a change is a new object), so what was made from them still holds."""
    return len(made_from) == len(now) and all(a is b for a, b in zip(made_from, now, strict=True))


def webhooks_in_order(configurations: Sequence[Mapping[str, Any]]) -> list[Webhook]:
    """Every webhook, configurations sorted by name, webhooks in their listed order.

    k8s.io/apiserver/pkg/admission/configuration/mutating_webhook_manager.go sorts the
    configurations by name (MutatingWebhookConfigurationSorter.ByName) and keeps each
    configuration's webhooks in order; the uid scheme mirrors its "%s/%s/%d" accessor uid.
    Each Webhook's spec is the configuration's own dict, not a copy: the chain only reads it, and
    the API server's stored objects are never changed in place (an update stores a new object).
    """
    ordered = sorted(configurations, key=lambda c: str((c.get("metadata") or {}).get("name", "")))
    hooks: list[Webhook] = []
    for config in ordered:
        config_name = str((config.get("metadata") or {}).get("name", ""))
        seen: dict[str, int] = {}
        for spec in config.get("webhooks") or []:
            name = str(spec.get("name", ""))
            index = seen.get(name, 0)
            seen[name] = index + 1
            hooks.append(Webhook(f"{config_name}/{name}/{index}", config_name, spec))
    return hooks


def rule_matches(
    rule: Mapping[str, Any], *, operation: str, resource: Mapping[str, str], sub_resource: str | None, namespace: str
) -> bool:
    """One RuleWithOperations against a request (predicates/rules/rules.go Matcher.Matches)."""
    return (
        _scope_matches(rule.get("scope") or "*", resource, namespace)
        and _exact_or_wildcard(rule.get("operations") or [], operation)
        and _exact_or_wildcard(rule.get("apiGroups") or [], resource.get("group", ""))
        and _exact_or_wildcard(rule.get("apiVersions") or [], resource.get("version", ""))
        and _resource_matches(rule.get("resources") or [], resource.get("resource", ""), sub_resource or "")
    )


def any_rule_matches(
    hook: Webhook, *, operation: str, resource: Mapping[str, str], sub_resource: str | None, namespace: str
) -> bool:
    """True when one of the webhook's rules matches.

    matchPolicy Equivalent would also try the same resource under other groups/versions;
    the resources kubesim serves (pods in v1) have no equivalents, so there is nothing to add.
    """
    return any(
        rule_matches(r, operation=operation, resource=resource, sub_resource=sub_resource, namespace=namespace)
        for r in hook.spec.get("rules") or []
    )


def _exact_or_wildcard(items: list[str], requested: str) -> bool:
    return "*" in items or requested in items


def _scope_matches(scope: str, resource: Mapping[str, str], namespace: str) -> bool:
    is_namespace_object = (
        resource.get("group", "") == "" and resource.get("version") == "v1" and resource.get("resource") == "namespaces"
    )
    if scope == "*":
        return True
    if scope == "Namespaced":
        return not is_namespace_object and namespace != ""
    if scope == "Cluster":
        return is_namespace_object or namespace == ""
    return False


def _resource_matches(resources: list[str], requested: str, sub: str) -> bool:
    """`pods` matches only the main resource, `pods/status` one subresource, `*/*` everything."""
    for item in resources:
        res, _, rule_sub = item.partition("/")
        if (res == "*" or res == requested) and (rule_sub == "*" or rule_sub == sub):
            return True
    return False


def selector_requirements(selector: Mapping[str, Any] | None) -> list[Requirement]:
    """A metav1.LabelSelector as requirements (apimachinery meta/v1/helpers.go LabelSelectorAsSelector).

    A missing selector is treated as the API default `{}`, which matches everything
    (pkg/apis/admissionregistration/v1/defaults.go).
    """
    selector = selector or {}
    requirements = [Requirement(k, "=", (str(v),)) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator"), tuple(expr.get("values") or ())
        if op in ("In", "NotIn"):
            if not values:
                raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
            requirements.append(Requirement(key, "in" if op == "In" else "notin", values))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise SelectorError("values set must be empty for exists and does not exist")
            requirements.append(Requirement(key, "exists" if op == "Exists" else "!"))
        else:
            raise SelectorError(f'"{op}" is not a valid label selector operator')
    return requirements


def _labels_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def namespace_selector_applies(resource: Mapping[str, str], namespace: str) -> bool:
    """Cluster-scoped objects other than namespaces are never exempted by a namespaceSelector."""
    return namespace != "" or resource.get("resource") == "namespaces"


def namespace_matches(hook: Webhook, namespace_labels: Mapping[str, str]) -> bool:
    """The webhook's namespaceSelector against the namespace's labels (namespace/matcher.go)."""
    return labels_match(requirements_of(hook._namespace_selector), namespace_labels)


def namespace_selector_is_empty(hook: Webhook) -> bool:
    """An empty selector matches without looking the namespace up."""
    return not requirements_of(hook._namespace_selector)


def object_matches(hook: Webhook, obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None) -> bool:
    """The objectSelector matches the new object's labels OR the old object's (object/matcher.go).

    A missing object (CREATE has no old object) never matches a non-empty selector.
    """
    requirements = requirements_of(hook._object_selector)
    if not requirements:
        return True
    return any(o is not None and labels_match(requirements, _labels_of(o)) for o in (obj, old_obj))
