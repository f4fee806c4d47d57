"""`ganggate status`: a table of gangs and of nodes, from one list of the cluster.

`collect` lists nodes and pods once into a `ClusterState`; the "why" column comes from the
core's own `decide` (so it says what the controller would conclude now); `format_status` is
pure and turns the state plus the decisions into text; `lease_line` says who leads. Gangs
some of whose pods bypassed the gate show as `not-gated`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ganggate.controller.reporting.bypass import BypassTracker, describe
from ganggate.controller.reporting.topology_view import describe_levels, gang_domain, levels_from_lease, node_domain
from ganggate.controller.round.dra import list_into as list_dra
from ganggate.core.fit.resources import GPU
from ganggate.core.placement.explain import excess_note, plural
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.pods import parse_time


@dataclass
class GangRow:
    gang: str
    state: str
    present: int
    needed: int
    gpus: int
    waiting_since: str
    why: str
    domain: str = "-"


@dataclass
class NodeRow:
    node: str
    condition: str
    gpus: int
    used: int
    promised: int
    free: int
    domain: str = "-"
    #: GPU sharing: free shared GPU memory on the cards not given whole (None: no shared cards).
    shared_free: int | None = None


def age(seconds: float) -> str:
    """kubectl-style age: 45s, 3m12s, 2h5m, 3d4h."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"


def _gpus(milli: int) -> int:
    return milli // 1000


def gang_rows(state: ClusterState, decisions: Iterable[Any], waitings: Iterable[Any], now: float,
              namespace: str | None = None, budgets: Iterable[dict] = ()) -> list[GangRow]:
    """One row per gang (of the namespace, if given), ordered by namespace and name; budgets
    (PodDisruptionBudgets) say which released gangs a user's budget protects instead of ganggate's."""
    from ganggate.core.policy.budgets import foreign_budgets_over

    budgets = list(budgets)
    why: dict[tuple[str, str], str] = {}
    for waiting in waitings:
        why[waiting.gang_key] = f"{waiting.event_reason}: {waiting.message}"
    for decision in decisions:
        what = "roll forward" if decision.roll_forward else "fits"
        why[decision.gang_key] = f"{what}: {plural(len(decision.placement), 'pod')} to release ({decision.reason})"
    bypass = BypassTracker(state.scheduler_names)
    bypass.reset(state.pods.values())
    rows = []
    for key in sorted(set(state.gangs) | set(bypass.gangs)):
        if namespace is not None and key[0] != namespace:
            continue
        if key in bypass.gangs:
            rows.append(_bypass_row(bypass, key, state.gangs.get(key)))
            continue
        gang = state.gangs[key]
        live = gang.live_pods()
        spec = gang.spec
        needed = spec.pod_num if spec else 0
        gpus = sum(p.request.get(GPU, 0) for p in live)
        since = age(now - gang.complete_since) if gang.complete_since and gang.state in ("waiting", "partial") else "-"
        reason = why.get(key, "")
        if not reason and gang.conflict:
            reason = f"GangConflict: {gang.conflict}"
        if not reason and gang.state == "released":
            bound = sum(1 for p in live if p.node_name)
            reason = f"{bound} of {plural(len(live), 'pod')} bound"
        if not reason and gang.state == "started" and spec is not None and gang.release_room:
            reason = f"started with {len(gang.released_pods())} of {spec.pod_num} pods; extras wait for room"
        if note := excess_note(gang):
            reason = f"{reason}; {note}" if reason else note
        if budgets and gang.released_count and (names := foreign_budgets_over(gang, budgets)):
            note = f"protected by PodDisruptionBudget {', '.join(names)} (not ganggate's)"
            reason = f"{reason}; {note}" if reason else note
        state_text = lifecycle_state(gang, now, state)
        if not reason and state_text in ("restarting", "terminating"):
            going = sum(1 for p in gang.pods.values() if p.terminating and not p.terminated)
            reason = (f"{plural(going, 'pod')} going away for a disruption (a restart of the gang, a drain); "
                      "their owner recreates them and they are admitted whole" if state_text == "restarting"
                      else f"{plural(going, 'pod')} being deleted (the owner was deleted, or a drain)")
        if reason.startswith("GangCannotFit:") and state_text == "waiting":
            state_text = "cannot-fit"  # waits that cannot end stand out from waits for room
        placed = [state.nodes[p.node_name].labels for p in live if p.node_name in state.nodes]
        domain = gang_domain(placed, state.topology_levels, spec.topology_required if spec else None)
        rows.append(GangRow(f"{key[0]}/{key[1]}", state_text, len(live), needed, _gpus(gpus), since, reason, domain))
    return rows


