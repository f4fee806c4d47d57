"""Drains of nodes that run gangs: move the gang whole, or hold the drain and say why. Pure: no I/O.

`kubectl drain NODE` first cordons the node (spec.unschedulable), then evicts its pods through
the Eviction API, retrying every 5 s a pod whose PodDisruptionBudget refuses. ganggate's budget
of a released gang (controller.lifecycle.protection) has minAvailable = the gang's min-available, so a
drain that would take a gang below it would wait forever. What ganggate does when a node that
runs released members of a gang is cordoned (`--on-node-drain`):

- `restart` (default): if evicting the gang's pods on cordoned nodes would take it below
  min-available, ganggate restarts the gang whole through its owner, as after a member loss
  (controller.lifecycle.memberloss): it deletes the gang's released pods that have an owning controller
  (DisruptionTarget first, ganggate.controller.lifecycle.restart), their owner recreates them gated, and
  ganggate releases the new gang whole on nodes that can hold it (a cordoned node never). The
  old pods are then being deleted, which the Eviction API lets through whatever the budget
  (canIgnorePDB), so the drain finishes. A gang with a released pod that has no owning
  controller is never restarted (nothing would recreate that pod): it waits, as under `wait`.
- `wait`: nothing is deleted; the drain waits for the budget, and the gang's owner, its pods and
  the node get an Event saying why and what would let the drain go.

A gang that keeps min-available without its pods on cordoned nodes (an elastic gang with
spare members there) needs nothing: its budget lets the eviction through.

The label `ganggate.io/on-node-drain=restart|wait` overrides the flag: on a gang's pods (a Job's
pod template) for that gang, on a cordoned node for the gangs on it (`kubectl label node NODE
ganggate.io/on-node-drain=restart` lets a waiting drain go, the gang restarted as above).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ganggate.core.placement.explain import plural
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.pods import PodInfo

POLICIES = ("restart", "wait")
#: A node or a gang's pods may carry it (restart | wait) over the controller's flag: see gang_policy.
POLICY_LABEL = "ganggate.io/on-node-drain"
RESTART_REASON = "GangRestartingForDrain"
WAIT_REASON = "GangBlocksDrain"


@dataclass(frozen=True)
class DrainMove:
    """What to do about one gang that runs on cordoned nodes."""

    gang_key: GangKey
    nodes: tuple[str, ...]  # the cordoned nodes the gang's released pods run on
    action: str  # "restart" | "wait"
    to_delete: tuple[PodInfo, ...]  # restart: the gang's released pods with an owning controller
    on_nodes: tuple[PodInfo, ...]  # the gang's released pods on those nodes
    message: str

    @property
    def reason(self) -> str:
        return RESTART_REASON if self.action == "restart" else WAIT_REASON


def force_command(nodes: Iterable[str]) -> str:
    """The drain that deletes pods without the Eviction API (no budget consulted)."""
    return " ; ".join(f"kubectl drain {node} --ignore-daemonsets --delete-emptydir-data --disable-eviction"
                      for node in nodes)


def _owners(pods: Iterable[PodInfo]) -> list[str]:
    names = sorted({f"{ref.get('kind')} {ref.get('name')}" for p in pods if (ref := p.controller_ref)})
    return names


def _chosen(value: object, where: str, notes: list[str]) -> str | None:
    """A label's policy, or None (absent; an invalid value is noted and ignored)."""
    if value is None:
        return None
    if value in POLICIES:
        return str(value)
    notes.append(f"{where} label {POLICY_LABEL}={value} is neither restart nor wait: ignored")
    return None


