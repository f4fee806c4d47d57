"""`ganggate plan --snapshot FILE`: an offline what-if on a snapshot of a real cluster.

Reads `kubectl get nodes,pods -A -o json` output (with `deviceclasses,resourceslices,
resourceclaims,resourceclaimtemplates` added to the kinds, GPUs published as DRA devices are
counted as the controller counts them: docs/dra.md), runs the controller's own decision core on
it once, and prints which gated gangs would be released now, where their pods would go (pods
per node), and why the others wait. Nothing is sent to any cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ganggate.contract import DEFAULT_MAX_POD_NUM, DEFAULT_SCHEDULER_NAMES
from ganggate.controller.config import BLIND_SECONDS
from ganggate.core.placement.explain import plural

#: The gang states the what-if reports on: every gang with a pod still gated.
GATED_STATES = ("waiting", "partial", "started", "incomplete", "conflict")


@dataclass
class GangPlan:
    """What the controller would do with one gated gang now."""

    gang: str
    state: str
    pods: int  # live pods present
    pod_num: int | None
    gpus: int  # GPUs requested by the gated pods
    fits: bool
    nodes: dict[str, int] = field(default_factory=dict)  # node -> pods placed there
    placement: dict[str, str | None] = field(default_factory=dict)  # pod -> node
    why: str = ""


@dataclass
class PlanReport:
    nodes: int
    ready_nodes: int
    pods: int
    free_gpus: int
    gangs: list[GangPlan]
    other_gangs: int  # released or running: nothing to decide


def plan_snapshot(
    nodes: list[dict],
    pods: list[dict],
    *,
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES,
    now: float | None = None,
    starvation_seconds: float = 300.0,
    blind_seconds: float | None = None,
    max_pod_num: int = DEFAULT_MAX_POD_NUM,
    policy: str = "plan",
    topology_levels: tuple[str, ...] = (),
    dra: Iterable[tuple[str, dict]] = (),
) -> PlanReport:
    """Run one decision round on the snapshot (pure: the snapshot is not changed). `dra`: the
    snapshot's DRA objects, (kind, object) in the order to apply (snapshot.DRA_KINDS)."""
    from ganggate.core.planner import decide, gpus
    from ganggate.core.state.cluster import ClusterState

    state = ClusterState(scheduler_names=scheduler_names, max_pod_num=max_pod_num, topology_levels=topology_levels)
    for kind, obj in dra:  # before the nodes and pods, as the controller's list does
        state.apply_dra(kind, "ADDED", obj)
    state.reset(nodes, pods)
    now = time.time() if now is None else now
    decisions, waitings = decide(state, now, policy=policy, starvation_seconds=starvation_seconds,
                                 blind_seconds=blind_seconds)
    decided = {d.gang_key: d for d in decisions}
    waiting = {w.gang_key: w for w in waitings}
    rows: list[GangPlan] = []
    others = 0
    for key in sorted(state.gangs):
        gang = state.gangs[key]
        if gang.state not in GATED_STATES:
            others += 1
            continue
        gated = gang.gated_pods()
        row = GangPlan(
            gang=f"{key[0]}/{key[1]}",
            state=gang.state,
            pods=gang.live_count,
            pod_num=gang.spec.pod_num if gang.spec else None,
            gpus=sum(gpus(p.request) for p in gated) // 1000,
            fits=key in decided,
        )
        if key in decided:
            decision = decided[key]
            row.placement = {k: v for k, v in sorted(decision.placement.items())}
            row.nodes = dict(sorted(Counter(v for v in decision.placement.values() if v).items()))
            left = len(gated) - len(decision.placement)
            row.why = decision.reason + (f"; {left} more stay gated until they fit" if left > 0 else "")
        elif key in waiting:
            row.why = f"{waiting[key].event_reason}: {waiting[key].message}"
        else:
            row.why = "release in progress" if gang.state != "started" else "extra pods wait for room"
        rows.append(row)
    free_gpus = sum(
        max(gpus(state.free(n)), 0) for n, info in state.nodes.items() if info.ready and not info.cordoned
    )
    return PlanReport(
        nodes=len(state.nodes),
        ready_nodes=sum(1 for n in state.nodes.values() if n.ready),
        pods=len(state.pods),
        free_gpus=free_gpus // 1000,
        gangs=rows,
        other_gangs=others,
    )


