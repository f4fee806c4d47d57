"""The resources kubesim serves, and the discovery documents that describe them.

The shapes follow the real server's discovery handlers (k8s.io/apiserver/pkg/endpoints/discovery:
APIVersions at /api, APIGroupList at /apis, APIGroup at /apis/<group>, APIResourceList at
/api/v1 and /apis/<group>/<version>); names, kinds, verbs and short names are those of
kube-apiserver (pkg/registry/*/rest/storage_*.go, `kubectl api-resources`).
Why this module is long: the resource registry and the Table printers of its kinds are read together.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ganggate.sim.apiserver.printers import MORE_TABLES, age, human_duration  # human_duration: re-exported

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
    feature_gate: str = ""
    """The feature gate the API server serves the resource behind (none: always served)."""

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
            "log": ("Pod", ("get",)),
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
    ResourceInfo("", "v1", "services", "service", "Service", True, ("svc",),
                 {"status": ("Service", ("get", "patch", "update"))}, categories=("all",)),
    ResourceInfo("batch", "v1", "jobs", "job", "Job", True, (),
                 {"status": ("Job", ("get", "patch", "update"))}, categories=("all",)),
    ResourceInfo("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    ResourceInfo("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                 "mutatingwebhookconfiguration", "MutatingWebhookConfiguration", False),
    # GA in 1.30 (pkg/registry/admissionregistration/rest/storage_apiserver.go); no status subresource here.
    ResourceInfo("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "validatingadmissionpolicy",
                 "ValidatingAdmissionPolicy", False, categories=("api-extensions",)),
    ResourceInfo("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                 "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", False,
                 categories=("api-extensions",)),
    # Beta in 1.35 behind the MutatingAdmissionPolicy gate (off by default): served only when it is on
    # (served() below; registry/mutatingadmissionpolicy.py).
    ResourceInfo("admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicies", "mutatingadmissionpolicy",
                 "MutatingAdmissionPolicy", False, categories=("api-extensions",), feature_gate="MutatingAdmissionPolicy"),
    ResourceInfo("admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicybindings",
                 "mutatingadmissionpolicybinding", "MutatingAdmissionPolicyBinding", False,
                 categories=("api-extensions",), feature_gate="MutatingAdmissionPolicy"),
    ResourceInfo("events.k8s.io", "v1", "events", "event", "Event", True, ("ev",)),
    ResourceInfo("scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", False, ("pc",)),
    ResourceInfo("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True, ("pdb",),
                 {"status": ("PodDisruptionBudget", ("get", "patch", "update"))}),
    ResourceInfo("", "v1", "podtemplates", "podtemplate", "PodTemplate", True),
    # resource.k8s.io/v1, GA in 1.34 (pkg/registry/resource/rest/storage_resource.go)
    ResourceInfo("resource.k8s.io", "v1", "deviceclasses", "deviceclass", "DeviceClass", False),
    ResourceInfo("resource.k8s.io", "v1", "resourceclaims", "resourceclaim", "ResourceClaim", True, (),
                 {"status": ("ResourceClaim", ("get", "patch", "update"))}),
    ResourceInfo("resource.k8s.io", "v1", "resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", True),
    ResourceInfo("resource.k8s.io", "v1", "resourceslices", "resourceslice", "ResourceSlice", False),
    # cluster-autoscaler's CRD (autoscaling.x-k8s.io_provisioningrequests.yaml), served as if installed
    ResourceInfo("autoscaling.x-k8s.io", "v1", "provisioningrequests", "provisioningrequest", "ProvisioningRequest", True,
                 ("provreq", "provreqs"), {"status": ("ProvisioningRequest", ("get", "patch", "update"))}),
    # KEP-4671 in its 1.37 shape (pkg/registry/scheduling/rest/storage_scheduling.go), behind GenericWorkload
    ResourceInfo("scheduling.k8s.io", "v1beta1", "workloads", "workload", "Workload", True,
                 feature_gate="GenericWorkload"),
    ResourceInfo("scheduling.k8s.io", "v1beta1", "podgroups", "podgroup", "PodGroup", True,
                 subresources={"status": ("PodGroup", ("get", "patch", "update"))}, feature_gate="GenericWorkload"),
)


def served(info: ResourceInfo, gates: Any = None) -> bool:
    """Whether the API server serves `info` with these feature gates (a FeatureGates; None: all
    gates at their defaults, under which no gated resource is served)."""
    return not info.feature_gate or (gates is not None and gates.enabled(info.feature_gate))

_BY_PATH: dict[tuple[str, str, str], ResourceInfo] = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KEY: dict[str, ResourceInfo] = {r.key: r for r in RESOURCES}


def lookup(group: str, version: str, plural: str, gates: Any = None) -> ResourceInfo | None:
    """The resource served at /api(s)/<group>/<version>/<plural>, if any (with these gates)."""
    info = _BY_PATH.get((group, version, plural))
    return info if info is not None and served(info, gates) else None


def by_key(key: str) -> ResourceInfo:
    """The resource for a store key; plain plural names of core resources are keys too."""
    info = _BY_KEY.get(key)
    if info is None:
        for candidate in RESOURCES:
            if candidate.plural == key:
                return candidate
        raise KeyError(key)
    return info


def groups(gates: Any = None) -> dict[str, list[str]]:
    """Non-core group name -> versions served, in registration order."""
    out: dict[str, list[str]] = {}
    for info in RESOURCES:
        if info.group and served(info, gates) and info.group and info.version not in out.setdefault(info.group, []):
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


def api_group_list(gates: Any = None) -> dict[str, Any]:
    """GET /apis."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(name, versions) for name, versions in groups(gates).items()],
    }


