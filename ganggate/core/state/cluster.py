"""The controller's incremental picture of the cluster: nodes, their use, gangs and promises.

Fed by list and watch events, `ClusterState` keeps per node the allocatable resources, the sum
of the effective requests of the non-terminated pods bound to it (`used`) and the requests of
pods released by ganggate but not yet bound (`promised`). Each event costs O(one pod + its
gang); nothing is ever recomputed for the whole cluster. Pure: no I/O, no clock of its own.

What the scheduler counts on a node follows its NodeInfo (pkg/scheduler/framework/types.go):
every pod with spec.nodeName set that has not Succeeded or Failed, whatever its scheduler,
including a pod being deleted (a deletionTimestamp): its room is free only once it is gone
(or has reached a terminal phase), so nothing is promised on it until then.

Released gang members that stop being members (failed, deleted, ...) are recorded once each
as `MemberLoss`es in `losses`, for the shell to take (`take_losses`).

Why this module is long: used, promised, gangs and the change sets the incremental planner
reads are updated together by the same events; split apart they could disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.contract import DEFAULT_MAX_POD_NUM, DEFAULT_SCHEDULER_NAMES, GangSpec
from ganggate.core.fit.gpushare import NodeCards, node_cards, node_totals
from ganggate.core.fit.nodematch import canonical_json, node_hostname, node_is_cordoned, node_is_ready, not_ready_since
from ganggate.core.fit.resources import GPU, Resources, add_into, node_allocatable
from ganggate.core.state import dra as dra_state
from ganggate.core.state.gangs import Gang, GangKey
from ganggate.core.state.losses import MemberLoss, loss_of, losses_after_relist
from ganggate.core.state.pods import PodInfo as PodInfo

# PodInfo lives in pods.py, which gangs and cluster both import, so that gangs need not reach
# back up into cluster (that was an import cycle); re-exported for callers that use this path.
from ganggate.core.state.pods import Shared, parse_time
from ganggate.core.state.tallies import Tallies


@dataclass(slots=True)
class NodeInfo:
    """One node: what it offers, what bound pods use, what released pods are promised.

    The node object is not kept (issue #11): `view` holds what node selection reads."""

    name: str
    #: The node trimmed to what nodematch reads (name, labels, taints, unschedulable, the
    #: Ready condition), in the API's shape: Capacity and topology read it as a node object.
    view: dict[str, Any]
    allocatable: Resources
    used: Resources
    promised: Resources
    #: What filters the node apart from labels (ready, cordoned, taints as JSON): nodes with
    #: equal keys are one class to Capacity. Worked out once per node event, not per round.
    filter_key: tuple[Any, ...] = ()
    #: (aliyun.com/gpu-mem, aliyun.com/gpu-count) the node advertises (gpushare.node_totals).
    card_totals: tuple[int, int] = (0, 0)
    ready: bool = False
    cordoned: bool = False
    #: The value to pin a pod with: the kubernetes.io/hostname label, else the name.
    hostname: str = ""
    #: When a node not Ready stopped being Ready (Unix seconds), if its status says (--node-lost-after).
    not_ready_since: float | None = None

    @property
    def labels(self) -> Mapping[str, str]:
        labels: Mapping[str, str] = self.view["metadata"]["labels"]
        return labels

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeInfo:
        """Read once per node event; used and promised are the state's to attach."""
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        name = sys.intern(meta.get("name") or "")
        ready = node_is_ready(node)
        filter_key = _NODE_PARTS.one(node_filter_key(node))
        labels = {sys.intern(k): sys.intern(v) if isinstance(v, str) else v
                  for k, v in (meta.get("labels") or {}).items()}
        view = {
            "metadata": {"name": name, "labels": labels},
            # Nodes that filter alike share one spec and status (read only).
            "spec": _NODE_PARTS.one(("spec", filter_key), lambda: _view_spec(spec)),
            "status": _READY_STATUS if ready else _NOT_READY_STATUS,
        }
        allocatable = node_allocatable(node)
        return cls(name=name, view=view, allocatable=_NODE_PARTS.one(tuple(allocatable.items()), lambda: allocatable),
                   used={}, promised={}, filter_key=filter_key, card_totals=_NODE_PARTS.one(node_totals(node)),
                   ready=ready, cordoned=node_is_cordoned(node), hostname=sys.intern(node_hostname(node, name)),
                   not_ready_since=None if ready else not_ready_since(node))


_READY_STATUS = {"conditions": [{"type": "Ready", "status": "True"}]}
_NOT_READY_STATUS = {"conditions": [{"type": "Ready", "status": "False"}]}
_NODE_PARTS = Shared()  # what many nodes repeat: filter keys, specs, allocatable, card totals


def _view_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """spec.unschedulable and spec.taints, the parts of a node's spec nodematch reads."""
    view: dict[str, Any] = {}
    if spec.get("unschedulable"):
        view["unschedulable"] = spec["unschedulable"]
    if spec.get("taints"):
        view["taints"] = spec["taints"]
    return view


@dataclass(slots=True)
class Promise:
    """Capacity held for a released pod until it is bound, deleted, or the deadline passes."""

    gang_key: GangKey
    pod_key: str
    uid: str
    node: str | None
    request: Resources  # the pod's own request (shared with its PodInfo: never modified)
    deadline: float
    #: The (card index, amount) of shared GPU memory promised with it (GPU sharing), if any.
    card: tuple[int, int] | None = None


class ClusterState:
    """The incremental picture of the cluster (see the module docstring).

    bind_timeout_seconds is the deadline given to promises rebuilt from decision annotations
    after a restart (the shell passes its own deadline to `promise`).
    """

    def __init__(
        self,
        *,
        scheduler_names: tuple[str, ...] | list[str] = DEFAULT_SCHEDULER_NAMES,
        max_pod_num: int = DEFAULT_MAX_POD_NUM,
        bind_timeout_seconds: float = 120.0,
        topology_levels: tuple[str, ...] | list[str] = (),
    ) -> None:
        self.scheduler_names = tuple(scheduler_names)
        # Node label keys, widest first, whose values group nodes into domains (core.topology).
        self.topology_levels = tuple(topology_levels)
        self.max_pod_num = max_pod_num
        self.bind_timeout_seconds = bind_timeout_seconds
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.gangs: dict[GangKey, Gang] = {}
        self.promises: dict[str, Promise] = {}
        #: Pods any scheduler may bind at any moment (unbound, ungated, alive), by key: the
        #: planner keeps a gang out of room such a pod could take first (see planner).
        self.pending: dict[str, PodInfo] = {}
        #: Bound pods being deleted (a deletionTimestamp, not yet terminated), by key: they
        #: still hold their node's room (see lifecycle.waits_for_terminating).
        self.terminating: dict[str, PodInfo] = {}
        #: Members lost since the shell last took them (take_losses).
        self.losses: list[MemberLoss] = []
        # Per node name, kept while the node object is missing (events come in any order).
        self._used: dict[str, Resources] = {}
        self._promised: dict[str, Resources] = {}
        # (pod key, uid) whose promise timed out: not rebuilt from its decision annotation.
        self._expired: set[tuple[str, str]] = set()
        # GPU sharing: per node, pod key -> (card, amount) of the bound pods and of the promises
        # that hold a card (two tables: a pod's promise and its binding overlap for a moment).
        self._bound_cards: dict[str, dict[str, tuple[int, int]]] = {}
        self._promised_cards: dict[str, dict[str, tuple[int, int]]] = {}
        #: What changed since the incremental planner (core.incremental) last took it: nodes
        #: whose free capacity may have changed, gangs whose pods or promises changed, and a
        #: count bumped on a relist or a change to the node set or to what filters nodes
        #: (labels, taints, readiness, cordon, allocatable, cards), after which it starts over.
        #: The dirty sets are kept only once a consumer has asked (else they would only grow).
        self.track_changes = False
        self.dirty_nodes: set[str] = set()
        self.dirty_gangs: set[GangKey] = set()
        self.layout_version = 0
        #: Gangs with more live pods than their group-pod-num (Gang.excess_pods may be non-empty),
        #: kept as gangs refresh, so that reporting them reads these gangs only.
        self.over_declared: set[GangKey] = set()
        #: Sums over every node and gang and the deadlines ahead, kept by the same events
        #: (core.tallies): what a round's gauges, timers and timeouts read.
        self.tallies = Tallies()
        #: Bumped by every change to nodes, pods or promises: equal values, the same picture.
        self.version = 0
        #: Gangs with a pod carrying a preemption reservation, with how many such pods.
        self.reserving: dict[GangKey, int] = {}
        #: DRA: classes, slices, claims and templates (core.state.dra), the nodes' allocatable
        #: before their devices were added, the use of allocated claims and of bound DRA pods.
        self.dra = dra_state.DraIndex()
        self._dra_base: dict[str, tuple[NodeInfo, Resources]] = {}  # node -> (merged info, its base)
        self._claim_use: dict[str, tuple[str, Resources]] = {}
        self._bound_use: dict[str, Resources] = {}
        self._dra_pods: set[str] = set()
        #: A released member's own claims that ganggate allocated ahead of its binding: pod key ->
        #: claim keys. While the member's promise holds their node, the promise counts their
        #: devices (the member's request includes them) and the claims are not counted again.
        self._owned_claims: dict[str, set[str]] = {}
        self._claim_owner: dict[str, str] = {}  # allocated claim key -> its owner pod's key

    # ---- queries -------------------------------------------------------------------------

    def free(self, node_name: str) -> Resources:
        """allocatable - used - promised (negative when over-committed)."""
        node = self.nodes.get(node_name)
        out: Resources = dict(node.allocatable) if node else {}
        add_into(out, self._used.get(node_name, {}), -1)
        add_into(out, self._promised.get(node_name, {}), -1)
        return out

    def cards(self, node_name: str) -> NodeCards | None:
        """The node's GPU cards and their shared use (bound pods and promises, from their card
        annotations), or None for a node that does not advertise aliyun.com/gpu-mem and
        aliyun.com/gpu-count. Cards given whole: the node's used and promised nvidia.com/gpu."""
        node = self.nodes.get(node_name)
        if node is None:
            return None
        total, count = node.card_totals
        if not count:
            return None
        held = [(card, amount, key) for table in (self._bound_cards, self._promised_cards)
                for key, (card, amount) in sorted(table.get(node_name, {}).items())]
        whole = -(-(self._used.get(node_name, {}).get(GPU, 0) + self._promised.get(node_name, {}).get(GPU, 0)) // 1000)
        return node_cards(node_name, total, count, held, whole)

    def gang_of(self, pod: PodInfo) -> GangKey | None:
        """The gang a pod belongs to, or None when it is in none ganggate serves."""
        if pod.scheduler_name not in self.scheduler_names or not isinstance(pod.gang, GangSpec):
            return None
        return (pod.namespace, pod.gang.name)

    # ---- events --------------------------------------------------------------------------

    def reset(self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> None:
        """Replace the whole picture after a (re)list. Explicit promises of pods that are
        still there unbound are kept; the rest end."""
        self.replace([NodeInfo.from_node(n) for n in nodes], [PodInfo.from_pod(p, self.max_pod_num) for p in pods])

    def replace(self, nodes: Iterable[NodeInfo] | None = None, pods: Iterable[PodInfo] | None = None) -> None:
        """`reset` from nodes and pods already read (an informer reads each page of a list as
        it comes, not the whole list at once); None keeps the current ones, so a relist of one
        kind rebuilds the picture with the other as it is."""
        self.version += 1
        nodes = list(self.nodes.values()) if nodes is None else nodes
        pods = list(self.pods.values()) if pods is None else pods
        old_promises = self.promises
        self.nodes, self.pods, self.gangs, self.promises, self.pending = {}, {}, {}, {}, {}
        self.terminating = {}
        self._used, self._promised = {}, {}
        self._bound_cards, self._promised_cards = {}, {}
        self.dirty_nodes, self.dirty_gangs = set(), set()
        self.over_declared = set()
        self.tallies, self.reserving = Tallies(), {}
        self._bound_use = {}
        for node in nodes:
            self._put_node(node)
        for claim_node, use in self._claim_use.values():
            _add(self._used, claim_node, use, 1)
        touched: set[GangKey] = set()
        for info in pods:
            self._add_pod(info, touched)
        for promise in old_promises.values():
            pod = self.pods.get(promise.pod_key)
            if pod is not None and pod.uid == promise.uid and self._awaits_binding(pod):
                self._hold(promise)
        for pod in self.pods.values():
            self._rebuild_promise(pod)
        for key in touched:
            self._refresh_gang(key)
        self.losses = losses_after_relist(self.gangs)
        self.layout_version += 1

    def rebuilt(self, nodes: Iterable[NodeInfo] | None = None, pods: Iterable[PodInfo] | None = None) -> ClusterState:
        """The picture `replace(nodes, pods)` would make of this one, as a new ClusterState, this
        one left as it is: it can be built in a worker thread while this one is still read (the
        shell holds every change meanwhile), then taken over with `adopt`."""
        other = ClusterState(scheduler_names=self.scheduler_names, max_pod_num=self.max_pod_num,
                             bind_timeout_seconds=self.bind_timeout_seconds, topology_levels=self.topology_levels)
        other.promises, other._expired = self.promises, set(self._expired)  # (replace reads, never changes, them)
        other.dra, other._dra_base, other._claim_use = self.dra, dict(self._dra_base), dict(self._claim_use)
        other._dra_pods = set(self._dra_pods)
        other._owned_claims = {k: set(v) for k, v in self._owned_claims.items()}
        other._claim_owner = dict(self._claim_owner)
        other.layout_version, other.version, other.track_changes = self.layout_version, self.version, self.track_changes
        other.replace(list(self.nodes.values()) if nodes is None else nodes,
                      list(self.pods.values()) if pods is None else pods)
        return other

    def adopt(self, other: ClusterState) -> None:
        """Become `other` (a `rebuilt` picture): every holder of this object sees the new one."""
        self.__dict__.update(other.__dict__)

    def take_losses(self) -> list[MemberLoss]:
        """The members lost since the last call (each loss is reported once)."""
        losses, self.losses = self.losses, []
        return losses

    def apply_node(self, event_type: str, node: dict[str, Any]) -> None:
        """A node ADDED, MODIFIED or DELETED."""
        self.version += 1
        name = (node.get("metadata") or {}).get("name") or ""
        if event_type == "DELETED":
            if self.nodes.pop(name, None) is not None:
                self.layout_version += 1
                self._mark_node(name)
        else:
            self._upsert_node(node)

    def apply_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        """A pod ADDED, MODIFIED or DELETED; events for one pod may come in any order."""
        self.version += 1
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        touched: set[GangKey] = set()
        old = self.pods.get(key)
        if old is not None:
            self._remove_pod(old, touched)
        info = None if event_type == "DELETED" else PodInfo.from_pod(pod, self.max_pod_num)
        if old is not None and (gang_key := self.gang_of(old)) is not None:
            loss = loss_of(gang_key, old, info if info is None or info.uid == old.uid else None)
            if loss is not None:
                self.losses.append(loss)
        if info is None:
            self._end_promise(key)
        else:
            self._add_pod(info, touched)
            promise = self.promises.get(key)
            if promise is not None and (promise.uid != info.uid or not self._awaits_binding(info)):
                self._end_promise(key)
            self._rebuild_promise(info)
        for gang_key in touched:
            self._refresh_gang(gang_key)

    # ---- promises ------------------------------------------------------------------------

    def promise(
        self,
        gang_key: GangKey,
        placement: dict[str, str | None],
        deadline: float,
        cards: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        """Hold the requests of released pods on their planned nodes until they are bound.

        placement maps pod key -> node name (None: released unpinned, counted nowhere but
        still watched for the bind timeout). Pods unknown or already bound are skipped.
        cards maps pod key -> (card, amount) for the pods given a share of one GPU card.
        """
        for pod_key, node in placement.items():
            pod = self.pods.get(pod_key)
            if pod is None or pod.node_name or pod.terminated:
                continue
            self._end_promise(pod_key)
            card = (cards or {}).get(pod_key)
            self._hold(Promise(gang_key, pod_key, pod.uid, node, pod.request, deadline, card))

    def expired_promises(self, now: float) -> list[tuple[GangKey, list[str]]]:
        """Gangs whose released pods are still unbound past the deadline, with those pods.

        The promises are cleared: the capacity is no longer held for them. A promise whose
        pod is still gated at its deadline (its release never happened, e.g. it was cut
        short) is cleared without being reported: that pod was never released, so it did not
        fail to bind, and its gang can be rolled forward.
        """
        by_gang: dict[GangKey, list[str]] = {}
        for key in self.tallies.expired_promises(self, now):  # a heap of deadlines: O(expired)
            promise = self.promises[key]
            pod = self.pods.get(key)
            if pod is not None and not pod.gated:
                by_gang.setdefault(promise.gang_key, []).append(key)
                self._expired.add((key, promise.uid))
            self._end_promise(key)
        return [(gang, sorted(keys)) for gang, keys in sorted(by_gang.items())]

    def cancel_promises(self, pod_keys: Iterable[str]) -> None:
        """Give back what was promised to pods that were not released after all (a release
        whose validation failed): only pods still gated, or gone, lose their promise."""
        for pod_key in pod_keys:
            pod = self.pods.get(pod_key)
            if pod is None or pod.gated:
                self._end_promise(pod_key)

    def promised_pods(self, node_name: str) -> list[str]:
        """Keys of the pods holding a promise on the node."""
        return sorted(k for k, p in self.promises.items() if p.node == node_name)

    # ---- internals -----------------------------------------------------------------------

    def _upsert_node(self, node: Mapping[str, Any]) -> None:
        self._put_node(NodeInfo.from_node(node))

    def _put_node(self, info: NodeInfo) -> None:
        name = info.name
        if self.dra.active or name in self._dra_base:
            info = self._with_devices(info)
        old = self.nodes.get(name)
        info.used = self._used.setdefault(name, {})
        info.promised = self._promised.setdefault(name, {})
        self.nodes[name] = info
        self._mark_node(name)
        if old is None or (old.filter_key, old.allocatable, old.card_totals, old.labels) != (
            info.filter_key, info.allocatable, info.card_totals, info.labels
        ):
            self.layout_version += 1

    def _add_pod(self, info: PodInfo, touched: set[GangKey]) -> None:
        if info.claims or info.dra_demand or info.key in self._dra_pods:
            info = self._with_demand(info)
        self.pods[info.key] = info
        if info.schedulable_pending:
            self.pending[info.key] = info
        if info.terminating and info.node_name and not info.terminated:
            self.terminating[info.key] = info
        if info.node_name and not info.terminated:
            use = info.request
            if self.dra.active:
                use = dra_state.bound_use(info, self._dra_served(info.node_name))
                if use is not info.request:
                    self._bound_use[info.key] = use
            _add(self._used, info.node_name, use, 1)
            self._mark_node(info.node_name)
            if info.gpu_card is not None:
                self._bound_cards.setdefault(info.node_name, {})[info.key] = info.gpu_card
        gang_key = self.gang_of(info)
        if gang_key is not None:
            gang = self.gangs.get(gang_key)
            if gang is None:
                gang = self.gangs[gang_key] = Gang(namespace=gang_key[0], name=gang_key[1], key=gang_key)
            gang.add(info)
            touched.add(gang_key)
            if info.reservation is not None:
                self.reserving[gang_key] = self.reserving.get(gang_key, 0) + 1

    def _remove_pod(self, info: PodInfo, touched: set[GangKey]) -> None:
        self.pods.pop(info.key, None)
        if info.claims:
            self._forget_claim_user(info)
        self.pending.pop(info.key, None)
        self.terminating.pop(info.key, None)
        if info.node_name and not info.terminated:
            _add(self._used, info.node_name, self._bound_use.pop(info.key, info.request), -1)
            self._mark_node(info.node_name)
            self._bound_cards.get(info.node_name, {}).pop(info.key, None)
        gang_key = self.gang_of(info)
        if gang_key is not None and gang_key in self.gangs:
            self.gangs[gang_key].discard(info.key)
            touched.add(gang_key)
            if info.reservation is not None:
                left = self.reserving.get(gang_key, 0) - 1
                if left > 0:
                    self.reserving[gang_key] = left
                else:
                    self.reserving.pop(gang_key, None)

    def _refresh_gang(self, key: GangKey) -> None:
        self.version += 1
        if self.track_changes:
            self.dirty_gangs.add(key)
        gang = self.gangs.get(key)
        self.over_declared.discard(key)
        if gang is not None and not gang.pods:
            del self.gangs[key]
            gang = None
        if gang is not None:
            gang.refresh()
            if gang.spec is not None and gang.live_count > gang.spec.pod_num:
                self.over_declared.add(key)
        self.tallies.gang(key, gang)

    def _mark_node(self, name: str) -> None:
        """The node, or its used or promised capacity, changed: tell whoever keeps track."""
        self.version += 1
        if self.track_changes:
            self.dirty_nodes.add(name)
        self.tallies.node(self, name)

    @staticmethod
    def _awaits_binding(pod: PodInfo) -> bool:
        return not pod.node_name and pod.member

    def _hold(self, promise: Promise) -> None:
        self.promises[promise.pod_key] = promise
        self.version += 1
        self.tallies.promise(promise.pod_key, promise.deadline)
        if self.track_changes:
            self.dirty_gangs.add(promise.gang_key)
        if promise.node is not None:
            _add(self._promised, promise.node, promise.request, 1)
            self._mark_node(promise.node)
            if promise.card is not None:
                self._promised_cards.setdefault(promise.node, {})[promise.pod_key] = promise.card
            if promise.pod_key in self._owned_claims:
                self._recount_owned(promise.pod_key)

    def _end_promise(self, pod_key: str) -> None:
        promise = self.promises.pop(pod_key, None)
        if promise is not None:
            self.version += 1
            if self.track_changes:
                self.dirty_gangs.add(promise.gang_key)
        if promise is not None and promise.node is not None:
            _add(self._promised, promise.node, promise.request, -1)
            self._mark_node(promise.node)
            self._promised_cards.get(promise.node, {}).pop(pod_key, None)
            if pod_key in self._owned_claims:
                self._recount_owned(pod_key)

    def _rebuild_promise(self, pod: PodInfo) -> None:
        """After a restart: a released, unbound gang pod with a decision naming a node holds
        that node's capacity (roll forward counts it as promised)."""
        if pod.key in self.promises or pod.gated or not self._awaits_binding(pod):
            return
        if not isinstance(pod.decision, dict) or (pod.key, pod.uid) in self._expired:
            return
        gang_key = self.gang_of(pod)
        node = pod.decision.get("node")
        if gang_key is None or not isinstance(node, str) or not node:
            return
        deadline = parse_time(pod.decision.get("time")) + self.bind_timeout_seconds
        card = pod.gpu_card if pod.shared_gpu > 0 else None  # the card its annotations record
        self._hold(Promise(gang_key, pod.key, pod.uid, node, pod.request, deadline, card))

    # ---- DRA (core.state.dra) ---------------------------------------------------------------

    def apply_dra(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        """A DeviceClass, ResourceSlice, ResourceClaim or ResourceClaimTemplate event."""
        self.version += 1
        nodes = self.dra.apply(kind, event_type, obj)
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == dra_state.CLAIMS:
            self._set_claim_use(key, None if event_type == "DELETED" else obj)
        if nodes is None:
            nodes = set(self.dra.nodes()) | set(self._dra_base)
        if nodes:
            self._refresh_devices(nodes)
        shared = kind == dra_state.CLAIMS and key in self.dra.claim_users  # a claim pods name (not a template's)
        if kind in (dra_state.CLASSES, dra_state.TEMPLATES) or shared:
            name = meta.get("name")
            self._refresh_dra_pods(lambda pod: kind == dra_state.CLASSES or any(
                ref[2] == name and pod.namespace == meta.get("namespace") for ref in pod.claims))

    def _with_devices(self, info: NodeInfo) -> NodeInfo:
        """The node with its DRA devices in its allocatable (its base kept to redo this)."""
        merged, base = self._dra_base.get(info.name, (None, None))
        if info is not merged or base is None:
            base = info.allocatable
        totals = self.dra.node_totals(info.name)
        if not totals and info.name not in self._dra_base:
            return info
        allocatable = dict(base)
        for name, amount in totals.items():
            allocatable[name] = allocatable.get(name, 0) + amount
        out = NodeInfo(**{f: getattr(info, f) for f in info.__dataclass_fields__})
        out.allocatable = allocatable
        self._dra_base[info.name] = (out, base)
        return out

    def _dra_served(self, node_name: str) -> set[str]:
        """The resources the node offers through DRA devices (not in its status' allocatable)."""
        merged, base = self._dra_base.get(node_name, (None, None))
        if merged is None:
            return set()
        return {k for k in merged.allocatable if k not in (base or {})}

    def _refresh_devices(self, nodes: Iterable[str]) -> None:
        for name in nodes:
            info = self.nodes.get(name)
            if info is not None:
                self._put_node(info)
        for claim_key in [k for k, (node, _) in self._claim_use.items() if node in set(nodes)]:
            self._set_claim_use(claim_key, self.dra.claims.get(claim_key))

    def _set_claim_use(self, claim_key: str, claim: Mapping[str, Any] | None) -> None:
        old = self._claim_use.pop(claim_key, None)
        if old is not None:
            _add(self._used, old[0], old[1], -1)
            self._mark_node(old[0])
        owner = dra_state.owner_pod_key(claim) if claim is not None else None
        node, use = self.dra.claim_use(claim) if claim is not None else (None, {})
        was = self._claim_owner.pop(claim_key, None)
        if was is not None:
            self._forget_owned(was, claim_key)
        if owner is not None and node is not None:
            self._owned_claims.setdefault(owner, set()).add(claim_key)
            self._claim_owner[claim_key] = owner
        if node is not None and use and not self._promised_to(owner, node, claim):
            self._claim_use[claim_key] = (node, use)
            _add(self._used, node, use, 1)
            self._mark_node(node)

    def _forget_owned(self, pod_key: str, claim_key: str) -> None:
        keys = self._owned_claims.get(pod_key)
        if keys is not None:
            keys.discard(claim_key)
            if not keys:
                del self._owned_claims[pod_key]

    def _promised_to(self, owner: str | None, node: str, claim: Mapping[str, Any] | None) -> bool:
        """Whether an allocated claim's devices are its unbound owner's, promised on that node."""
        if owner is None:
            return False
        promise = self.promises.get(owner)
        pod = self.pods.get(owner)
        return (promise is not None and promise.node == node and pod is not None and not pod.node_name
                and promise.uid == dra_state.owner_pod_uid(claim))

    def _recount_owned(self, pod_key: str) -> None:
        """The pod's promise began or ended: count its allocated claims again."""
        for claim_key in sorted(self._owned_claims.get(pod_key, ())):
            self._set_claim_use(claim_key, self.dra.claims.get(claim_key))

    def _with_demand(self, info: PodInfo) -> PodInfo:
        """The pod with its claims' devices in its request; shared claims' users recorded."""
        self._dra_pods.add(info.key)
        for _, kind, name in info.claims:
            if kind == "claim":
                self.dra.claim_users.setdefault(f"{info.namespace}/{name}", set()).add(info.key)
        demand, keys = self.dra.demand(info.namespace, info.key, info.claims)
        if keys and self.dra.register(keys):
            self._refresh_devices(set(self.dra.nodes()) | set(self._dra_base))
            self.layout_version += 1
        return dra_state.with_demand(info, demand)

    def _forget_claim_user(self, info: PodInfo) -> None:
        self._dra_pods.discard(info.key)
        for _, kind, name in info.claims:
            users = self.dra.claim_users.get(f"{info.namespace}/{name}") if kind == "claim" else None
            if users is not None:
                users.discard(info.key)
                if not users:
                    del self.dra.claim_users[f"{info.namespace}/{name}"]

    def _refresh_dra_pods(self, affected: Callable[[PodInfo], bool]) -> None:
        """Ask again what the DRA pods `affected` selects ask (a template, claim or class changed)."""
        touched: set[GangKey] = set()
        for key in sorted(self._dra_pods):
            info = self.pods.get(key)
            if info is None:
                continue
            if not affected(info):
                continue
            self._remove_pod(info, touched)
            self._add_pod(info, touched)
        for gang_key in touched:
            self._refresh_gang(gang_key)


def node_filter_key(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What filters a node apart from its labels: (ready, cordoned, taints as canonical JSON)."""
    taints = (node.get("spec") or {}).get("taints")
    return (node_is_ready(node), node_is_cordoned(node), canonical_json(taints) if taints else "[]")


def _add(table: dict[str, Resources], node_name: str, amounts: Mapping[str, int], sign: int) -> None:
    """table[node] += sign * amounts, dropping zero entries.

    The per-node dicts are made once per name and shared with NodeInfo.used/promised."""
    target = table.setdefault(node_name, {})
    for name, amount in amounts.items():
        value = target.get(name, 0) + sign * amount
        if value:
            target[name] = value
        else:
            target.pop(name, None)
