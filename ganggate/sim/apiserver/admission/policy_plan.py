"""What a request reads of the stored admission policies and their bindings, made once per change of them.

kube-apiserver's policy source compiles each definition once per generation and hands the plugin
its hooks (k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_source.go refreshPolicies);
kubesim's PolicyChain (apiserver/admission/policy.py) likewise keeps a `Plan` until a policy or a
binding is written: the policies in name order with their bindings, their parsed label selectors,
which requests their rules may match, and, per policy, its variables and whether any of its
expressions names `request` or `namespaceObject` (when none does, the activation leaves it unbuilt:
no expression can tell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.sim.apiserver.admission.matching import (
    Requirement,
    SelectorError,
    names_variable,
    parse_selector,
    requirements_of,
    same_objects,
)


def variable_expressions(definitions: list[Mapping[str, Any]]) -> dict[str, str]:
    """A policy's `variables` as name -> expression (a later one of the same name wins)."""
    return {str(v.get("name", "")): str(v.get("expression", "")) for v in definitions}


@dataclass(frozen=True)
class PreparedPolicy:
    """What a request reads of one policy's spec, prepared once per plan."""

    variables: dict[str, str]
    needs_request: bool
    needs_namespace: bool


def _prepare(spec: Mapping[str, Any]) -> PreparedPolicy:
    return PreparedPolicy(variable_expressions(list(spec.get("variables") or [])),
                          names_variable(spec, "request"), names_variable(spec, "namespaceObject"))


class Plan:
    """The stored policies and bindings as a request reads them, built once per change of the stored
    objects (which are never mutated in place: a change is a new object)."""

    def __init__(self, policies: list[dict], bindings: list[dict]) -> None:
        self.sources = (policies, bindings)
        by_policy: dict[str, list[dict]] = {}
        for binding in sorted(bindings, key=lambda b: b["metadata"]["name"]):
            by_policy.setdefault(str((binding.get("spec") or {}).get("policyName", "")), []).append(binding)
        # (policy, its bindings in name order) for every policy with a binding, policies in name order
        self.bound: list[tuple[dict, list[dict]]] = [
            (policy, by_policy[policy["metadata"]["name"]])
            for policy in sorted(policies, key=lambda p: p["metadata"]["name"])
            if by_policy.get(policy["metadata"]["name"])]
        self.prepared = {id(policy): _prepare(policy.get("spec") or {}) for policy, _ in self.bound}
        self.requirements: dict[int, list[Requirement] | SelectorError] = {}
        self.may_match: dict[tuple[str, str, str, str, str | None, bool], bool] = {}

    def same(self, policies: list[dict], bindings: list[dict]) -> bool:
        """Whether the plan was built from these very objects."""
        return same_objects(self.sources[0], policies) and same_objects(self.sources[1], bindings)

    def selector(self, selector: Any) -> list[Requirement]:
        """selector_requirements, parsed once per selector of the plan (its SelectorError likewise)."""
        if selector is None:
            return []
        parsed = self.requirements.get(id(selector))
        if parsed is None:
            parsed = self.requirements[id(selector)] = parse_selector(selector)
        return requirements_of(parsed)
