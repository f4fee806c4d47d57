"""The annotation contract shared by the webhook and the controller.

A pod joins a gang by carrying two annotations; ganggate holds it behind one scheduling
gate until the whole gang fits. Everything here is pure: it parses and validates, and
reports problems as `ContractError` values that name the annotation, the value and the rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

GROUP_NAME = "scheduling.k8s.io/group-name"
GROUP_POD_NUM = "scheduling.k8s.io/group-pod-num"
GROUP_MIN_AVAILABLE = "scheduling.k8s.io/group-min-available"
#: Optional: seconds a complete gang may wait before the controller reports it timed out
#: (one Warning Event GangTimedOut; nothing is deleted).
GROUP_TIMEOUT_SECONDS = "scheduling.k8s.io/group-timeout-seconds"
#: Optional: a node label (a topology level, e.g. example.com/rack): all of the gang's pods go
#: into one domain of that level (nodes with the same value), or the gang waits.
GROUP_TOPOLOGY_REQUIRED = "scheduling.k8s.io/group-topology-required"
#: Optional: a node label: the gang goes into as few domains of that level as it can (and of
#: the wider levels after it), but never waits for it.
GROUP_TOPOLOGY_PREFERRED = "scheduling.k8s.io/group-topology-preferred"
#: The label the controller adds to a gang's pods when it releases them (the selector of the
#: gang's PodDisruptionBudget) and to the budgets it makes; its value is `gang_label_value`.
GANG_LABEL = "ganggate.io/gang"
GATE_NAME = "scheduling.k8s.io/group-gate"
#: The controller's record of a release, written on each pod it releases (JSON: id, time, node,
#: gang, pods); a later run (after a crash, or another replica) reads it back to finish that
#: release under the same decision id, and a pod without gate or record bypassed the webhook.
DECISION_ANNOTATION = "ganggate.io/decision"

#: GPU sharing (docs/gpu-sharing.md), the contract of the gpushare device plugin and scheduler
#: extender (AliyunContainerService/gpushare-device-plugin pkg/gpu/nvidia/const.go,
#: gpushare-scheduler-extender pkg/utils/const.go). Node resources: the node's total GPU
#: memory across its cards (GiB, or MiB with the plugin's --memory-unit=MiB) and its card count.
SHARED_GPU_MEMORY = "aliyun.com/gpu-mem"
SHARED_GPU_COUNT = "aliyun.com/gpu-count"
#: Pod annotations written with the decision, read by the device plugin at Allocate
#: (podutils.go): the card index and the pod's amount (decimal ints, in the node's unit), the
#: assume time (unix nanoseconds) and "false" for assigned (the plugin sets "true" once it has
#: allocated). The extender also writes the card's total memory (ALIYUN_COM_GPU_MEM_DEV).
GPUSHARE_CARD_INDEX = "ALIYUN_COM_GPU_MEM_IDX"
GPUSHARE_POD_AMOUNT = "ALIYUN_COM_GPU_MEM_POD"
GPUSHARE_CARD_TOTAL = "ALIYUN_COM_GPU_MEM_DEV"
GPUSHARE_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
GPUSHARE_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
#: Set by the webhook on a pod it gated as a gang of one because it asks a shared GPU resource
#: (no gang annotations of its own): such a gang gets no PodDisruptionBudget, so a lone
#: inference pod stays as drainable as it was without ganggate.
SOLO_ANNOTATION = "ganggate.io/gang-of-one"
#: The shared resources a pod may ask in limits that make the webhook gate it (as a gang of
#: one when it has no gang annotations); configurable with the webhook's --shared-resource.
DEFAULT_SHARED_RESOURCES = (SHARED_GPU_MEMORY,)

#: The annotations that make a pod a gang member (one of them is enough to be checked).
GANG_ANNOTATIONS = (GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE, GROUP_TIMEOUT_SECONDS)
#: The topology annotations: read only on pods that carry GROUP_NAME (so the webhook's
#: matchConditions, which send pods with a GANG_ANNOTATIONS key, need not list them).
TOPOLOGY_ANNOTATIONS = (GROUP_TOPOLOGY_REQUIRED, GROUP_TOPOLOGY_PREFERRED)
#: Annotations that are immutable once a pod exists (the gang contract).
IMMUTABLE_ANNOTATIONS = GANG_ANNOTATIONS + TOPOLOGY_ANNOTATIONS
#: The largest group-timeout-seconds accepted: one year.
MAX_TIMEOUT_SECONDS = 365 * 24 * 3600

DEFAULT_MAX_POD_NUM = 10000
DEFAULT_SCHEDULER_NAMES = ("default-scheduler",)

# DNS-1123 label, as k8s.io/apimachinery/pkg/util/validation.IsDNS1123Label. Matched with
# fullmatch: "$" alone would also accept a trailing newline ("ddp\n").
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL_MAX = 63
# A plain decimal integer: no sign, no spaces, no leading zeros, no exponent.
_PLAIN_INT = re.compile(r"^[1-9][0-9]*$")
# A label key, as k8s.io/apimachinery/pkg/util/validation.IsQualifiedName: an optional
# DNS-1123 subdomain prefix (at most 253) and '/', then a name of at most 63 characters.
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class ContractError:
    """Why a pod's gang annotations are unacceptable."""

    annotation: str
    value: str | None
    rule: str

    def message(self) -> str:
        shown = "<absent>" if self.value is None else repr(self.value)
        return f"annotation {self.annotation}={shown}: {self.rule}"


