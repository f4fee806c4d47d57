"""Required node affinity: does a pod's nodeSelector and required node-affinity allow a node?

Written from staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
(GetRequiredNodeAffinity, LazyErrorNodeSelector, nodeSelectorRequirementsAsSelector and
...AsFieldSelector) and staging/src/k8s.io/apimachinery/pkg/labels/selector.go (NewRequirement,
Requirement.Matches), as the NodeAffinity filter plugin uses them:

- spec.nodeSelector: every key present on the node with exactly that value;
- requiredDuringSchedulingIgnoredDuringExecution, when set (even with no terms): its terms ORed;
  an empty term is skipped (it selects nothing), a term's expressions and fields are ANDed;
- matchExpressions on labels: In, NotIn, Exists, DoesNotExist, Gt, Lt (integers, ParseInt);
- matchFields on the node's fields (only metadata.name): In / NotIn with exactly one value;
- a requirement NewRequirement refuses (bad key, value or operator, wrong number of values, a
  Gt/Lt value that is no integer) makes its whole term match nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeGuard

Matcher = Callable[[Mapping[str, str]], bool]

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_GO_INT = re.compile(r"[+-]?[0-9]+")


class _Unparseable(ValueError):
    """A requirement NewRequirement would refuse: the term it is in matches nothing."""


def go_parse_int(text: object) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where it fails (no spaces, no underscores)."""
    if not isinstance(text, str) or not _GO_INT.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def is_label_key(key: object) -> TypeGuard[str]:
    """validation.IsQualifiedName: [prefix/]name, the prefix a DNS-1123 subdomain."""
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _NAME.fullmatch(name) is not None


def is_label_value(value: object) -> bool:
    """validation.IsValidLabelValue: at most 63 characters, alphanumeric at both ends."""
    return isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def _label_requirement(expr: Mapping) -> Matcher:
    """labels.NewRequirement + Requirement.Matches for one matchExpressions entry."""
    key, operator = expr.get("key"), expr.get("operator")
    values: Sequence = expr.get("values") or []
    if not is_label_key(key):
        raise _Unparseable(key)
    if operator in ("In", "NotIn"):
        if not values or not all(is_label_value(v) for v in values):
            raise _Unparseable(values)
        allowed = frozenset(values)
        if operator == "In":
            return lambda labels: key in labels and labels[key] in allowed
        return lambda labels: key not in labels or labels[key] not in allowed
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise _Unparseable(values)
        if operator == "Exists":
            return lambda labels: key in labels
        return lambda labels: key not in labels
    if operator in ("Gt", "Lt"):
        bound = go_parse_int(values[0]) if len(values) == 1 else None
        if bound is None:
            raise _Unparseable(values)
        greater = operator == "Gt"

        def compare(labels: Mapping[str, str]) -> bool:
            have = go_parse_int(labels.get(key)) if key in labels else None
            if have is None:
                return False
            return have > bound if greater else have < bound

        return compare
    raise _Unparseable(operator)


def _field_requirement(expr: Mapping) -> Matcher:
    """nodeSelectorRequirementsAsFieldSelector: In/NotIn with one value (fields.Set.Get gives "")."""
    key, operator, values = str(expr.get("key") or ""), expr.get("operator"), expr.get("values") or []
    if operator not in ("In", "NotIn") or len(values) != 1:
        raise _Unparseable(expr)
    wanted = values[0]
    if operator == "In":
        return lambda fields: fields.get(key, "") == wanted
    return lambda fields: fields.get(key, "") != wanted


def _term(term: Mapping) -> Callable[[Mapping[str, str], Mapping[str, str]], bool] | None:
    """newNodeSelectorTerm + nodeSelectorTerm.match; None for an empty term (selects nothing)."""
    expressions = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not expressions and not field_exprs:
        return None
    try:
        on_labels = [_label_requirement(e) for e in expressions]
        on_fields = [_field_requirement(f) for f in field_exprs]
    except _Unparseable:
        return lambda labels, fields: False

    def match(labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
        if not all(r(labels) for r in on_labels):
            return False
        # A node without a name has no fields, and then the field requirements are not checked.
        return not (on_fields and fields) or all(r(fields) for r in on_fields)

    return match


class RequiredNodeAffinity:
    """GetRequiredNodeAffinity(pod), compiled once and matched against many nodes."""

    __slots__ = ("_selector", "_terms")

    def __init__(self, pod: Mapping) -> None:
        spec = pod.get("spec") or {}
        self._selector = dict(spec.get("nodeSelector") or {})
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        self._terms = None
        if required is not None:
            compiled = (_term(t or {}) for t in required.get("nodeSelectorTerms") or [])
            self._terms = [t for t in compiled if t is not None]

    @property
    def has_terms(self) -> bool:
        """True when required node affinity is set (beyond spec.nodeSelector)."""
        return self._terms is not None

    @property
    def node_selector(self) -> Mapping[str, str]:
        return self._selector

    def match_selector(self, labels: Mapping[str, str]) -> bool:
        """labels.SelectorFromSet(spec.nodeSelector).Matches(node labels)."""
        return all(key in labels and labels[key] == value for key, value in self._selector.items())

    def match_terms(self, node: Mapping) -> bool:
        """LazyErrorNodeSelector.Match: some term matches the node (True when none are set)."""
        if self._terms is None:
            return True
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        name = metadata.get("name") or ""
        fields = {"metadata.name": name} if name else {}
        return any(term(labels, fields) for term in self._terms)

    def match(self, node: Mapping) -> bool:
        """RequiredNodeAffinity.Match: the nodeSelector and then the required terms."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        return self.match_selector(labels) and self.match_terms(node)


def matches(pod: Mapping, node: Mapping) -> bool:
    """Whether the NodeAffinity filter lets the pod onto the node."""
    return RequiredNodeAffinity(pod).match(node)