def lifecycle_state(gang: Any, now: float, state: ClusterState | None = None) -> str:
    """The state column: the gang's state, plus what its life after admission adds:
    "waiting (timed out after 600s)", "running (broken: lost w-0, Failed)", and (given the
    cluster) "released (broken: w-1 pinned to node-3 cannot bind: PlanLost)"."""
    from ganggate.core.policy.planloss import CAUSE, stranded
    from ganggate.core.policy.shown_state import shown_state
    from ganggate.core.state.gangs import timed_out
    from ganggate.core.state.losses import losses_after_relist

    base = shown_state(gang)
    timeout = timed_out(gang, now)
    if timeout is not None:
        return f"{base} (timed out after {timeout}s)"
    if base in ("restarting", "terminating", "succeeded", "failed", "completing"):
        return base
    losses = losses_after_relist({gang.key: gang})
    if losses:
        shown = ", ".join(f"{loss.pod_key.split('/', 1)[1]}: {loss.cause}" for loss in losses[:3])
        more = f" and {len(losses) - 3} more" if len(losses) > 3 else ""
        return f"{base} (lost {shown}{more})" if base == "broken" else f"{base} (broken: lost {shown}{more})"
    lost = [(p, node) for p in sorted(gang.pods.values(), key=lambda p: p.key)
            if state is not None and (node := stranded(state, p)) is not None]
    if lost:
        shown = ", ".join(f"{p.name} pinned to {node} cannot bind" for p, node in lost[:3])
        more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
        return f"{base} (broken: {shown}{more}: {CAUSE})"
    return base


def _bypass_row(bypass: BypassTracker, key: tuple[str, str], gang: Any) -> GangRow:
    """A gang some of whose pods bypassed the gate."""
    report = bypass.report(key, gang)
    live = gang.live_pods() if gang is not None else [p for p in report.pods if not p.terminated]
    needed = gang.spec.pod_num if gang is not None and gang.spec is not None else 0
    gpus = sum(p.request.get(GPU, 0) for p in live)
    return GangRow(f"{key[0]}/{key[1]}", "not-gated", len(live), needed, _gpus(gpus), "-",
                   f"GangNotGated: {describe(report)}")


def lease_line(lease: dict | None, namespace: str, name: str, now: float) -> str:
    """Who leads, from the Lease (None: not found)."""
    where = f"{namespace}/{name}"
    if lease is None:
        return f"controller: no controller is leading (lease {where} not found)"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    renewed = parse_time(spec.get("renewTime"))
    expires = renewed + float(spec.get("leaseDurationSeconds") or 0)
    if not holder:
        return f"controller: no controller is leading (lease {where} given up {age(now - renewed)} ago)"
    if expires < now:
        return (f"controller: no controller is leading (lease {where} expired {age(now - expires)} ago, "
                f"last holder {holder})")
    return f"controller: leader {holder} (lease renewed {age(now - renewed)} ago)"