def api_group(name: str, gates: Any = None) -> dict[str, Any] | None:
    """GET /apis/<group>."""
    versions = groups(gates).get(name)
    if versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(name, versions)}


def resource_list(group: str, version: str, gates: Any = None) -> dict[str, Any] | None:
    """GET /api/v1 or /apis/<group>/<version>: the APIResourceList."""
    items: list[dict[str, Any]] = []
    for info in RESOURCES:
        if info.group != group or info.version != version or not served(info, gates):
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


# ---- server-side printing for `kubectl get` ------------------------------------------------------
# meta.k8s.io/v1 Table columns and cells as pkg/printers/internalversion/printers.go prints them
# (printPod, printNode, printNamespace, printJob, printService; printEvent, printLease, printMutatingWebhook in
# printers.py), the default table convertor (Name, Age) for other kinds,
# ages as k8s.io/apimachinery/pkg/util/duration.HumanDuration renders them.

Cells = Callable[[dict[str, Any]], list[Any]]


def _column(name: str, type_: str = "string", description: str = "", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


def _name(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def pod_status_reason(pod: dict[str, Any]) -> str:
    """printPod's STATUS: the phase, or status.reason, or SchedulingGated, or a waiting reason."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_cells(pod: dict[str, Any]) -> list[Any]:
    spec = pod.get("spec") or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    status = pod.get("status") or {}
    return [_name(pod), f"{ready}/{len(spec.get('containers') or [])}", pod_status_reason(pod), restarts, age(pod),
            status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", "<none>"]


def _node_cells(node: dict[str, Any]) -> list[Any]:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    state = {"True": "Ready", "False": "NotReady"}.get(conditions.get("Ready", ""), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")) or ["<none>"]
    info = (node.get("status") or {}).get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in (node.get("status") or {}).get("addresses") or []}
    wide = [addresses.get("InternalIP") or "<none>", addresses.get("ExternalIP") or "<none>",
            *(info.get(key) or "<unknown>" for key in ("osImage", "kernelVersion", "containerRuntimeVersion"))]
    return [_name(node), state, ",".join(roles), age(node), info.get("kubeletVersion", ""), *wide]


def _namespace_cells(namespace: dict[str, Any]) -> list[Any]:
    return [_name(namespace), (namespace.get("status") or {}).get("phase", ""), age(namespace)]


def _has_condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _stamp(text: str | None) -> datetime | None:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if text else None


def _job_cells(job: dict[str, Any]) -> list[Any]:
    """printJob: STATUS, COMPLETIONS (succeeded/completions), DURATION."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    state = next((label for kind, label in (("Complete", "Complete"), ("Failed", "Failed"), ("Suspended", "Suspended"),
                                             ("FailureTarget", "FailureTarget")) if _has_condition(job, kind)), "Running")
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    else:
        completions = f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    started, finished = _stamp(status.get("startTime")), _stamp(status.get("completionTime"))
    duration = ""
    if started is not None:
        duration = human_duration(((finished or datetime.now(UTC)) - started).total_seconds())
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    labels = ((spec.get("selector") or {}).get("matchLabels") or {})
    return [_name(job), state, completions, duration, age(job), ",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers), ",".join(f"{k}={v}" for k, v in sorted(labels.items()))]


def _service_cells(service: dict[str, Any]) -> list[Any]:
    """printService: TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S)."""
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external = spec.get("externalName") if kind == "ExternalName" else ",".join(spec.get("externalIPs") or []) or "<none>"
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [_name(service), kind, spec.get("clusterIP") or "<none>", external, ports, age(service), selector]


def _priority_class_cells(pc: dict[str, Any]) -> list[Any]:
    """printPriorityClass: VALUE, GLOBAL-DEFAULT, PREEMPTIONPOLICY."""
    return [_name(pc), pc.get("value", 0), bool(pc.get("globalDefault")), age(pc), pc.get("preemptionPolicy") or ""]


def _pdb_cells(pdb: dict[str, Any]) -> list[Any]:
    """printPodDisruptionBudget: MIN AVAILABLE, MAX UNAVAILABLE, ALLOWED DISRUPTIONS."""
    spec = pdb.get("spec") or {}
    def shown(value: object) -> str:
        return "N/A" if value is None else str(value)
    return [_name(pdb), shown(spec.get("minAvailable")), shown(spec.get("maxUnavailable")),
            int((pdb.get("status") or {}).get("disruptionsAllowed") or 0), age(pdb)]


_NAME = _column("Name", fmt="name", description="Name must be unique within a namespace.")
_AGE = _column("Age", description="CreationTimestamp is a timestamp representing the server time when this object was created.")

TABLES: dict[str, tuple[list[dict[str, Any]], Cells]] = {
    "Pod": ([
        _NAME,
        _column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
        _column("Status", description="The aggregate status of the containers in this pod."),
        _column("Restarts", "integer", "The number of times the containers in this pod have been restarted."),
        _AGE,
        _column("IP", description="IP address allocated to the pod.", priority=1),
        _column("Node", description="Name of the node where the pod is scheduled.", priority=1),
        _column("Nominated Node", description="Nominated node name.", priority=1),
        _column("Readiness Gates", description="Readiness gates of the pod.", priority=1),
    ], _pod_cells),
    "Node": ([
        _NAME,
        _column("Status", description="The status of the node"),
        _column("Roles", description="The roles of the node"),
        _AGE,
        _column("Version", description="Kubelet Version reported by the node."),
        _column("Internal-IP", description="List of addresses reachable to the node.", priority=1),
        _column("External-IP", description="List of addresses reachable to the node.", priority=1),
        _column("OS-Image", description="OS Image reported by the node from /etc/os-release "
                "(e.g. Debian GNU/Linux 7 (wheezy)).", priority=1),
        _column("Kernel-Version", description="Kernel Version reported by the node from 'uname -r' "
                "(e.g. 3.16.0-0.bpo.4-amd64).", priority=1),
        _column("Container-Runtime", description="ContainerRuntime Version reported by the node through runtime remote API "
                "(e.g. containerd://1.4.2).", priority=1),
    ], _node_cells),
    "Namespace": ([_NAME, _column("Status", description="The status of the namespace"), _AGE], _namespace_cells),
    "Job": ([
        _NAME,
        _column("Status", description="Status of the job."),
        _column("Completions", description="The number of pods which reached phase Succeeded."),
        _column("Duration", description="Time required to complete the job."),
        _AGE,
        _column("Containers", description="Names of each container in the template.", priority=1),
        _column("Images", description="Images referenced by each container in the template.", priority=1),
        _column("Selector", description="Selector of the job.", priority=1),
    ], _job_cells),
    "Service": ([
        _NAME,
        _column("Type", description="Type of the service."),
        _column("Cluster-IP", description="The cluster IP of the service."),
        _column("External-IP", description="The external IPs of the service."),
        _column("Port(s)", description="The ports of the service."),
        _AGE,
        _column("Selector", description="The selector of the service.", priority=1),
    ], _service_cells),
    "PriorityClass": ([
        _NAME,
        _column("Value", "integer", "Value is the integer value of this priority class."),
        _column("Global-Default", "boolean",
                "GlobalDefault specifies whether this PriorityClass should be considered as the default priority."),
        _AGE,
        _column("PreemptionPolicy", description="PreemptionPolicy is the Policy for preempting pods with lower priority."),
    ], _priority_class_cells),
    "PodDisruptionBudget": ([
        _NAME,
        _column("Min Available", description="The minimum number of pods that must be available simultaneously."),
        _column("Max Unavailable", description="The maximum number of pods that may be unavailable simultaneously."),
        _column("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
        _AGE,
    ], _pdb_cells),
}


def columns_for(kind: str) -> tuple[list[dict[str, Any]], Cells]:
    """The columns and the cell function of a kind (Name and Age for kinds without a printer)."""
    return TABLES.get(kind) or MORE_TABLES.get(kind) or ([_NAME, _AGE], lambda obj: [_name(obj), age(obj)])


#: metav1.IncludeObjectPolicy: what a Table row's `object` carries (the query's includeObject).
INCLUDE_OBJECT = ("None", "Metadata", "Object")


def row_object(obj: dict[str, Any], include: str, kind: str, api_version: str) -> dict[str, Any] | None:
    """handlers/response.go asTable: the whole object (Object), PartialObjectMetadata (Metadata, the
    default) or nothing (None)."""
    if include == "Object":
        return dict(obj, kind=kind, apiVersion=api_version)
    if include == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def table_of(kind: str, items: list[dict[str, Any]], rv: str, token: str | None = None,
             headers: bool = True, include: str = "Metadata", api_version: str = "") -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of the objects, with rows carrying what `include` asks (row_object)."""
    columns, cells = columns_for(kind)
    rows = [{"cells": cells(obj), "object": row_object(obj, include, kind, api_version)} for obj in items]
    meta: dict[str, Any] = {"resourceVersion": rv}
    if token:
        meta["continue"] = token
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": columns if headers else [], "rows": rows}


def table_event_line(kind: str, line: bytes, headers: bool, include: str = "Metadata", api_version: str = "") -> bytes:
    """A watch event whose object is rendered as a one-row Table (kubectl get --watch)."""
    event = json.loads(line)
    obj = event.get("object") or {}
    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        event["object"] = table_of(kind, [obj], rv, headers=headers, include=include, api_version=api_version)
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"
