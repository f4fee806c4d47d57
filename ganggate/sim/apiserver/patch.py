"""PATCH bodies applied as kube-apiserver applies them (k8s.io/apiserver/pkg/endpoints/handlers/patch.go).

- application/json-patch+json: RFC 6902 (kubesim/apiserver/rfc6902.py).
- application/merge-patch+json: RFC 7386 (null deletes a key, lists are replaced).
- application/strategic-merge-patch+json: k8s.io/apimachinery/pkg/util/strategicpatch for the fields
  pods and nodes use. Lists with a `patchMergeKey` tag in k8s.io/api/core/v1/types.go are merged by
  that key (containers, initContainers, ephemeralContainers, volumes, env, schedulingGates,
  imagePullSecrets, resourceClaims by `name`; ports by `containerPort`; volumeMounts by `mountPath`;
  conditions by `type`; node addresses by `type`; ownerReferences by `uid`), lists of scalars with
  patchStrategy merge (finalizers) are unioned, every other list (tolerations, taints, args ...) is
  replaced. Directives: `$patch: delete|replace|merge` in maps and list items, `$retainKeys`,
  `$deleteFromPrimitiveList/<field>`; `$setElementOrder/<field>` is accepted and ignored (order kept).
- application/apply-patch+yaml (server-side apply) is not supported: 415.
"""

from __future__ import annotations

from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver import rfc6902
from ganggate.sim.apiserver.watch import clone

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
SUPPORTED = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# patchMergeKey per list field name (k8s.io/api/core/v1/types.go, k8s.io/apimachinery meta/v1 types.go).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "schedulingGates": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars with patchStrategy:"merge" (set union).
MERGED_SCALAR_LISTS = {"finalizers", "podCIDRs"}


def apply_patch(content_type: str, original: dict[str, Any], patch: Any, *, in_place: bool = False) -> dict[str, Any]:
    """The patched object; 400 for a malformed or inapplicable patch, 415 for others. A new dict,
    unless in_place: then a JSON patch may change `original` (a copy the caller owns and drops),
    which saves a deep copy of the whole object."""
    media = content_type.split(";")[0].strip().lower()
    if media == JSON_PATCH:
        if not isinstance(patch, list):
            raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            result = rfc6902.apply(original if in_place else clone(original), patch)
        except rfc6902.PatchError as exc:
            # handlers/patch.go applyJSPatch: NewGenericServerResponse(422, ...) with the error as a cause.
            raise errors.ApiError(
                422, "Invalid", "the server rejected our request due to an error in our request",
                causes=[errors.Cause("", "UnexpectedServerResponse", str(exc))],
            ) from exc
        if not isinstance(result, dict):
            raise errors.bad_request("patched object is not a JSON object")
        return result
    if not isinstance(patch, dict):
        raise errors.bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
    if media == MERGE_PATCH:
        return merge_patch(original, patch)
    if media == STRATEGIC_MERGE_PATCH:
        return strategic_merge(original, patch)
    raise errors.unsupported_media_type(media)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of a map (see the module docstring for the rules)."""
    return _merge_map(original, patch)


def _merge_map(original: Any, patch: dict[str, Any]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise errors.bad_request(f"Unknown patch type: {directive}")
    result = dict(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [item for item in result[field] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, original: Any, patch: list[Any]) -> list[Any]:
    original_list = original if isinstance(original, list) else []
    merge_key = MERGE_KEYS.get(field)
    if merge_key and all(isinstance(item, dict) for item in patch):
        if any(item.get("$patch") == "replace" for item in patch):
            return [clone(i) for i in patch if i.get("$patch") != "replace"]
        result = [clone(item) for item in original_list]
        for item in patch:
            if merge_key not in item:
                raise errors.bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
            position = next(
                (i for i, existing in enumerate(result)
                 if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]),
                None,
            )
            if item.get("$patch") == "delete":
                if position is not None:
                    del result[position]
                continue
            if position is None:
                result.append({k: clone(v) for k, v in item.items() if k != "$patch"})
            else:
                result[position] = _merge_map(result[position], item)
        return result
    if field in MERGED_SCALAR_LISTS and all(not isinstance(item, (dict, list)) for item in patch):
        result = list(original_list)
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    return clone(patch)