def gang_policy(released: Iterable[PodInfo], nodes: Iterable[str], node_labels: Mapping[str, Mapping[str, str]],
                policy: str) -> tuple[str, str, list[str]]:
    """(policy, where it comes from, notes): a cordoned node's label first (restart if any says so:
    the operator letting a drain go), then the gang's pods' label (its oldest released pod's), then
    the controller's flag."""
    notes: list[str] = []
    chosen = [c for node in sorted(nodes)
              if (c := _chosen((node_labels.get(node) or {}).get(POLICY_LABEL), f"node {node}'s", notes))]
    if chosen:
        pick = "restart" if "restart" in chosen else "wait"
        return pick, f"node label {POLICY_LABEL}={pick}", notes
    oldest = min(released, key=lambda p: (p.created, p.key), default=None)
    value = _chosen((oldest.labels or {}).get(POLICY_LABEL) if oldest else None, "the pods'", notes)
    if value:
        return value, f"pod label {POLICY_LABEL}={value}", notes
    return policy, f"controller flag --on-node-drain={policy}", notes


def plan_drains(gangs: Mapping[GangKey, Gang], cordoned: Iterable[str], policy: str,
                busy: Callable[[GangKey], bool] = lambda _key: False,
                node_labels: Mapping[str, Mapping[str, str]] | None = None) -> list[DrainMove]:
    """One DrainMove per gang that a drain of the cordoned nodes would take below min-available.

    `busy` says a gang is already being restarted or torn down (nothing more to do for it). A gang
    whose pods on cordoned nodes are all spares (released - min-available) is left alone. The
    policy of a gang is `gang_policy`'s (node_labels: the cordoned nodes' labels)."""
    if policy not in POLICIES:
        raise ValueError(f"on_node_drain must be one of {', '.join(POLICIES)}, not {policy!r}")
    nodes = set(cordoned)
    if not nodes:
        return []
    moves = []
    for key in sorted(gangs):
        gang = gangs[key]
        if gang.spec is None or not gang.released_count or busy(key):
            continue
        released = [p for p in gang.live_pods() if not p.gated]
        on_nodes = tuple(sorted((p for p in released if p.node_name in nodes), key=lambda p: p.key))
        if not on_nodes or len(released) - len(on_nodes) >= gang.spec.min_available:
            continue
        where = sorted({p.node_name or "" for p in on_nodes})
        shown = ", ".join(where)
        head = (f"node {shown} is cordoned (a drain or a node upgrade) and runs "
                f"{len(on_nodes)} of the {plural(len(released), 'released pod')} of gang {key[0]}/{key[1]}, "
                f"which needs {gang.spec.min_available} to run")
        chosen, source, notes = gang_policy(released, where, node_labels or {}, policy)
        if notes:
            head += f" ({'; '.join(notes)})"
        bare = sorted(p.name for p in released if not p.owned)
        owners = _owners(released)
        if chosen == "restart" and not bare:
            to_delete = tuple(sorted((p for p in released if p.owned), key=lambda p: p.key))
            message = (f"{head}: ganggate restarts the gang whole through its owner ({', '.join(owners)}), so that "
                       f"it runs again on the other nodes once they can hold it, and the drain is not held by the "
                       f"gang's PodDisruptionBudget ({source}; the value wait keeps a running gang in place)")
            moves.append(DrainMove(key, tuple(where), "restart", to_delete, on_nodes, message))
            continue
        if bare:
            why = (f"{plural(len(bare), 'pod')} of it ({', '.join(bare[:3])}{', ...' if len(bare) > 3 else ''}) "
                   "without an owning controller, which ganggate never deletes")
            move_it = f"delete those pods yourself (`kubectl delete pods -n {key[0]} {' '.join(bare[:3])}`)"
        else:
            why = f"ganggate keeps running gangs in place: {source}"
            move_it = ("have ganggate restart it whole on the other nodes: "
                       + " ; ".join(f"`kubectl label node {node} {POLICY_LABEL}=restart`" for node in where))
        end = (f"end it (`kubectl delete {owners[0].split()[0].lower()} {owners[0].split()[1]} -n {key[0]}`)"
               if owners else "end it")
        message = (f"{head}: its PodDisruptionBudget refuses their eviction, so a drain of the node waits "
                   f"({why}). To let it go: {move_it}, or {end}, or force the drain: `{force_command(where)}` "
                   f"(it deletes the pods without the budget and without a DisruptionTarget condition: a Job "
                   f"counts them against its backoffLimit)")
        moves.append(DrainMove(key, tuple(where), "wait", (), on_nodes, message))
    return moves
