"""PodGroups (Kubernetes' gang API, ganggate.podgroups) in the controller: the PodGroup informer,
the projection of their pods into gang members, the PodGroupInitiallyScheduled condition, the
Event on a pod whose PodGroup does not exist, and `--podgroups=create`'s PodGroups.

A pod ganggate admitted (it carries ganggate's gate, or the record of a release) that names an
existing gang PodGroup reaches the core as a member of that gang (ganggate.podgroups.project):
the core stays as it is, keyed by (namespace, name). A pod whose PodGroup is missing stays
gated out of the core, with a PodGroupNotFound Event, until the PodGroup appears; then its
last-seen object is fed back as a pod event. Pods left ungated for the scheduler's own gang
plugin are not projected: they are the scheduler's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from ganggate.contract import DECISION_ANNOTATION, GATE_NAME, GROUP_NAME, GangSpec
from ganggate.controller.round.informer import Informer
from ganggate.kube.calls import ApiCallError, call_json, rfc3339
from ganggate.podgroups import (
    DROPPED_REASON,
    GATED_FOR_ANNOTATION,
    GROUP,
    MISSING_REASON,
    PLURAL,
    VERSIONS,
    condition_patch,
    gang_annotations_of,
    ganggate_admits,
    initially_scheduled,
    min_count,
    pod_group_name,
    podgroup_for_gang,
    project,
)

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
GroupKey = tuple[str, str]


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "default", meta.get("name") or "")


def admitted_by_ganggate(pod: dict) -> bool:
    """The pod went through ganggate's gate: it still has it, or carries a release record."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return any(isinstance(g, dict) and g.get("name") == GATE_NAME for g in gates) or DECISION_ANNOTATION in annotations


def _alive(pod: dict) -> bool:
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


async def served(custom: Any) -> str | None:
    """The version of scheduling.k8s.io podgroups the API server serves (v1beta1, else 1.36's
    v1alpha2), or None (GenericWorkload off, or a release before 1.36)."""
    for version in VERSIONS:
        try:
            await call_json(custom.list_cluster_custom_object, GROUP, version, PLURAL, verb="list", limit=1)
        except ApiCallError as exc:
            if exc.status == 404:
                continue
            raise
        return version
    return None


