"""Kubernetes' own gang API (KEP-4671 PodGroup, scheduling.k8s.io/v1beta1) as a second source of
gangs beside the annotation contract (ganggate.contract). Pure: no I/O.

A pod joins a PodGroup gang by naming it in `spec.schedulingGroup.podGroupName`; the PodGroup
says `spec.schedulingPolicy.gang.minCount` (a `basic` policy is no gang). ganggate reads such a
gang as if its pods carried the annotations `group-name` = the PodGroup's name and
`group-pod-num` = `minCount` (and `group-topology-required` = the PodGroup's one topology
constraint key), so that everything ganggate does for annotation gangs it does for PodGroups.

Who admits a PodGroup's pods is `--podgroups` (webhook and controller) with `--native-gang-
scheduling` (whether the cluster's kube-scheduler runs the GangScheduling plugin, which neither
a pod nor the API shows):
- `gate`: ganggate gates and admits them, whatever the scheduler does;
- `auto` (default) and `create`: ganggate admits them unless the scheduler gang-schedules
  them natively, in which case their pods are left ungated; `create` also makes a PodGroup for
  every annotation gang.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ganggate.contract import GANG_ANNOTATIONS, GROUP_NAME, GROUP_POD_NUM, GROUP_TOPOLOGY_REQUIRED, has_gang_annotations

GROUP = "scheduling.k8s.io"
VERSION = "v1beta1"
PLURAL = "podgroups"
API_VERSION = f"{GROUP}/{VERSION}"
#: The PodGroup's condition the scheduler writes once the group is placed (terminal once True).
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
#: The versions read, preferred first: 1.37's beta, and 1.36's alpha (same gang policy; the
#: topology constraint is `topologyConstraints[].topologyKey` and the condition `PodGroupScheduled`).
VERSIONS = ("v1beta1", "v1alpha2")
CONDITION_TYPES = {"v1beta1": INITIALLY_SCHEDULED, "v1alpha2": "PodGroupScheduled"}
MODES = ("auto", "gate", "create")
#: The Event reason on a pod naming a PodGroup that does not exist (it waits, gated).
MISSING_REASON = "PodGroupNotFound"
#: Written by the webhook on a PodGroup pod it gates: the PodGroup it gated it for. The API server
#: drops spec.schedulingGroup after mutating admission when its GenericWorkload gate is off; this
#: record lets the controller tell the user why such a pod waits.
GATED_FOR_ANNOTATION = "ganggate.io/pod-group"
#: The Event reason on such a pod.
DROPPED_REASON = "PodGroupFieldDropped"


def pod_group_name(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod names (spec.schedulingGroup.podGroupName), or None."""
    spec = pod.get("spec")
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


def ganggate_admits(mode: str, native: bool) -> bool:
    """Whether ganggate gates and admits PodGroup pods: always under `gate`, and under `auto` and
    `create` unless the scheduler gang-schedules PodGroups itself."""
    if mode not in MODES:
        raise ValueError(f"podgroups must be one of {', '.join(MODES)}, not {mode!r}")
    return mode == "gate" or not native


