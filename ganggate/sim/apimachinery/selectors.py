"""Label and field selectors, parsed and matched as the API server does.

Label selectors follow k8s.io/apimachinery/pkg/labels/selector.go (Parse): equality
(`a=b`, `a==b`, `a!=b`) and set-based (`a in (x,y)`, `a notin (x)`, `a`, `!a`), ANDed.
Field selectors follow k8s.io/apimachinery/pkg/fields/selector.go (`=`, `==`, `!=`), and each
resource supports only its own field labels (pkg/registry/core/pod/strategy.go
ToSelectableFields, pkg/registry/core/node/strategy.go NodeToSelectableFields, ...); any other
label is a 400 `field label not supported: <label>`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.sim.apimachinery.errors import ApiError, bad_request


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "=":
            return present and labels[self.key] == self.values[0]
        if self.operator == "!=":
            return not present or labels[self.key] != self.values[0]
        if self.operator == "in":
            return present and labels[self.key] in self.values
        if self.operator == "notin":
            return not present or labels[self.key] not in self.values
        if self.operator == "exists":
            return present
        return not present  # "!"


_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\)\s*)?$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a labelSelector query parameter; a syntax error is a 400 BadRequest."""
    if not text or not text.strip():
        return []
    requirements: list[Requirement] = []
    for part in _split_top_level(text):
        eq = _EQ_RE.match(part)
        if eq:
            op = "!=" if eq.group(2) == "!=" else "="
            requirements.append(Requirement(eq.group(1), op, (eq.group(3),)))
            continue
        match = _SET_RE.match(part)
        if not match:
            raise bad_request(f"unable to parse requirement: found '{part.strip()}', expected: in, notin, =, ==, !=, gt, lt")
        negate, key, op, values = match.groups()
        if op:
            if negate:
                raise bad_request(f"unable to parse requirement: '!' cannot be combined with '{op}'")
            vals = tuple(v.strip() for v in values.split(",") if v.strip())
            requirements.append(Requirement(key, op, vals))
        else:
            requirements.append(Requirement(key, "!" if negate else "exists"))
    return requirements


def labels_match(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


def _get(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_COMMON = ("metadata.name", "metadata.namespace")
# Field labels per store key (pkg/registry/core/*/strategy.go *ToSelectableFields).
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": _COMMON + (
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    ),
    "nodes": _COMMON + ("spec.unschedulable",),
    "namespaces": _COMMON + ("status.phase",),
    "events": _COMMON + (
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
        "reason", "reportingComponent", "source", "type",
    ),
}


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negate: bool
    value: str


def parse_field_selector(text: str | None, resource_key: str) -> list[FieldRequirement]:
    """Parse a fieldSelector for a resource; unknown field labels are a 400 as in the real server."""
    if not text or not text.strip():
        return []
    allowed = FIELD_LABELS.get(resource_key, _COMMON)
    out: list[FieldRequirement] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "!=" in part:
            path, value = part.split("!=", 1)
            negate = True
        elif "==" in part:
            path, value = part.split("==", 1)
            negate = False
        elif "=" in part:
            path, value = part.split("=", 1)
            negate = False
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path = path.strip()
        if path not in allowed:
            raise bad_request(f'field label not supported: {path}')
        out.append(FieldRequirement(path, negate, value.strip()))
    return out


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    if path == "source":  # events: source is source.component (pkg/registry/core/event/strategy.go)
        return _get(obj, "source.component") or _get(obj, "reportingComponent")
    if path == "spec.unschedulable":
        return "true" if _get(obj, "spec.unschedulable") == "true" else "false"
    if path == "spec.hostNetwork":
        return "true" if _get(obj, "spec.hostNetwork") == "true" else "false"
    return _get(obj, path)


def fields_match(requirements: list[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    for req in requirements:
        equal = _field_value(obj, req.path) == req.value
        if equal == req.negate:
            return False
    return True


Predicate = Callable[[Mapping[str, Any]], bool]


def node_name_equality(field_selector: str | None) -> str | None:
    """The node of a `spec.nodeName=<node>` requirement, so a list can use the nodeName index
    (as the watch cache indexes pods by spec.nodeName); None when there is none."""
    if not field_selector:
        return None
    for part in field_selector.split(","):
        if "!=" in part:
            continue
        path, _, value = part.replace("==", "=").partition("=")
        if path.strip() == "spec.nodeName" and value.strip():
            return value.strip()
    return None


def make_predicate(label_selector: str | None, field_selector: str | None, resource_key: str) -> Predicate | None:
    """A function telling whether an object matches both selectors, or None when both are empty."""
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, resource_key)
    if not labels and not fields:
        return None

    def predicate(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return labels_match(labels, meta.get("labels")) and fields_match(fields, obj)

    return predicate


__all__ = [
    "ApiError",
    "FieldRequirement",
    "Requirement",
    "fields_match",
    "labels_match",
    "make_predicate",
    "parse_field_selector",
    "parse_label_selector",
]