class PodGroupSource:
    """Keeps the PodGroups and turns their pods into gang members; see the module docstring."""

    def __init__(self, custom: Any, events: Any, *, mode: str, native: bool, spawn: Callable[[Any], Any],
                 may_act: Callable[[], bool], metrics: Any = None, version: str | None = VERSIONS[0]) -> None:
        # version None: the API serves no PodGroups; the source only explains pods gated for one
        self.custom = custom
        self.version = version
        self.events = events
        self.mode = mode
        self.admits = ganggate_admits(mode, native)
        self.spawn = spawn
        self.may_act = may_act
        self.podgroups: dict[GroupKey, dict] = {}
        self.missing: dict[str, dict] = {}  # pod key -> the gated pod whose PodGroup is missing
        self.bound: dict[GroupKey, set[str]] = {}  # the live bound members seen, per PodGroup
        # The last-seen object of each live member read through its PodGroup: when the PodGroup's
        # gang changes (minCount is mutable), they are read again, so that no two disagree.
        self.members: dict[GroupKey, dict[str, dict]] = {}
        self._told_missing: set[str] = set()
        self._written: dict[GroupKey, tuple[str, str]] = {}  # last (status, message) written
        self._creating: set[GroupKey] = set()
        self.reinject: Callable[[str, dict], None] = lambda kind, pod: None  # set by the controller
        self.synced = asyncio.Event()
        self.informer = None if version is None else Informer(
            functools.partial(custom.list_cluster_custom_object, GROUP, version, PLURAL), "podgroups",
            on_list=self._on_list, on_event=self._on_event, metrics=metrics)

    # ---- the PodGroup informer -------------------------------------------------------------------

    def _stamp(self, podgroup: dict) -> dict:
        """List items carry no apiVersion; the condition's name depends on it (podgroups.condition_type)."""
        podgroup.setdefault("apiVersion", f"{GROUP}/{self.version}")
        return podgroup

    def _on_list(self, podgroups: list[dict]) -> None:
        self.podgroups = {_key(pg): self._stamp(pg) for pg in podgroups}
        self.synced.set()
        for group in list(self.podgroups):
            self._found(group)

    def _on_event(self, kind: str, podgroup: dict) -> None:
        group = _key(podgroup)
        if kind == "DELETED":
            self.podgroups.pop(group, None)
            return
        old = self.podgroups.get(group)
        self.podgroups[group] = self._stamp(podgroup)
        self._found(group)
        if old is not None and gang_annotations_of(old) != gang_annotations_of(podgroup):
            for pod in list(self.members.get(group, {}).values()):
                self.reinject("MODIFIED", pod)  # minCount changed: every member says the new gang

    def _found(self, group: GroupKey) -> None:
        """Pods that waited for this PodGroup are seen again, now as members."""
        for key, pod in list(self.missing.items()):
            if (_key(pod)[0], pod_group_name(pod)) == group:
                del self.missing[key]
                self._told_missing.discard(key)
                self.reinject("MODIFIED", pod)  # its last-seen object, now read as a member

    # ---- pods --------------------------------------------------------------------------------------

    def project(self, pod: dict, kind: str = "") -> dict:
        """The pod as the core should see it (called for every pod the informer lists or watches;
        `kind` is the watch event's type, DELETED for one that is gone)."""
        name = pod_group_name(pod)
        if name is None and kind != "DELETED":
            self._tell_dropped(pod)
        if name is None:
            if self.mode == "create" and self.version is not None:
                self._maybe_create(pod)
            return self._count_bound(pod, kind == "DELETED")
        if not admitted_by_ganggate(pod):
            return pod  # the scheduler's own gang plugin admits it (or nothing gated it)
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        group = (meta.get("namespace") or "default", name)
        podgroup = self.podgroups.get(group)
        gone = kind == "DELETED"
        if podgroup is None:
            if not gone and _alive(pod) and not (pod.get("spec") or {}).get("nodeName"):
                self.missing[key] = pod
                if key not in self._told_missing and self.synced.is_set():
                    self._told_missing.add(key)
                    self.events.emit(pod, MISSING_REASON, f"PodGroup {name!r} does not exist in namespace "
                                     f"{group[0]}: the pod waits, gated, until it is created")
            else:
                self.missing.pop(key, None)
            return pod
        self.missing.pop(key, None)
        live = self.members.setdefault(group, {})
        if _alive(pod) and not gone:
            live[key] = pod
        else:
            live.pop(key, None)
        return self._count_bound(project(pod, podgroup), gone)

    def _tell_dropped(self, pod: dict) -> None:
        """A pod the webhook gated for a PodGroup whose spec.schedulingGroup the API server then
        dropped (its GenericWorkload gate off): it is no gang member and waits; say why, once."""
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        group = annotations.get(GATED_FOR_ANNOTATION)
        if group is None or GROUP_NAME in annotations or not admitted_by_ganggate(pod) or not _alive(pod):
            return
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if key in self._told_missing or (pod.get("spec") or {}).get("nodeName"):
            return
        self._told_missing.add(key)
        self.events.emit(pod, DROPPED_REASON, f"the API server dropped spec.schedulingGroup.podGroupName={group!r} "
                         "(its GenericWorkload feature gate is off): the pod is in no gang and waits, gated; "
                         "recreate it with gang annotations, or once PodGroups are served")

    def _count_bound(self, seen: dict, gone: bool) -> dict:
        """Count a bound member of a gang that has a PodGroup of its name; write the condition once
        minCount members are bound."""
        annotations = (seen.get("metadata") or {}).get("annotations") or {}
        gang = annotations.get(GROUP_NAME)
        if gang is None:
            return seen
        group = ((seen.get("metadata") or {}).get("namespace") or "default", gang)
        podgroup = self.podgroups.get(group)
        if podgroup is None:
            return seen
        key = f"{group[0]}/{(seen.get('metadata') or {}).get('name') or ''}"
        members = self.bound.setdefault(group, set())
        if not gone and _alive(seen) and (seen.get("spec") or {}).get("nodeName"):
            members.add(key)
        else:
            members.discard(key)
        needed = min_count(podgroup)
        if needed is not None and len(members) >= needed and not initially_scheduled(podgroup):
            self._write(group, "True", "Scheduled", f"{len(members)} pods placed by ganggate")
        return seen

    # ---- the PodGroup's condition --------------------------------------------------------------

    def waiting(self, pod: Any, reason: str, message: str) -> None:
        """A gang waits (a GangWaiting / GangUnschedulable / GangCannotFit Event for `pod`, a PodInfo):
        its PodGroup, if it has one, says so in PodGroupInitiallyScheduled=False."""
        gang = getattr(pod, "gang", None)
        if not isinstance(gang, GangSpec):
            return
        group = (pod.namespace, gang.name)
        if group in self.podgroups:
            self._write(group, "False", "Unschedulable", f"{reason}: {message}")

    def _write(self, group: GroupKey, status: str, reason: str, message: str) -> None:
        if not self.may_act() or self._written.get(group) == (status, message):
            return
        podgroup = self.podgroups.get(group)
        patch = condition_patch(podgroup, status, reason, message, rfc3339(time.time())) if podgroup else None
        if patch is None:
            return
        self._written[group] = (status, message)
        self.spawn(self._patch(group, patch))

    async def _patch(self, group: GroupKey, patch: dict) -> None:
        try:
            body = await call_json(self.custom.patch_namespaced_custom_object_status, GROUP, self.version, group[0],
                                   PLURAL, group[1], patch, verb="patch", _content_type=MERGE_PATCH)
            if isinstance(body, dict) and body.get("metadata"):
                self.podgroups[group] = self._stamp(body)
        except ApiCallError as exc:
            self._written.pop(group, None)  # said again on the next occasion
            log.warning("PodGroup %s/%s: cannot write its condition: %s", group[0], group[1], exc)

    # ---- --podgroups=create ----------------------------------------------------------------------

    def _maybe_create(self, pod: dict) -> None:
        """A PodGroup for an annotation gang that has none, owned as the pod is."""
        from ganggate.contract import parse_gang

        meta = pod.get("metadata") or {}
        spec = parse_gang(meta.get("annotations"))
        if self.version is None or not isinstance(spec, GangSpec) or not _alive(pod) or not self.synced.is_set() \
                or not self.may_act():
            return
        group = (meta.get("namespace") or "default", spec.name)
        if group in self.podgroups or group in self._creating:
            return
        self._creating.add(group)
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
        body = podgroup_for_gang(group[0], spec.name, spec.min_available, spec.topology_required, owners,
                                 self.version)
        self.spawn(self._create(group, body))

    async def _create(self, group: GroupKey, body: dict) -> None:
        try:
            created = await call_json(self.custom.create_namespaced_custom_object, GROUP, self.version, group[0], PLURAL,
                                      body, verb="create")
            self.podgroups.setdefault(group, created)
            log.info("PodGroup %s/%s created for the annotation gang of that name", *group)
        except ApiCallError as exc:
            if exc.status != 409:
                log.warning("PodGroup %s/%s: cannot create it: %s", group[0], group[1], exc)
                self._creating.discard(group)


