"""The resources kubesim serves, and the discovery documents that describe them.

The shapes follow the real server's discovery handlers (k8s.io/apiserver/pkg/endpoints/discovery:
APIVersions at /api, APIGroupList at /apis, APIGroup at /apis/<group>, APIResourceList at
/api/v1 and /apis/<group>/<version>); names, kinds, verbs and short names are those of
kube-apiserver (pkg/registry/*/rest/storage_*.go, `kubectl api-resources`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceInfo:
    """One served resource: where it lives, what it is called, what may be done to it."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """subresource name -> (kind, verbs)."""
    verbs: tuple[str, ...] = ALL_VERBS
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The store's key for the resource: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


RESOURCES: tuple[ResourceInfo, ...] = (
    ResourceInfo(
        "", "v1", "pods", "pod", "Pod", True, ("po",),
        {
            "binding": ("Binding", ("create",)),
            "eviction": ("Eviction", ("create",)),
            "status": ("Pod", ("get", "patch", "update")),
        },
        categories=("all",),
    ),
    # POST /api/v1/namespaces/{ns}/bindings: the older form of pods/{name}/binding.
    ResourceInfo("", "v1", "bindings", "binding", "Binding", True, verbs=("create",)),
    ResourceInfo("", "v1", "nodes", "node", "Node", False, ("no",), {"status": ("Node", ("get", "patch", "update"))}),
    ResourceInfo("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",),
                 {"status": ("Namespace", ("get", "patch", "update"))},
                 verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    ResourceInfo("", "v1", "events", "event", "Event", True, ("ev",)),
    ResourceInfo("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    ResourceInfo("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                 "mutatingwebhookconfiguration", "MutatingWebhookConfiguration", False),
    ResourceInfo("events.k8s.io", "v1", "events", "event", "Event", True, ("ev",)),
)

_BY_PATH: dict[tuple[str, str, str], ResourceInfo] = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KEY: dict[str, ResourceInfo] = {r.key: r for r in RESOURCES}


def lookup(group: str, version: str, plural: str) -> ResourceInfo | None:
    """The resource served at /api(s)/<group>/<version>/<plural>, if any."""
    return _BY_PATH.get((group, version, plural))


def by_key(key: str) -> ResourceInfo:
    """The resource for a store key; plain plural names of core resources are keys too."""
    info = _BY_KEY.get(key)
    if info is None:
        for candidate in RESOURCES:
            if candidate.plural == key:
                return candidate
        raise KeyError(key)
    return info


def groups() -> dict[str, list[str]]:
    """Non-core group name -> versions served, in registration order."""
    out: dict[str, list[str]] = {}
    for info in RESOURCES:
        if info.group and info.version not in out.setdefault(info.group, []):
            out[info.group].append(info.version)
    return out


def version_info() -> dict[str, Any]:
    """GET /version (k8s.io/apimachinery/pkg/version.Info)."""
    return {
        "major": "1",
        "minor": "31",
        "gitVersion": "v1.31.0-kubesim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-08-13T00:00:00Z",
        "goVersion": "go1.22.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    """GET /api."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_doc(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list() -> dict[str, Any]:
    """GET /apis."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(name, versions) for name, versions in groups().items()],
    }


def api_group(name: str) -> dict[str, Any] | None:
    """GET /apis/<group>."""
    versions = groups().get(name)
    if versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(name, versions)}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    """GET /api/v1 or /apis/<group>/<version>: the APIResourceList."""
    items: list[dict[str, Any]] = []
    for info in RESOURCES:
        if info.group != group or info.version != version:
            continue
        entry: dict[str, Any] = {
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": list(info.verbs),
        }
        if info.short_names:
            entry["shortNames"] = list(info.short_names)
        if info.categories:
            entry["categories"] = list(info.categories)
        items.append(entry)
        for sub, (kind, verbs) in info.subresources.items():
            sub_entry: dict[str, Any] = {
                "name": f"{info.plural}/{sub}",
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": kind,
                "verbs": list(verbs),
            }
            if sub == "eviction":
                sub_entry["group"] = "policy"
                sub_entry["version"] = "v1"
            items.append(sub_entry)
    if not items:
        return None
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": items}
