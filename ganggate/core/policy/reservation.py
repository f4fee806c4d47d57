"""Room reserved for a gang that preempted others, read back from its pods' annotation.

Before it evicts anything, the controller writes `PREEMPTION_ANNOTATION` on every pod of the
preemptor: {"id", "time", "until", "nodes": {pod name: node}, "victims": ["ns/gang", ...]}.
While the gang still waits and `until` has not passed, a round holds its pods' requests on
those nodes out of every other gang's capacity, as `holdback.hold_back` holds room for a
starving gang (free goes negative until the victims are gone), and plans the gang itself onto
them first. Kept in the pods, the reservation outlives a restart and `ganggate status` reads
it. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ganggate.core.fit.resources import fits
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.explain import plural
from ganggate.core.policy.contention import Rivals, contested_nodes, place_uncontested
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.outcome import Unfit

# The annotation's name is defined beside PodInfo, which keeps its value; re-exported here.
from ganggate.core.state.pods import PodInfo, json_object, parse_time


@dataclass(frozen=True)
class Reservation:
    """Room a preemptor's pods hold on the nodes its victims leave, until `until`."""

    gang_key: GangKey
    id: str
    time: float
    until: float
    placement: dict[str, str]  # pod key -> node
    victims: tuple[str, ...]


def annotation_value(reservation_id: str, time: str, until: str, placement: Mapping[str, str],
                     victims: Sequence[str]) -> str:
    """The annotation's JSON (placement by pod key; the annotation names pods within the namespace)."""
    nodes = {key.partition("/")[2]: node for key, node in sorted(placement.items())}
    return json.dumps({"id": reservation_id, "time": time, "until": until, "nodes": nodes,
                       "victims": list(victims)}, separators=(",", ":"))


def _read(pod: PodInfo) -> dict[str, Any] | None:
    value = json_object(pod.reservation)
    if value is None or not isinstance(value.get("nodes"), dict) or not value.get("id"):
        return None
    return value


def read_reservation(gang: Gang) -> Reservation | None:
    """The reservation every live pod of the gang carries (one written in part, by a reserve
    that failed half-way, holds nothing): cheap for a gang without one (its first pod says)."""
    live = (p for p in gang.pods.values() if not p.terminated)
    first = next(live, None)
    value = _read(first) if first is not None else None
    if value is None or any((_read(p) or {}).get("id") != value["id"] for p in live):
        return None
    ns = gang.namespace
    placement = {f"{ns}/{name}": node for name, node in value["nodes"].items()
                 if isinstance(name, str) and isinstance(node, str) and f"{ns}/{name}" in gang.pods}
    victims = tuple(v for v in value.get("victims") or [] if isinstance(v, str))
    return Reservation(gang.key, str(value["id"]), parse_time(value.get("time")), parse_time(value.get("until")),
                       placement, victims)


def active_reservations(state: ClusterState, now: float) -> dict[GangKey, Reservation]:
    """Reservations of gangs still waiting whose time has not run out."""
    out: dict[GangKey, Reservation] = {}
    for key in state.reserving:  # gangs with a pod carrying one (kept by the events)
        gang = state.gangs.get(key)
        if gang is None or gang.state != "waiting":
            continue
        reservation = read_reservation(gang)
        if reservation is not None and reservation.until > now and reservation.placement:
            out[gang.key] = reservation
    return out


def hold(capacity: Capacity, state: ClusterState, reservation: Reservation, sign: int = 1) -> None:
    """Take the reserved pods' requests from their nodes (sign=-1 gives them back)."""
    for key, node in reservation.placement.items():
        pod = state.pods.get(key)
        if pod is not None and node in capacity.free:
            capacity.take(node, pod.request, sign)


def place_reserved(pods: Sequence[PodInfo], capacity: Capacity, need: int, reservation: Reservation,
                   rivals: Rivals, state: ClusterState) -> tuple[dict[str, str] | Unfit, bool]:
    """Plan a preemptor whose reservation has been given back to `capacity`: onto its reserved
    nodes when every pod fits there (uncontested), else wherever it fits now. Returns the
    placement (taken from capacity) or why it waits, and whether the reserved nodes were used."""
    by_key = {p.key: p for p in pods}
    chosen = [key for key in reservation.placement if key in by_key][:need] if need else []
    if len(chosen) >= need:
        taken: list[tuple[str, str]] = []
        for key in chosen:
            node = reservation.placement[key]
            if node not in capacity.free or not fits(by_key[key].request, capacity.free[node]):
                break
            capacity.take(node, by_key[key].request)
            taken.append((key, node))
        placement = dict(taken)
        if len(taken) == len(chosen) and not contested_nodes(placement, by_key, capacity, rivals):
            return placement, True
        for key, node in taken:
            capacity.take(node, by_key[key].request, -1)
    result, _ = place_uncontested(pods, capacity, need, rivals)
    if not isinstance(result, Unfit):
        return result, False
    return Unfit(waiting_message(reservation, state)), False


def waiting_message(reservation: Reservation, state: ClusterState) -> str:
    """What a preemptor waiting for its room says (its Event, and `ganggate status`)."""
    nodes = sorted(set(reservation.placement.values()))
    on = set(nodes)
    leaving = sum(1 for p in state.terminating.values() if p.node_name in on)
    victims = ", ".join(reservation.victims) or "lower-priority pods"
    return (f"preempting {victims} (preemption {reservation.id}): room reserved on "
            f"{plural(len(nodes), 'node')} ({', '.join(nodes)}); waiting for {plural(leaving, 'pod')} "
            f"there to finish")
