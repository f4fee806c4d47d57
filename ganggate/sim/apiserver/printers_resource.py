"""Table columns of the resource.k8s.io/v1 kinds, as pkg/printers/internalversion/printers.go
prints them: printResourceClaim (NAME, STATE, AGE; state `pending`, `allocated`,
`allocated,reserved`, with `deleted` when a deletion is pending) and printResourceSlice
(NAME, NODE, DRIVER, POOL, AGE)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Column = dict[str, Any]


def claim_state(claim: dict[str, Any]) -> str:
    """resourceClaimState."""
    states = []
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        states.append("deleted")
    status = claim.get("status") or {}
    states.append("allocated" if status.get("allocation") else "pending")
    if status.get("reservedFor"):
        states.append("reserved")
    return ",".join(states)


def tables(column: Callable[..., Column], name_doc: str, age_doc: str,
           age: Callable[[dict[str, Any]], str]) -> dict[str, tuple[list[Column], Callable[[dict[str, Any]], list[Any]]]]:
    def name(obj: dict[str, Any]) -> str:
        return (obj.get("metadata") or {}).get("name", "")

    def slice_cells(obj: dict[str, Any]) -> list[Any]:
        spec = obj.get("spec") or {}
        return [name(obj), spec.get("nodeName") or "<none>", spec.get("driver") or "",
                (spec.get("pool") or {}).get("name") or "", age(obj)]

    return {
        "ResourceClaim": ([
            column("Name", name_doc, fmt="name"),
            column("State", "A summary of the current state (allocated, pending, reserved, etc.)."),
            column("Age", age_doc),
        ], lambda obj: [name(obj), claim_state(obj), age(obj)]),
        "ResourceSlice": ([
            column("Name", name_doc, fmt="name"),
            column("Node", "The node which provides instances of the resource."),
            column("Driver", "The driver which provides this resource."),
            column("Pool", "The pool which contains this resource."),
            column("Age", age_doc),
        ], slice_cells),
    }