def node_rows(state: ClusterState) -> list[NodeRow]:
    rows = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        condition = "Ready" if node.ready else "NotReady"
        if node.cordoned:
            condition += ",SchedulingDisabled"
        alloc = node.allocatable.get(GPU, 0)
        used = node.used.get(GPU, 0)
        promised = node.promised.get(GPU, 0)
        free = _gpus(alloc - used - promised)
        cards = state.cards(name)
        shared = None
        if cards is not None:  # a card shared by any pod cannot be given whole: only idle cards count
            free = min(free, cards.idle())
            whole = cards.whole_cards()
            shared = sum(cards.free(card) for card in range(len(cards.capacity)) if card not in whole)
        rows.append(NodeRow(name, condition, _gpus(alloc), _gpus(used), _gpus(promised), max(0, free),
                            node_domain(node.labels, state.topology_levels), shared))
    return rows


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def format_status(state: ClusterState, decisions: Iterable[Any], waitings: Iterable[Any], now: float,
                  namespace: str | None = None, budgets: Iterable[dict] = ()) -> str:
    """The two tables as text (pure)."""
    gangs = gang_rows(state, decisions, waitings, now, namespace, budgets)
    topology = bool(state.topology_levels)  # a DOMAIN column only where the controller places by topology
    gang_table = _table(
        ["GANG", "STATE", "PODS", "GPUS", *(["DOMAIN"] if topology else []), "WAITING", "WHY"],
        [[g.gang, g.state, f"{g.present}/{g.needed or '?'}", str(g.gpus), *([g.domain] if topology else []),
          g.waiting_since, g.why] for g in gangs],
    ) if gangs else "No gangs" + (f" in namespace {namespace}." if namespace else ".")
    nodes = node_rows(state)
    shared = any(n.shared_free is not None for n in nodes)  # GPU sharing: the shared room beside whole cards
    node_table = _table(
        ["NODE", "STATUS", "GPUS", "USED", "PROMISED", "FREE", *(["SHARED-FREE"] if shared else []),
         *(["DOMAIN"] if topology else [])],
        [[n.node, n.condition, str(n.gpus), str(n.used), str(n.promised), str(n.free),
          *([str(n.shared_free) if n.shared_free is not None else "-"] if shared else []),
          *([n.domain] if topology else [])] for n in nodes],
    ) if nodes else "No nodes."
    return gang_table + "\n\n" + node_table + "\n"


async def list_all(list_fn: Any, page_size: int = 500) -> list[dict]:
    """Every object of a list call, page by page, as plain dicts."""
    from ganggate.kube.calls import Backoff, call_json, with_retries

    items: list[dict] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size}
        if token:
            kwargs["_continue"] = token
        body = await with_retries(functools.partial(call_json, list_fn, verb="list", **kwargs), Backoff(attempts=5))
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items


async def collect(api_client: Any, scheduler_names: tuple[str, ...] = ("default-scheduler",),
                  max_pod_num: int = 10000, topology_levels: tuple[str, ...] = ()) -> ClusterState:
    """List nodes and pods once into a ClusterState."""
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    nodes = await list_all(core.list_node)
    pods = await list_all(core.list_pod_for_all_namespaces)
    from ganggate.controller.status.podgroups import list_podgroups, project_all

    pods = project_all(pods, await list_podgroups(api_client, list_all))  # PodGroup gangs ganggate admits
    state = ClusterState(scheduler_names=scheduler_names, max_pod_num=max_pod_num, topology_levels=topology_levels)
    await list_dra(api_client, state)  # DRA devices, claims and templates (controller.round.dra)
    state.reset(nodes, pods)
    return state


async def list_budgets(api_client: Any) -> list[dict]:
    """Every PodDisruptionBudget, or none when they cannot be listed (status goes on without)."""
    from kubernetes_asyncio import client

    from ganggate.kube.calls import ApiCallError

    try:
        return await list_all(client.PolicyV1Api(api_client).list_pod_disruption_budget_for_all_namespaces)
    except ApiCallError:
        return []


async def read_lease(api_client: Any, name: str, namespace: str) -> tuple[dict | None, str]:
    """The Lease as the API has it now (None when absent or unreadable) and its lease_line."""
    from kubernetes_asyncio import client

    from ganggate.kube.calls import ApiCallError, call_json

    try:
        lease = await call_json(client.CoordinationV1Api(api_client).read_namespaced_lease, name, namespace,
                                verb="get")
    except ApiCallError as exc:
        if exc.status != 404:
            return None, f"controller: cannot read lease {namespace}/{name}: {exc}"
        lease = None
    return lease, lease_line(lease, namespace, name, time.time())


