"""A pod's DRA claims as pkg/apis/core/validation/validation.go checks them at v1.35:
validatePodResourceClaims (spec.resourceClaims: a DNS-label name, unique, exactly one of
resourceClaimName and resourceClaimTemplateName) and validateResourceClaimNames (each
container's resources.claims names an entry of spec.resourceClaims, once per request).
"""

from __future__ import annotations

from typing import Any

from ganggate.sim.apimachinery.errors import Cause, duplicate, invalid_value, required
from ganggate.sim.apimachinery.objectmeta import dns1123_label_errors, dns1123_subdomain_errors


def validate_pod_resource_claims(spec: dict[str, Any]) -> list[Cause]:
    """Errors of spec.resourceClaims and of every container's resources.claims."""
    causes: list[Cause] = []
    claims = spec.get("resourceClaims") or []
    names: set[str] = set()
    for index, claim in enumerate(claims if isinstance(claims, list) else []):
        here = f"spec.resourceClaims[{index}]"
        name = (claim or {}).get("name") or ""
        if not name:
            causes.append(required(f"{here}.name"))
        else:
            causes += [invalid_value(f"{here}.name", name, m) for m in dns1123_label_errors(name)]
            if name in names:
                causes.append(duplicate(f"{here}.name", name))
            names.add(name)
        by_name, by_template = claim.get("resourceClaimName"), claim.get("resourceClaimTemplateName")
        if by_name and by_template:
            causes.append(invalid_value(here, claim, "at most one of `resourceClaimName` or "
                                        "`resourceClaimTemplateName` may be specified"))
        elif not by_name and not by_template:
            causes.append(invalid_value(here, claim, "must specify one of: `resourceClaimName`, "
                                        "`resourceClaimTemplateName`"))
        for field in ("resourceClaimName", "resourceClaimTemplateName"):
            if claim.get(field):
                causes += [invalid_value(f"{here}.{field}", claim[field], m)
                           for m in dns1123_subdomain_errors(str(claim[field]))]
    for kind in ("initContainers", "containers"):
        for c_index, container in enumerate(spec.get(kind) or []):
            if not isinstance(container, dict):
                continue
            seen: set[tuple[str, str]] = set()
            for index, ref in enumerate((container.get("resources") or {}).get("claims") or []):
                here = f"spec.{kind}[{c_index}].resources.claims[{index}]"
                name = (ref or {}).get("name") or ""
                if not name:
                    causes.append(required(f"{here}.name"))
                    continue
                key = (name, (ref or {}).get("request") or "")
                if key in seen:
                    causes.append(duplicate(here, name))
                seen.add(key)
                if name not in names:
                    causes.append(Cause(here, "FieldValueNotFound",
                                        f'Not found: "{name}": must be one of the names in pod.spec.resourceClaims'
                                        + ("" if names else " which are empty")))
    return causes
