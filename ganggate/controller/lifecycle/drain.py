"""Drains of nodes that run gangs, the shell: ganggate.core.policy.drain decides, this acts.

Each round (at most once a second while some node is cordoned) the gangs with released pods
on cordoned nodes are judged; a `restart` move deletes the gang's owned released pods through
the member-loss machinery (controller.lifecycle.memberloss: DisruptionTarget first, uid precondition,
the gang marked restarting so its replacements are admitted whole, not into the old run); a
`wait` move deletes nothing. Either way the gang's owner (controller.reporting.ownerevents), its pods on
the cordoned nodes and the nodes themselves get one Event per change (`kubectl describe job`,
`kubectl describe node`), with a log line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ganggate.controller.reporting.events import PodRef
from ganggate.core.policy.drain import DrainMove, plan_drains
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.gangs import GangKey

log = logging.getLogger(__name__)

_EVERY = 1.0  # seconds between two looks while nothing changed in the cordoned set


class NodeDrains:
    """Acts on `plan_drains` each round (see the module docstring)."""

    def __init__(self, state: ClusterState, events: Any, owner_events: Any, *, policy: str,
                 restart: Callable[[GangKey, list, str], None], busy: Callable[[GangKey], bool]) -> None:
        self.state = state
        self.events = events
        self.owner_events = owner_events
        self.policy = policy
        self.restart = restart  # GangLifecycle.restart_whole
        self.busy = busy
        self._layout = -1
        self._cordoned: frozenset[str] = frozenset()
        self._looked = (float("-inf"), -1)  # (when, state.version) of the last look
        self._told: dict[GangKey, tuple[str, tuple[str, ...], str]] = {}

    def cordoned(self) -> frozenset[str]:
        """The cordoned nodes (recounted only when the node layout changed)."""
        if self._layout != self.state.layout_version:
            self._layout = self.state.layout_version
            self._cordoned = frozenset(name for name, node in self.state.nodes.items() if node.cordoned)
        return self._cordoned

    def handle(self, now: float) -> list[DrainMove]:
        """Judge and act on the gangs on cordoned nodes; returns the moves made this time."""
        before = self._cordoned
        nodes = self.cordoned()
        if not nodes:
            self._told.clear()
            return []
        if nodes == before and (self._looked[1] == self.state.version or now - self._looked[0] < _EVERY):
            return []
        self._looked = (now, self.state.version)
        keys = {key for pod in self.state.pods.values()
                if pod.node_name in nodes and not pod.gated and pod.member
                and (key := self.state.gang_of(pod)) is not None}
        gangs = {key: self.state.gangs[key] for key in keys if key in self.state.gangs}
        labels = {name: self.state.nodes[name].labels for name in nodes if name in self.state.nodes}
        moves = plan_drains(gangs, nodes, self.policy, self._busy, labels)
        for key in [k for k in self._told if k not in gangs]:
            del self._told[key]
        for move in moves:
            self._act(move)
        return moves

    def _busy(self, key: GangKey) -> bool:
        gang = self.state.gangs.get(key)
        tearing = gang is not None and any(p.terminating and not p.terminated for p in gang.pods.values())
        return tearing or self.busy(key)

    def _act(self, move: DrainMove) -> None:
        key = move.gang_key
        told = (move.action, move.nodes, move.message)
        if self._told.get(key) != told:
            self._told[key] = told
            level = logging.INFO if move.action == "restart" else logging.WARNING
            log.log(level, "%s %s/%s: %s", move.reason, *key, move.message)
            gang = self.state.gangs[key]
            self.owner_events.tell(key, gang.live_pods(), move.reason, move.message)
            self.events.emit(move.on_nodes[0], move.reason, move.message, log_it=False)
            for node in move.nodes:  # kubectl describe node: kubelet's convention, uid = the node's name
                self.events.emit(PodRef("default", node, node, kind="Node"), move.reason, move.message,
                                 log_it=False)
        if move.action == "restart":
            self.restart(key, list(move.to_delete), move.message)
