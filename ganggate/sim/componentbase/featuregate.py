"""Feature gates as kubesim's components take them: `--feature-gates A=true,B=false`.

kubesim follows one Kubernetes release, 1.35, and its gate defaults (pkg/features/kube_features.go,
staging/src/k8s.io/apiserver/pkg/features/kube_features.go at v1.35.0). Each component reads the
gates it implements from the FeatureGates it is given; a gate kubesim does not know is refused, as
component-base's featuregate.Set refuses one ("unrecognized feature gate: X"), and so is setting a
GA gate locked to its default ("cannot set feature gate X to false, feature is locked to true").

`--scheduler-feature-gates` (kubesim's own) overrides gates for the scheduler stand-in alone, as a
cluster whose kube-scheduler runs with other flags than its kube-apiserver would.

`--scheduler-emulated-version 1.30` (kubesim's own) makes the scheduler stand-in take its gates'
defaults and locks from an older release, to try ganggate against an older kube-scheduler. Each
gate carries its versioned specs as kube_features.go declares them ({Version, Default, PreRelease,
LockToDefault}); a gate the release did not have yet is off and cannot be set there. A real 1.35
kube-scheduler's --emulated-version reaches back three releases only (1.32) and locks
SchedulerQueueingHints to true: 1.30 here stands for running a 1.30 kube-scheduler binary.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

RELEASE = "1.35"


EMULATABLE = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35")  # --scheduler-emulated-version values


@dataclass(frozen=True)
class Spec:
    """One versioned spec of a gate: from `version` on, this default, stage and lock."""

    version: str
    default: bool
    stage: str  # ALPHA, BETA, GA, DEPRECATED
    locked: bool = False


@dataclass(frozen=True)
class Gate:
    """One gate's 1.35 default, stage and lock, with the file that declares it, and (in
    `history`) its specs of earlier releases, oldest first."""

    default: bool
    stage: str  # ALPHA, BETA, GA, DEPRECATED
    locked: bool = False
    source: str = "pkg/features/kube_features.go"
    history: tuple[Spec, ...] = ()

    def at(self, version: str) -> Spec | None:
        """The spec in force at release `version` (None: the release did not have the gate)."""
        key = _release_key(version)
        found = None
        for spec in (*self.history, Spec(RELEASE, self.default, self.stage, self.locked)):
            if _release_key(spec.version) <= key:
                found = spec
        return found


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# The gates kubesim's behaviour depends on; a component consults only those it implements.
# Add a gate here with the 1.35 default and stage as the source declares them.
KNOWN: Mapping[str, Gate] = MappingProxyType({
    # KEP-5142: pop a backed-off pod at once when activeQ is empty (beta, on, since 1.33)
    "SchedulerPopFromBackoffQ": Gate(default=True, stage="BETA", history=(Spec("1.33", True, "BETA"),)),
    # KEP-4247: QueueingHints decide which cluster event requeues which unschedulable pod (beta, off in
    # 1.28-1.31, on in 1.32-1.33, GA and locked on since 1.34)
    "SchedulerQueueingHints": Gate(default=True, stage="GA", locked=True, history=(
        Spec("1.28", False, "BETA"), Spec("1.32", True, "BETA"), Spec("1.34", True, "GA", True))),
    # KEP-5278: the binding clears status.nominatedNodeName (pkg/registry/core/pod/storage
    # assignPod; alpha off in 1.34, beta on in 1.35); kube-apiserver's gate
    "ClearingNominatedNodeNameAfterBinding": Gate(default=True, stage="BETA", history=(
        Spec("1.34", False, "ALPHA"), Spec("1.35", True, "BETA"))),
    # KEP-3962: MutatingAdmissionPolicy, served as admissionregistration.k8s.io/v1beta1 (alpha 1.32,
    # beta and still off since 1.34; GA as v1 in 1.36). A real 1.35 server also needs
    # --runtime-config=admissionregistration.k8s.io/v1beta1=true; kubesim serves it with the gate alone.
    "MutatingAdmissionPolicy": Gate(default=False, stage="BETA",
                                    source="staging/src/k8s.io/apiserver/pkg/features/kube_features.go",
                                    history=(Spec("1.32", False, "ALPHA"),)),
    # KEP-4671: the Workload and PodGroup APIs and the pod field naming a PodGroup (alpha, off, since
    # 1.35; beta and still off by default in 1.37). kubesim serves the 1.37 v1beta1 shape behind it.
    "GenericWorkload": Gate(default=False, stage="ALPHA"),
    # KEP-4671: kube-scheduler's GangScheduling plugin (alpha, off, since 1.35; needs GenericWorkload).
    # Merged into GenericWorkload in 1.37 (kubernetes#139520); kubesim's scheduler, serving the 1.37
    # API, gang-schedules with GenericWorkload and takes GangScheduling=false as "plugin off".
    "GangScheduling": Gate(default=False, stage="ALPHA"),
    # KEP-5732: PodGroup schedulingConstraints (topology). Not in 1.35: alpha, off, since 1.36, as
    # the 1.37 PodGroup API kubesim serves declares it (+k8s:ifDisabled(...)=+k8s:forbidden).
    "TopologyAwareWorkloadScheduling": Gate(default=False, stage="ALPHA"),
    # KEP-4381: structured Dynamic Resource Allocation, resource.k8s.io/v1 (GA in 1.34, locked on)
    "DynamicResourceAllocation": Gate(default=True, stage="GA", locked=True, history=(
        Spec("1.26", False, "ALPHA"), Spec("1.32", False, "BETA"), Spec("1.34", True, "GA", True))),
    # KEP-5004: a DeviceClass's extendedResourceName serves extended-resource requests from DRA
    # devices (alpha in 1.34 and 1.35, off; beta in 1.36)
    "DRAExtendedResource": Gate(default=False, stage="ALPHA", history=(Spec("1.34", False, "ALPHA"),)),
})


class FeatureGateError(ValueError):
    """A --feature-gates value a real component would refuse; the message says why."""


@dataclass(frozen=True)
class FeatureGates:
    """The gates in force: each known gate's 1.35 default, overridden by what was set."""

    overrides: Mapping[str, bool] = field(default_factory=dict)
    version: str = RELEASE  # the release whose defaults unset gates take (--scheduler-emulated-version)

    def enabled(self, name: str) -> bool:
        """Whether gate `name` is on; a name kubesim does not know is a programming error."""
        if name in self.overrides:
            return self.overrides[name]
        try:
            spec = KNOWN[name].at(self.version)
        except KeyError:
            raise KeyError(f"kubesim knows no feature gate {name!r}") from None
        return spec is not None and spec.default

    def with_overrides(self, other: FeatureGates) -> FeatureGates:
        """These gates with `other`'s settings on top (the scheduler's own flags over the cluster's)."""
        version = other.version if other.version != RELEASE else self.version
        return FeatureGates({**self.overrides, **other.overrides}, version)

    def flag(self) -> str:
        """The --feature-gates value that gives these gates (empty when all are at their defaults)."""
        return ",".join(f"{name}={str(value).lower()}" for name, value in sorted(self.overrides.items()))

    def describe(self) -> str:
        """One line for a start-up banner: the gates set away from their 1.35 defaults."""
        changed = [f"{name}={str(value).lower()}" for name, value in sorted(self.overrides.items())
                   if (spec := KNOWN[name].at(self.version)) is None or value != spec.default]
        return ", ".join(changed) or f"{self.version} defaults"


