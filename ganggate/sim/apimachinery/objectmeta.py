"""Names and object metadata, validated as k8s.io/apimachinery does (pure).

- names: k8s.io/apimachinery/pkg/util/validation/validation.go (IsDNS1123Label,
  IsDNS1123Subdomain, IsQualifiedName, IsValidLabelValue), with the messages it returns;
- object metadata: k8s.io/apimachinery/pkg/api/validation/objectmeta.go (ValidateObjectMeta:
  names, labels, annotations up to 256 KiB in total; ValidateObjectMetaUpdate: immutable
  name/namespace/uid/creationTimestamp);
- owner references: whether an object names an owner (metav1.OwnerReference by uid).

Every kind kubesim stores goes through these; the per-kind rules build on them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery.errors import Cause, forbidden, invalid_value, required, too_long

# ---- names (k8s.io/apimachinery/pkg/util/validation/validation.go) ---------------------------
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

DNS1123_LABEL_ERROR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_ERROR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUALIFIED_NAME_ERROR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def dns1123_label_errors(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        out.append(DNS1123_LABEL_ERROR)
    return out


def dns1123_subdomain_errors(value: str) -> list[str]:
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        out.append(DNS1123_SUBDOMAIN_ERROR)
    return out


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        prefix_errors: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        prefix_errors = ["prefix part " + e for e in dns1123_subdomain_errors(prefix)]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
            "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    out = list(prefix_errors)
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.match(name):
        out.append(QUALIFIED_NAME_ERROR)
    return out


def label_value_errors(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        out.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
            "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return out


# ---- object metadata ---------------------------------------------------------------------------
def validate_object_meta(obj: Mapping[str, Any], namespaced: bool, name_rule: str = "subdomain") -> list[Cause]:
    """ValidateObjectMeta: name (DNS subdomain or label), namespace presence, labels, annotations."""
    meta = obj.get("metadata") or {}
    causes: list[Cause] = []
    name = meta.get("name") or ""
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    else:
        check = dns1123_label_errors if name_rule == "label" else dns1123_subdomain_errors
        for message in check(name):
            causes.append(invalid_value("metadata.name", name, message))
    if namespaced and not meta.get("namespace"):
        causes.append(required("metadata.namespace"))
    if not namespaced and meta.get("namespace"):
        causes.append(forbidden("metadata.namespace", "not allowed on this type"))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(invalid_value("metadata.labels", labels, "must be a map of strings"))
        labels = {}
    for key, value in labels.items():
        for message in qualified_name_errors(key):
            causes.append(invalid_value("metadata.labels", key, message))
        if not isinstance(value, str):
            causes.append(invalid_value("metadata.labels", value, "must be a string"))
            continue
        for message in label_value_errors(value):
            causes.append(invalid_value("metadata.labels", value, message))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        causes.append(invalid_value("metadata.annotations", annotations, "must be a map of strings"))
        annotations = {}
    total = 0
    for key, value in annotations.items():
        for message in qualified_name_errors(key.lower()):
            causes.append(invalid_value("metadata.annotations", key, message))
        if not isinstance(value, str):
            causes.append(invalid_value(f"metadata.annotations[{key}]", value, "must be a string"))
            continue
        total += len(key) + len(value)
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def validate_object_meta_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidateObjectMetaUpdate: name, namespace, uid and creationTimestamp are immutable."""
    new_meta, old_meta = new.get("metadata") or {}, old.get("metadata") or {}
    causes = []
    for field in ("name", "namespace", "uid", "creationTimestamp"):
        if new_meta.get(field) and new_meta.get(field) != old_meta.get(field):
            causes.append(invalid_value(f"metadata.{field}", new_meta.get(field), "field is immutable"))
    return causes


# ---- owner references (k8s.io/apimachinery/pkg/apis/meta/v1 OwnerReference) ----------------

def refers_to(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether the object lists an owner with this uid (controller or not), as the garbage
    collector and delete propagation match owners."""
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])

