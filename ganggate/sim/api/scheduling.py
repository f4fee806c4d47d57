"""Workload and PodGroup names (KEP-4671 gang scheduling), as Kubernetes 1.37 serves them
(staging/src/k8s.io/api/scheduling/v1beta1/types.go; pkg/features/kube_features.go).

kubesim otherwise follows 1.35, whose `scheduling.k8s.io/v1alpha1` Workload (pods naming it by
`spec.workloadRef`) was replaced in 1.36 by the `v1alpha2` Workload/PodGroup split and promoted
to `v1beta1` in 1.37 with the shape kubesim serves: the shape users and controllers (Job,
JobSet, LeaderWorkerSet, Kueue) write from 1.37 on, behind the same `GenericWorkload` gate.
"""

from collections.abc import Mapping

GROUP = "scheduling.k8s.io"
VERSION = "v1beta1"
WORKLOADS = "workloads.scheduling.k8s.io"
PODGROUPS = "podgroups.scheduling.k8s.io"
PODGROUPS_PATH = f"/apis/{GROUP}/{VERSION}/podgroups"

# feature gates (pkg/features/kube_features.go): the API and the pod field; the scheduler's plugin
GENERIC_WORKLOAD = "GenericWorkload"
GANG_SCHEDULING = "GangScheduling"

# PodGroupStatus conditions (types.go PodGroupInitiallyScheduled, DisruptionTarget) and reasons
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
REASON_SCHEDULED = "Scheduled"

MAX_POD_GROUP_TEMPLATES = 8  # WorkloadMaxPodGroupTemplates
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


def pod_group_name(pod: Mapping) -> str | None:
    """The PodGroup a pod names (spec.schedulingGroup.podGroupName), or None."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {})
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


def gang_min_count(podgroup: Mapping) -> int | None:
    """spec.schedulingPolicy.gang.minCount, or None for a basic (non-gang) PodGroup."""
    gang = (((podgroup.get("spec") or {}).get("schedulingPolicy") or {}).get("gang"))
    if not isinstance(gang, Mapping):
        return None
    count = gang.get("minCount")
    return count if isinstance(count, int) and not isinstance(count, bool) else None