def parse(text: str | None, version: str = RELEASE) -> FeatureGates:
    """Parse `A=true,B=false` as component-base's featuregate.Set does, against release `version`'s
    gates; FeatureGateError says what is wrong."""
    if version not in EMULATABLE:
        raise FeatureGateError(f"emulated version {version} is not one of {', '.join(EMULATABLE)}")
    overrides: dict[str, bool] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {name}")
        if name not in KNOWN or KNOWN[name].at(version) is None:
            known = ", ".join(sorted(n for n, g in KNOWN.items() if g.at(version) is not None)) or "none"
            raise FeatureGateError(f"unrecognized feature gate: {name} (kubesim {version} knows: {known})")
        lowered = value.lower()
        if lowered not in ("true", "false", "1", "0", "t", "f"):
            raise FeatureGateError(f"invalid value of {name}={value}, err: strconv.ParseBool: parsing {value!r}: "
                                   "invalid syntax")
        enabled = lowered in ("true", "1", "t")
        gate = KNOWN[name].at(version)
        assert gate is not None  # checked above: the gate is known at this version
        if gate.locked and enabled != gate.default:
            raise FeatureGateError(f"cannot set feature gate {name} to {str(enabled).lower()}, feature is locked "
                                   f"to {str(gate.default).lower()}")
        overrides[name] = enabled
    return FeatureGates(overrides, version)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--feature-gates and --scheduler-feature-gates; shared by `sim serve` and `sim up`."""
    parser.add_argument("--feature-gates", metavar="A=true,B=false", default="",
                        help=f"Kubernetes feature gates for every kubesim component, with the real names; "
                             f"unset gates keep their {RELEASE} defaults (docs/kubesim.md lists those kubesim knows)")
    parser.add_argument("--scheduler-feature-gates", metavar="A=true,B=false", default="",
                        help="gates for the scheduler stand-in alone, over --feature-gates (a cluster whose "
                             "kube-scheduler runs with other gates than its API server)")
    parser.add_argument("--scheduler-emulated-version", metavar="1.30", default=RELEASE, choices=EMULATABLE,
                        help=f"the kube-scheduler release whose gate defaults and locks the scheduler stand-in "
                             f"takes (default {RELEASE}; 1.30: no pop from backoff, no QueueingHints)")


def from_arguments(args: argparse.Namespace) -> tuple[FeatureGates, FeatureGates]:
    """(the cluster's gates, the scheduler's gates) from the two flags; FeatureGateError on a bad one."""
    try:
        cluster = parse(args.feature_gates)
    except FeatureGateError as exc:
        raise FeatureGateError(f"--feature-gates: {exc}") from None
    try:
        version = getattr(args, "scheduler_emulated_version", RELEASE)
        inherited = {name: value for name, value in cluster.overrides.items() if KNOWN[name].at(version) is not None}
        scheduler = FeatureGates(inherited, version).with_overrides(parse(args.scheduler_feature_gates, version))
    except FeatureGateError as exc:
        raise FeatureGateError(f"--scheduler-feature-gates: {exc}") from None
    return cluster, scheduler
