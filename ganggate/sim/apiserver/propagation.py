"""The propagation policies of a delete, as the API server applies them before removing an owner.

DeleteOptions.propagationPolicy (k8s.io/apiserver/pkg/registry/generic/registry/store.go
deletionFinalizersForGarbageCollection): Orphan and Foreground happen here, in the API server, because
kubesim's deletion is immediate (no finalizers): Orphan removes the ownerReference from the
dependents, as orphanDependents does behind the `orphan` finalizer; Foreground deletes the dependents
first, as the `foregroundDeletion` finalizer makes the owner wait for them. Background, the default of
most kinds, is the garbage collector's (ganggate.sim.controllers.garbagecollector).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.errors import Cause, not_supported
from ganggate.sim.apimachinery.objectmeta import refers_to
from ganggate.sim.apiserver.store import Store
from ganggate.sim.apiserver.watch import clone

POLICIES = ["Foreground", "Background", "Orphan"]


def propagation_policy(options: Mapping[str, Any], query: Mapping[str, str], default: str) -> str:
    """The policy a delete asks for (body or query), or the kind's default; 422 for a bad one (ValidateDeleteOptions)."""
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    orphan = options.get("orphanDependents")
    if orphan is None and "orphanDependents" in query:
        orphan = query["orphanDependents"] in ("true", "1", "True")
    causes: list[Cause] = []
    if policy is not None and policy not in POLICIES:
        causes.append(not_supported("propagationPolicy", policy, POLICIES))
    if policy is not None and orphan is not None:
        causes.append(errors.invalid_value("propagationPolicy", policy, "orphanDependents and deletionPropagation cannot be both set"))
    if causes:
        raise errors.invalid("DeleteOptions", "", causes)
    if policy:
        return str(policy)
    if orphan is not None:
        return "Orphan" if orphan else "Background"
    return default


def prepare_delete(store: Store, owner: Mapping[str, Any], namespace: str | None, policy: str) -> None:
    """Orphan: drop the owner's references from its pods. Foreground: delete its pods first."""
    uid = (owner.get("metadata") or {}).get("uid")
    if not uid or policy == "Background" or namespace is None:
        return
    for (ns, name), stored in list(store.iter("pods", namespace)):
        if not refers_to(stored.obj, uid):
            continue
        if policy == "Foreground":
            store.delete("pods", ns, name)
            continue
        pod = clone(stored.obj)
        refs = [r for r in pod["metadata"]["ownerReferences"] if r.get("uid") != uid]
        if refs:
            pod["metadata"]["ownerReferences"] = refs
        else:
            del pod["metadata"]["ownerReferences"]
        store.update("pods", pod, expect_rv=stored.obj["metadata"]["resourceVersion"])
