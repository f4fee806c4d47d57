"""Container resource quantities, validated as kube-apiserver does (pure).

pkg/apis/core/validation/validation.go ValidateResourceRequirements, the parts gangs lean on:
every quantity parses (k8s.io/apimachinery/pkg/api/resource, compared exactly as Quantity.Cmp
does, in nano-units) and is not negative; a request is at most its limit; an extended resource
(`nvidia.com/gpu`) is not overcommitable, so it needs a limit and the request must equal it.
"""

from __future__ import annotations

from typing import Any

from ganggate.sim.apimachinery.errors import Cause, forbidden, invalid_value
from ganggate.sim.apimachinery.quantity import QUANTITY_PATTERN, QuantityError, parse_nanos


def validate_resources(resources: Any, path: str) -> list[Cause]:
    """One container's `resources` (limits and requests) at `path` (…containers[i].resources)."""
    causes: list[Cause] = []
    parsed: dict[str, dict[str, int]] = {}  # exact nano-units, so comparisons are Quantity.Cmp
    for kind in ("limits", "requests"):
        values = resources.get(kind) or {}
        if not isinstance(values, dict):
            causes.append(invalid_value(f"{path}.{kind}", values, "must be a map"))
            continue
        parsed[kind] = {}
        for resource, quantity in values.items():
            try:
                amount = parse_nanos(quantity)
            except QuantityError:
                causes.append(invalid_value(
                    f"{path}.{kind}[{resource}]", quantity,
                    f"quantities must match the regular expression '{QUANTITY_PATTERN}'"))
                continue
            if amount < 0:
                causes.append(invalid_value(f"{path}.{kind}[{resource}]", quantity,
                                            "must be greater than or equal to 0"))
            parsed[kind][resource] = amount
    for resource, amount in (parsed.get("requests") or {}).items():
        limit = (parsed.get("limits") or {}).get(resource)
        if limit is not None and amount > limit:
            causes.append(invalid_value(
                f"{path}.requests", (resources.get("requests") or {}).get(resource),
                f"must be less than or equal to {resource} limit of {(resources.get('limits') or {}).get(resource)}"))
        elif limit is None and "/" in resource and not resource.startswith("kubernetes.io/"):
            # Extended resources (nvidia.com/gpu) must have a limit equal to the request
            # (validateResourceRequirements: "Limit must be set for non overcommitable resources").
            causes.append(forbidden(f"{path}.limits", "Limit must be set for non overcommitable resources"))
    for resource, limit in (parsed.get("limits") or {}).items():
        request = (parsed.get("requests") or {}).get(resource)
        if "/" in resource and not resource.startswith("kubernetes.io/") and request is not None and request != limit:
            causes.append(invalid_value(
                f"{path}.requests", (resources.get("requests") or {}).get(resource),
                f"must be equal to {resource} limit of {(resources.get('limits') or {}).get(resource)}"))
    return causes