def min_count(podgroup: Mapping[str, Any]) -> int | None:
    """spec.schedulingPolicy.gang.minCount, or None for a PodGroup that is not a gang."""
    policy = (podgroup.get("spec") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    count = gang.get("minCount") if isinstance(gang, Mapping) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None


def topology_key(podgroup: Mapping[str, Any]) -> str | None:
    """The key of the PodGroup's topology constraint (all pods in one domain), if it has one."""
    constraints = (podgroup.get("spec") or {}).get("schedulingConstraints") or {}
    topology = (constraints.get("topology") or constraints.get("topologyConstraints")
                if isinstance(constraints, Mapping) else None)
    first = topology[0] if isinstance(topology, list) and topology else None
    key = (first.get("key") or first.get("topologyKey")) if isinstance(first, Mapping) else None
    return key if isinstance(key, str) and key else None


def gang_annotations_of(podgroup: Mapping[str, Any]) -> dict[str, str] | None:
    """The annotations that say the same gang as the PodGroup, or None when it is no gang."""
    count = min_count(podgroup)
    if count is None:
        return None
    out = {GROUP_NAME: str((podgroup.get("metadata") or {}).get("name") or ""), GROUP_POD_NUM: str(count)}
    if (key := topology_key(podgroup)) is not None:
        out[GROUP_TOPOLOGY_REQUIRED] = key
    return out


def project(pod: dict[str, Any], podgroup: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pod as ganggate's core reads it: a member of its PodGroup's gang, told by the
    annotations the PodGroup stands for. A pod that carries gang annotations of its own, names
    no PodGroup, or whose PodGroup is missing or no gang, is returned as it is."""
    if podgroup is None or pod_group_name(pod) is None:
        return pod
    meta = pod.get("metadata") or {}
    if has_gang_annotations(meta.get("annotations")):
        return pod
    added = gang_annotations_of(podgroup)
    if added is None:
        return pod
    out = dict(pod)
    out["metadata"] = dict(meta, annotations={**(meta.get("annotations") or {}), **added})
    return out


def podgroup_for_gang(namespace: str, name: str, min_available: int, topology_required: str | None,
                      owners: list[dict[str, Any]] | None, version: str = VERSION) -> dict[str, Any]:
    """The PodGroup `--podgroups=create` makes for an annotation gang: its name, minCount = the
    gang's min-available, its required topology level, owned as its pods are (so it goes with them)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "ganggate"}}
    if owners:
        meta["ownerReferences"] = [dict(o, controller=False, blockOwnerDeletion=False) for o in copy.deepcopy(owners)]
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_available}}}
    if topology_required:
        spec["schedulingConstraints"] = ({"topology": [{"key": topology_required}]} if version == "v1beta1"
                                         else {"topologyConstraints": [{"topologyKey": topology_required}]})
    return {"apiVersion": f"{GROUP}/{version}", "kind": "PodGroup", "metadata": meta, "spec": spec}


def condition_type(podgroup: Mapping[str, Any]) -> str:
    """The scheduling condition of the PodGroup's version (PodGroupScheduled in v1alpha2)."""
    version = str(podgroup.get("apiVersion") or API_VERSION).rpartition("/")[2]
    return CONDITION_TYPES.get(version, INITIALLY_SCHEDULED)


def initially_scheduled(podgroup: Mapping[str, Any]) -> bool:
    """True once the PodGroupInitiallyScheduled condition is True (it stays so)."""
    kind = condition_type(podgroup)
    for condition in ((podgroup.get("status") or {}).get("conditions")) or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def condition_patch(podgroup: Mapping[str, Any], status: str, reason: str, message: str, now: str) -> dict | None:
    """A merge patch of the PodGroup's status that sets PodGroupInitiallyScheduled, or None when
    it says so already or is True already (a terminal state)."""
    kind = condition_type(podgroup)
    conditions = [c for c in ((podgroup.get("status") or {}).get("conditions")) or [] if isinstance(c, Mapping)]
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is not None and (current.get("status") == "True"
                                or (current.get("status"), current.get("reason"), current.get("message"))
                                == (status, reason, message)):
        return None
    since = current.get("lastTransitionTime") if current is not None and current.get("status") == status else now
    condition = {"type": kind, "status": status, "reason": reason, "message": message,
                 "lastTransitionTime": since, "observedGeneration": (podgroup.get("metadata") or {}).get("generation")}
    if condition["observedGeneration"] is None:
        del condition["observedGeneration"]
    rest = [dict(c) for c in conditions if c.get("type") != kind]
    return {"status": {"conditions": rest + [condition]}}


def conflicting_names(pod: Mapping[str, Any]) -> str | None:
    """Why a pod that names a PodGroup and carries gang annotations is refused, or None: a pod
    names its gang once (both may be given when they name the same gang)."""
    group = pod_group_name(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if group is None or not any(key in annotations for key in GANG_ANNOTATIONS):
        return None
    named = annotations.get(GROUP_NAME)
    if named == group:
        return None
    return (f"spec.schedulingGroup.podGroupName={group!r} and annotation {GROUP_NAME}={named!r} name two gangs: "
            "name the gang one way (or the same name both ways)")


def add_arguments(parser: Any) -> None:
    """--podgroups and --native-gang-scheduling, the same on the webhook and the controller."""
    parser.add_argument("--podgroups", choices=MODES, default="auto",
                        help="pods naming a PodGroup (spec.schedulingGroup): gate = ganggate admits them always; "
                        "auto = unless the scheduler gang-schedules them (--native-gang-scheduling); create = as "
                        "auto, and the controller makes a PodGroup for each annotation gang (default: auto)")
    parser.add_argument("--native-gang-scheduling", action="store_true",
                        help="the cluster's kube-scheduler gang-schedules PodGroups (its GenericWorkload and "
                        "GangScheduling feature gates are on); under --podgroups=auto|create their pods are "
                        "then left ungated")
