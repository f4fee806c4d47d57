"""PriorityClasses (scheduling.k8s.io/v1) and the Priority admission plugin (pure).

- defaulting: pkg/apis/scheduling/v1/defaults.go SetDefaults_PriorityClass (preemptionPolicy
  PreemptLowerPriority);
- validation: pkg/apis/scheduling/validation/validation.go ValidatePriorityClass (names with the
  `system-` prefix are reserved for the two built-in classes, a user value is at most 1e9,
  preemptionPolicy PreemptLowerPriority or Never) and ValidatePriorityClassUpdate (value and
  preemptionPolicy are immutable);
- the built-in classes system-cluster-critical and system-node-critical, created at start
  (pkg/registry/scheduling/rest/storage_scheduling.go AddSystemPriorityClasses);
- admission: plugin/pkg/admission/priority/admission.go. On pod CREATE, spec.priorityClassName
  resolves into spec.priority and spec.preemptionPolicy (no class: the globalDefault class, the
  lowest-valued if several, and its name is written into the pod; none: priority 0,
  PreemptLowerPriority); an unknown class, or a priority or preemptionPolicy the pod sets that
  differs from the computed one, is 403 Forbidden. On PriorityClass CREATE/UPDATE a second
  globalDefault class is 403 Forbidden.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.errors import Cause, forbidden, not_supported
from ganggate.sim.apimachinery.objectmeta import validate_object_meta
from ganggate.sim.apiserver.watch import clone

KEY = "priorityclasses.scheduling.k8s.io"
SYSTEM_PREFIX = "system-"
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000  # pkg/apis/scheduling/types.go
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS = 0
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
NEVER = "Never"
PREEMPTION_POLICIES = [PREEMPT_LOWER_PRIORITY, NEVER]

# pkg/apis/scheduling/types.go SystemPriorityClasses.
SYSTEM_CLASSES: dict[str, tuple[int, str]] = {
    "system-node-critical": (SYSTEM_CRITICAL_PRIORITY + 1000,
                             "Used for system critical pods that must not be moved from their current node."),
    "system-cluster-critical": (SYSTEM_CRITICAL_PRIORITY,
                                "Used for system critical pods that must run in the cluster, but can be moved to another "
                                "node if necessary."),
}

Obj = dict[str, Any]


def system_classes() -> list[Obj]:
    """The built-in PriorityClass objects the API server creates at start."""
    return [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
         "value": value, "description": description, "preemptionPolicy": PREEMPT_LOWER_PRIORITY}
        for name, (value, description) in SYSTEM_CLASSES.items()
    ]


def default_priority_class(pc: Obj) -> None:
    """SetDefaults_PriorityClass."""
    if pc.get("preemptionPolicy") is None:
        pc["preemptionPolicy"] = PREEMPT_LOWER_PRIORITY


def prepare_create(pc: Obj) -> None:
    """priorityClassStrategy.PrepareForCreate: generation 1."""
    pc.setdefault("metadata", {})["generation"] = 1


def prepare_update(new: Obj, old: Mapping[str, Any]) -> None:
    """priorityClassStrategy.PrepareForUpdate: generation kept (nothing mutable bumps it)."""
    new.setdefault("metadata", {})["generation"] = (old.get("metadata") or {}).get("generation", 1)


def _no_status(new: Obj, old: Mapping[str, Any]) -> None:
    """PriorityClasses have no status subresource."""


def validate(pc: Mapping[str, Any]) -> list[Cause]:
    """ValidatePriorityClass."""
    causes = validate_object_meta(pc, namespaced=False)
    name = (pc.get("metadata") or {}).get("name") or ""
    value = pc.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        causes.append(errors.required("value"))
        value = 0
    if name.startswith(SYSTEM_PREFIX):
        known = SYSTEM_CLASSES.get(name)
        if known is None:
            detail = f"{name} is not a known system priority class"
        elif known[0] != value:
            detail = f"value of {name} PriorityClass must be {known[0]}"
        elif pc.get("globalDefault"):
            detail = f"globalDefault of {name} PriorityClass must be false"
        else:
            detail = ""
        if detail:
            causes.append(forbidden("metadata.name", f"priority class names with '{SYSTEM_PREFIX}' prefix are reserved "
                                                     f"for system use only. error: {detail}"))
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        causes.append(forbidden("value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"))
    policy = pc.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        causes.append(not_supported("preemptionPolicy", policy, PREEMPTION_POLICIES))
    return causes


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """ValidatePriorityClassUpdate: value and preemptionPolicy are immutable."""
    causes = []
    if new.get("value") != old.get("value"):
        causes.append(forbidden("value", "may not be changed in an update."))
    if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
        causes.append(errors.invalid_value("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable"))
    return causes


def _forbidden(resource: str, name: str, detail: str) -> errors.ApiError:
    """admission.NewForbidden: `<resource> "<name>" is forbidden: <detail>`."""
    return errors.ApiError(403, "Forbidden", f'{resource} "{name}" is forbidden: {detail}', name=name, kind=resource)


def global_default(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """getDefaultPriorityClass: the globalDefault class with the lowest value (several after a race)."""
    found = None
    for pc in classes:
        if pc.get("globalDefault") and (found is None or found.get("value", 0) > pc.get("value", 0)):
            found = pc
    return found


def admit_pod(pod: Obj, lookup: Callable[[str], Mapping[str, Any] | None],
              classes: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
    """admitPod on CREATE: resolve the class into spec.priority and spec.preemptionPolicy, or refuse.

    `lookup(name)` returns the PriorityClass or None; `classes()` lists them all.
    """
    spec = pod.setdefault("spec", {})
    name = (pod.get("metadata") or {}).get("name") or ""
    class_name = spec.get("priorityClassName") or ""
    if not class_name:
        default = global_default(classes())
        if default is None:
            priority, policy = DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS, PREEMPT_LOWER_PRIORITY
        else:
            priority, policy = default.get("value", 0), default.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
            spec["priorityClassName"] = default["metadata"]["name"]
    else:
        pc = lookup(class_name)
        if pc is None:
            raise _forbidden("pods", name, f"no PriorityClass with name {class_name} was found")
        priority, policy = pc.get("value", 0), pc.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise _forbidden("pods", name, f"the integer value of priority ({json.dumps(spec['priority'])}) must not be provided "
                                       f"in pod spec; priority admission controller computed {priority} from the given "
                                       "PriorityClass name")
    spec["priority"] = priority
    if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
        raise _forbidden("pods", name, f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be "
                                       f"provided in pod spec; priority admission controller computed {policy} from the "
                                       "given PriorityClass name")
    spec["preemptionPolicy"] = policy


def admit_priority_class(operation: str, pc: Mapping[str, Any],
                         classes: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
    """validatePriorityClass: only one globalDefault class may exist."""
    if not pc.get("globalDefault"):
        return
    existing = global_default(c for c in classes() if c["metadata"]["name"] != pc["metadata"]["name"])
    if existing is not None:
        name = pc["metadata"]["name"]
        raise _forbidden("priorityclasses.scheduling.k8s.io", name,
                         f"PriorityClass {existing['metadata']['name']} is already marked as default. Only one default can exist")


def admit(store: Any, operation: str, key: str, obj: Obj) -> None:
    """The Priority plugin over the API server's store: pods on CREATE, PriorityClasses on CREATE/UPDATE."""
    def lookup(name: str) -> Mapping[str, Any] | None:
        stored = store.lookup(KEY, "", name)
        return stored.obj if stored is not None else None

    def classes() -> list[Mapping[str, Any]]:
        return [stored.obj for _, stored in store.iter(KEY)]

    if key == "pods" and operation == "CREATE":
        admit_pod(obj, lookup, classes)
    elif key == KEY:
        admit_priority_class(operation, clone(obj), classes)