@dataclass(frozen=True)
class GangSpec:
    """A pod's parsed gang membership."""

    name: str
    pod_num: int
    min_available: int
    #: The group-topology-required and -preferred levels (node label keys), when set: part of
    #: the spec, so pods of one gang that disagree on them put the gang in conflict.
    topology_required: str | None = None
    topology_preferred: str | None = None

    @property
    def is_partial(self) -> bool:
        """True when the gang may start with fewer than all of its pods."""
        return self.min_available < self.pod_num


def has_gang_annotations(annotations: Mapping[str, str] | None) -> bool:
    """True when the pod carries any of the gang annotations (so it must be checked)."""
    return annotations is not None and any(key in annotations for key in GANG_ANNOTATIONS)


def parse_gang(
    annotations: Mapping[str, str] | None, max_pod_num: int = DEFAULT_MAX_POD_NUM
) -> GangSpec | ContractError | None:
    """Parse a pod's gang annotations.

    Returns None for a pod that is not in a gang, a GangSpec for a valid member, and a
    ContractError naming the first broken rule otherwise.
    """
    annotations = annotations or {}
    if not has_gang_annotations(annotations):
        return None
    name = annotations.get(GROUP_NAME)
    num = annotations.get(GROUP_POD_NUM)
    min_av = annotations.get(GROUP_MIN_AVAILABLE)
    if name is None:
        present = next((key for key in GANG_ANNOTATIONS[1:] if annotations.get(key) is not None), GROUP_POD_NUM)
        return ContractError(GROUP_NAME, None, f"is required when {present} is set")
    if num is None:
        return ContractError(GROUP_POD_NUM, None, f"is required when {GROUP_NAME} is set")
    if not isinstance(name, str) or len(name) > _DNS1123_LABEL_MAX or not _DNS1123_LABEL.fullmatch(name):
        return ContractError(
            GROUP_NAME,
            name,
            "must be a DNS-1123 label: at most 63 characters, lower-case alphanumerics or '-', "
            "starting and ending with an alphanumeric",
        )
    pod_num = _parse_count(num, max_pod_num)
    if pod_num is None:
        return ContractError(
            GROUP_POD_NUM, num, f"must be a plain decimal integer from 1 to {max_pod_num}"
        )
    timeout = parse_timeout(annotations)
    if isinstance(timeout, ContractError):
        return timeout
    topology = parse_topology(annotations)
    if isinstance(topology, ContractError):
        return topology
    if min_av is None:
        return GangSpec(name, pod_num, pod_num, *topology)
    min_available = _parse_count(min_av, pod_num)
    if min_available is None:
        return ContractError(
            GROUP_MIN_AVAILABLE,
            min_av,
            f"must be a plain decimal integer from 1 to {GROUP_POD_NUM} ({pod_num})",
        )
    return GangSpec(name, pod_num, min_available, *topology)


def parse_timeout(annotations: Mapping[str, str] | None) -> int | ContractError | None:
    """The pod's group-timeout-seconds: None when absent, else a positive integer of seconds
    up to MAX_TIMEOUT_SECONDS, or a ContractError (the webhook denies such a pod)."""
    value = (annotations or {}).get(GROUP_TIMEOUT_SECONDS)
    if value is None:
        return None
    seconds = _parse_count(value, MAX_TIMEOUT_SECONDS)
    if seconds is None:
        return ContractError(
            GROUP_TIMEOUT_SECONDS, value, f"must be a plain decimal integer of seconds from 1 to {MAX_TIMEOUT_SECONDS}"
        )
    return seconds


def is_label_key(value: object) -> bool:
    """True for a valid Kubernetes label key ([prefix/]name, IsQualifiedName)."""
    if not isinstance(value, str) or not value:
        return False
    prefix, _, name = value.rpartition("/")
    if "/" in value and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name))


def parse_topology(annotations: Mapping[str, str] | None) -> tuple[str | None, str | None] | ContractError:
    """The gang's (required, preferred) topology levels, each a node label key or None; a
    ContractError (the webhook denies such a pod) for a value that is not a label key."""
    annotations = annotations or {}
    found: list[str | None] = []
    for key in (GROUP_TOPOLOGY_REQUIRED, GROUP_TOPOLOGY_PREFERRED):
        value = annotations.get(key)
        if value is not None and not is_label_key(value):
            return ContractError(
                key, value, "must be a node label key naming a topology level, e.g. topology.kubernetes.io/zone"
            )
        found.append(value)
    return found[0], found[1]


def gang_label_value(name: str) -> str:
    """The GANG_LABEL value of a gang: its name (a DNS-1123 label, so a valid label value)."""
    return name


def _parse_count(value: object, maximum: int) -> int | None:
    if not isinstance(value, str) or not _PLAIN_INT.fullmatch(value) or len(value) > 12:
        return None
    number = int(value)
    return number if 1 <= number <= maximum else None


def has_gate(pod_spec: Mapping | None) -> bool:
    """True when the pod spec still carries ganggate's scheduling gate."""
    gates = (pod_spec or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == GATE_NAME for g in gates)


def gang_annotations(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """The subset of annotations that make up the (immutable) gang contract."""
    annotations = annotations or {}
    return {key: annotations[key] for key in IMMUTABLE_ANNOTATIONS if key in annotations}