def format_table(report: PlanReport) -> str:
    """The report as text for people (pure)."""
    fitting = sum(1 for g in report.gangs if g.fits)
    lines = [
        f"{report.nodes} nodes ({report.ready_nodes} ready, {report.free_gpus} GPUs free on schedulable nodes), "
        f"{report.pods} pods; "
        f"{plural(len(report.gangs), 'gated gang')}, {fitting} would be released now"
        + (f"; {report.other_gangs} already released" if report.other_gangs else "")
    ]
    if not report.gangs:
        return lines[0] + "\n"
    rows = []
    for g in report.gangs:
        size = f"{g.pods}/{g.pod_num}" if g.pod_num is not None else str(g.pods)
        where = ", ".join(f"{node}: {count}" for node, count in g.nodes.items())
        rows.append([g.gang, g.state, size, str(g.gpus), "yes" if g.fits else "no", where or "-", g.why])
    headers = ["GANG", "STATE", "PODS", "GPUS", "FITS", "WHERE (pods per node)", "WHY"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines.append("")
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def format_json(report: PlanReport) -> str:
    return json.dumps(asdict(report), indent=2) + "\n"


def register(subparsers: Any) -> None:
    """Add the `plan` subcommand."""
    parser = subparsers.add_parser(
        "plan",
        help="what-if: which gated gangs fit now, on a snapshot of a cluster",
        description="Read `kubectl get nodes,pods -A -o json` output and show, as the gate controller "
        "would decide now, which gated gangs fit, where their pods would go (pods per node) and why "
        "the others wait. Offline: nothing is sent to any cluster.",
    )
    parser.add_argument("--snapshot", required=True, metavar="FILE",
                        help="output of `kubectl get nodes,pods -A -o json` (or -o yaml); - for stdin; with "
                        "deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates added to the kinds, "
                        "DRA GPUs are counted too")
    parser.add_argument("--scheduler-name", action="append", metavar="NAME",
                        help="a scheduler whose pods ganggate serves (repeatable; default default-scheduler)")
    parser.add_argument("--output", "-o", choices=["table", "json"], default="table", help="default: table")
    parser.add_argument("--starvation-seconds", type=float, default=300.0, metavar="SECONDS",
                        help="as the controller's flag: complete gangs waiting longer get capacity held "
                        "back on nodes whose pods all have deadlines (default 300)")
    parser.add_argument("--starvation-blind-seconds", type=float, default=None, metavar="SECONDS",
                        help="as the controller's flag: after this long, held back even where pods have no "
                        "deadline (default: the controller's, 21600)")
    parser.add_argument("--policy", choices=["plan", "count"], default="plan",
                        help="plan: ganggate's planner (default); count: the seed's GPU count check, "
                        "for comparison (no placement)")
    parser.add_argument("--max-pod-num", type=int, default=DEFAULT_MAX_POD_NUM,
                        help=f"largest group-pod-num accepted (default {DEFAULT_MAX_POD_NUM})")
    parser.add_argument("--topology-levels", default="", metavar="LABEL,...",
                        help="the controller's --topology-levels: plan gangs into as few domains as they fit")
    parser.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from ganggate.controller.config import parse_topology_levels
    from ganggate.core.state.snapshot import SnapshotError, check_objects, load_snapshot_dra, parse_snapshot_dra

    try:
        levels = parse_topology_levels(args.topology_levels)
    except ValueError as exc:
        print(f"ganggate plan: --topology-levels: {exc}", file=sys.stderr)
        return 2
    try:
        if args.snapshot == "-":
            nodes, pods, dra = parse_snapshot_dra(sys.stdin.read(), "stdin")
        else:
            nodes, pods, dra = load_snapshot_dra(args.snapshot)
        check_objects(nodes, pods)
    except SnapshotError as exc:
        print(f"ganggate plan: {exc}", file=sys.stderr)
        return 2
    report = plan_snapshot(
        nodes,
        pods,
        scheduler_names=tuple(args.scheduler_name or DEFAULT_SCHEDULER_NAMES),
        starvation_seconds=args.starvation_seconds,
        blind_seconds=BLIND_SECONDS if args.starvation_blind_seconds is None else args.starvation_blind_seconds,
        max_pod_num=args.max_pod_num,
        policy=args.policy,
        topology_levels=levels,
        dra=dra,
    )
    sys.stdout.write(format_json(report) if args.output == "json" else format_table(report))
    return 0