async def start(controller: Any) -> asyncio.Task | None:
    """Give the controller its PodGroupSource when it is to read PodGroups and the API serves them:
    the PodGroup informer runs, and has listed once, before the pods are listed (so that no pod
    is taken for one whose PodGroup is missing). None: no PodGroups (the reason is logged)."""
    from kubernetes_asyncio import client

    config = controller.config
    custom = client.CustomObjectsApi(controller.api_client)
    version: str | None = None
    try:
        version = await served(custom)
        if version is None:
            log.info("PodGroups: scheduling.k8s.io podgroups not served (GenericWorkload off): annotation gangs only")
    except ApiCallError as exc:
        log.warning("PodGroups: cannot list them (%s): annotation gangs only", exc)
    source = PodGroupSource(custom, controller.events, mode=config.podgroups, native=config.native_gang_scheduling,
                            spawn=controller._spawn, may_act=controller._may_act, metrics=controller.metrics,
                            version=version)
    source.reinject = controller._on_pod_event
    controller.podgroups = source
    if version is None or source.informer is None:
        source.synced.set()
        return None  # the source only explains pods gated for a PodGroup the API server dropped
    task = asyncio.create_task(source.informer.run())
    await source.synced.wait()
    log.info("PodGroups (scheduling.k8s.io/" + version + "): %s (--podgroups=%s%s)", "ganggate admits their gangs" if source.admits else
             "the scheduler's gang plugin admits their gangs; ganggate reports them", config.podgroups,
             ", --native-gang-scheduling" if config.native_gang_scheduling else "")
    return task
