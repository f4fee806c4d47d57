"""Topology in view: which levels the controller uses, and the domain of each node and gang.

The controller records its `--topology-levels` on the Lease it holds (annotation
`ganggate.io/topology-levels`, a comma-separated list, empty for none), so `ganggate status`
shows the domains as the leading controller sees them without the flag repeated. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

LEVELS_ANNOTATION = "ganggate.io/topology-levels"
HOSTNAME = "kubernetes.io/hostname"


def levels_annotation(levels: Iterable[str]) -> dict[str, str]:
    """The Lease annotation that records the controller's levels."""
    return {LEVELS_ANNOTATION: ",".join(levels)}


def levels_from_lease(lease: Mapping | None) -> tuple[str, ...] | None:
    """The levels a Lease records; None when it records none (no lease, or a controller that predates it)."""
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    if LEVELS_ANNOTATION not in annotations:
        return None
    return tuple(level.strip() for level in str(annotations[LEVELS_ANNOTATION]).split(",") if level.strip())


def describe_levels(levels: Iterable[str]) -> str:
    """`zone,block,rack` as a line's tail, or `none` (the controller places without topology)."""
    listed = ",".join(levels)
    return listed or "none (no --topology-levels: placement ignores node topology labels)"


def short_name(level: str) -> str:
    """A level's column-sized name: the label key after its prefix (`ganggate.io/rack` -> `rack`)."""
    return level.rsplit("/", 1)[-1]


def domain_levels(levels: Iterable[str]) -> tuple[str, ...]:
    """The levels that group nodes (the hostname level is the node itself)."""
    return tuple(level for level in levels if level != HOSTNAME)


def node_domain(labels: Mapping[str, str], levels: Iterable[str]) -> str:
    """The node's domain at the narrowest level that groups nodes: `rack=block-0-rack-1`, or `-`
    when the node carries none of the levels' labels."""
    for level in reversed(domain_levels(levels)):
        if labels.get(level):
            return f"{short_name(level)}={labels[level]}"
    return "-"


def gang_domain(node_labels: Iterable[Mapping[str, str]], levels: Iterable[str], required: str | None = None) -> str:
    """Where a gang's placed pods are: the narrowest domain holding them all (`rack=block-0-rack-1`),
    or how many domains of the widest level they span (`2 blocks`); a gang with no pod placed shows
    the level it requires (`needs one rack`), else `-`."""
    placed = list(node_labels)
    grouping = domain_levels(levels)
    if not placed:
        return f"needs one {short_name(required)}" if required else "-"
    for level in reversed(grouping):
        values = {labels.get(level) for labels in placed}
        if len(values) == 1 and None not in values:
            return f"{short_name(level)}={values.pop()}"
    if not grouping:
        return "-"
    widest = grouping[0]
    count = len({labels.get(widest) or "" for labels in placed})
    return f"{count} {short_name(widest)}" + ("" if count == 1 else "s")