async def status_text(api_client: Any, namespace: str | None = None, policy: str = "plan",
                      scheduler_names: tuple[str, ...] = ("default-scheduler",),
                      lease: tuple[str, str] | None = None, topology_levels: tuple[str, ...] | None = (),
                      gpus: bool = False, output: str = "text") -> str:
    """What `ganggate status` prints; lease (name, namespace) adds who leads; gpus: the GPU
    cards' shared memory instead (controller.status.gpushare). topology_levels None: the levels the
    leading controller records on its lease (topology_view), else none. output "json" or "yaml":
    the tables as a document (controller.status.output)."""
    from ganggate.controller.config import BLIND_SECONDS
    from ganggate.core.planner import decide

    head, source = "", "--topology-levels"
    if lease is not None:
        record, head = await read_lease(api_client, *lease)
        if topology_levels is None:
            topology_levels, source = levels_from_lease(record), "from the controller's lease"
    if topology_levels:
        head += ("\n" if head else "") + f"topology levels: {describe_levels(topology_levels)} ({source})"
    state = await collect(api_client, scheduler_names, topology_levels=topology_levels or ())
    if gpus:
        from ganggate.controller.status.gpushare import format_gpus

        return format_gpus(state)
    budgets = await list_budgets(api_client)
    now = time.time()
    # The controller's default limits: a waiting gang's row says what the controller's Event says
    # (room held back, and when it starts where pods have deadlines).
    decisions, waitings = decide(state, now, policy=policy, blind_seconds=BLIND_SECONDS)
    if output != "text":
        from ganggate.controller.status.output import render, status_document

        leader = next((line for line in head.splitlines() if line.startswith("controller:")), None)
        rows = gang_rows(state, decisions, waitings, now, namespace, budgets)
        return render(status_document(rows, node_rows(state), leader, topology_levels or ()), output)
    text = format_status(state, decisions, waitings, now, namespace, budgets)
    from ganggate.controller.status.provisioning import format_requests, list_requests

    asked = format_requests(await list_requests(api_client), namespace)
    if asked:
        text += "\n" + asked
    from ganggate.controller.status.podgroups import native_text

    text += await native_text(api_client, namespace, list_all, _table)  # PodGroups the scheduler's own plugin admits
    return head + "\n\n" + text if head else text


def run_status(args: argparse.Namespace) -> int:
    """The `ganggate status` command."""
    import sys

    from ganggate.controller.config import parse_topology_levels
    from ganggate.kube.calls import ApiCallError
    from ganggate.kube.client import ConfigError, make_api_client

    if getattr(args, "gpus", False) and getattr(args, "output", "text") != "text":
        print("error: --gpus prints a table only: leave out -o/--output", file=sys.stderr)
        return 2
    try:
        levels = None if args.topology_levels is None else parse_topology_levels(args.topology_levels)
    except ValueError as exc:
        print(f"error: --topology-levels: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        try:
            api_client = await make_api_client(args.kubeconfig)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        try:
            from ganggate.controller.status.output import watch
            from ganggate.kube.leader import lease_namespace

            names = tuple(args.scheduler_name or ["default-scheduler"])
            output = getattr(args, "output", "text")

            def read() -> Any:
                return status_text(api_client, args.namespace, scheduler_names=names,
                                   lease=(args.lease_name, lease_namespace(args.lease_namespace)),
                                   topology_levels=levels, gpus=getattr(args, "gpus", False), output=output)

            if getattr(args, "watch", False):  # until Ctrl-C
                await watch(read, lambda text: print(text, end="", flush=True), output=output)
                return 0
            text = await read()
        except ApiCallError as exc:
            print(f"error: cannot list the cluster: {exc}", file=sys.stderr)
            return 1
        finally:
            await api_client.close()
        print(text, end="")
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:  # --watch ends with Ctrl-C
        return 0
