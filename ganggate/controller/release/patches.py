"""Releasing a decision: remove the gate of every pod of it, pin it, record the decision.

Why this module is long: one release's calls in their order (devices held, dry runs,
nominations, the plan confirmed, the patches, what is taken back when it does not go ahead) and
the patch they send read as one sequence; the pure patch builders sit beside the calls that send them.

A pinned release first nominates each pod to its planned node (`status.nominatedNodeName`,
`nominations`), so that the default scheduler holds that room against pods of no higher
priority while the gates go (`Releaser.nominate`, the controller's `--nominate`).

One JSON patch per pod (pure `build_patch`): `test` the pod's uid and the gate at its index,
`remove` that gate (only ours: a concurrent change makes the `test` fail instead of removing
someone else's gate), `add` the label `ganggate.io/gang` (the selector of the gang's
PodDisruptionBudget, ganggate.controller.lifecycle.protection; in the same patch, so a pod is released
and labelled together or not at all), `add` the planned node to spec.nodeSelector (allowed on a gated pod:
KEP-3838 "mutable pod scheduling directives", only additions) and `add` the
`ganggate.io/decision` annotation.

Validation costs one `dryRun=All` request per distinct pod *shape* (`patch_shape`: namespace, the
pod's spec apart from its per-pod identity, the patch's operations apart from their values), not
one per pod: the pods of a Job share a template, so a 1,000-pod gang is checked by one dry run
and released by 1,000 patches, not 2,000. Only when every shape passes are the patches applied,
concurrently with a bounded number in flight. What a dry run of another pod could not catch (a
pod deleted or changed since the watch showed it) is caught by the apply's own `test`
operations and validation: the release is then cut short, and the controller's roll-forward
finishes it in a later round under the same decision id (ganggate.controller.round.loop). 429
(Retry-After), 5xx and transport errors are retried with backoff; 409 or a failed `test` (422)
refetches the pod and rebuilds the patch.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from ganggate.contract import DECISION_ANNOTATION, GANG_LABEL, GATE_NAME, gang_label_value
from ganggate.core.fit.nodematch import HOSTNAME_LABEL
from ganggate.core.state.pods import PodInfo, spec_shape
from ganggate.kube.calls import ApiCallError, Backoff, call_json, with_retries

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# The patch (pure)


def decision_annotation(decision_id: str, time: str, node: str | None, gang: str, pods: int) -> str:
    """The compact JSON recorded on each released pod."""
    return json.dumps(
        {"id": decision_id, "time": time, "node": node, "gang": gang, "pods": pods}, separators=(",", ":")
    )


def parse_decision(pod: Mapping) -> dict | None:
    """The pod's decision annotation as a dict, or None when absent or unreadable."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DECISION_ANNOTATION)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _escape(key: str) -> str:
    """JSON Pointer escaping (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def build_patch(pod: Mapping, annotation: str, hostname: str | None, gang: str | None = None, *,
                extra_annotations: Mapping[str, str] | None = None) -> list[dict] | None:
    """The JSON patch that releases the pod, or None when it carries no ganggate gate.

    hostname None leaves node selection to the scheduler (`--placement=free`); gang (its
    group-name) adds the GANG_LABEL label; extra_annotations (the card of a GPU-sharing pod,
    core.gpushare) are added beside the decision, in the same patch.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates") or []
    index = next((i for i, g in enumerate(gates) if isinstance(g, Mapping) and g.get("name") == GATE_NAME), None)
    if index is None:
        return None
    ops: list[dict] = []
    if metadata.get("uid"):
        ops.append({"op": "test", "path": "/metadata/uid", "value": metadata["uid"]})
    ops.append({"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": GATE_NAME})
    ops.append({"op": "remove", "path": f"/spec/schedulingGates/{index}"})
    if hostname is not None:
        if spec.get("nodeSelector") is None:
            ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME_LABEL: hostname}})
        else:
            ops.append({"op": "add", "path": f"/spec/nodeSelector/{_escape(HOSTNAME_LABEL)}", "value": hostname})
    if gang is not None:
        if metadata.get("labels") is None:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {GANG_LABEL: gang_label_value(gang)}})
        else:
            ops.append({"op": "add", "path": f"/metadata/labels/{_escape(GANG_LABEL)}", "value": gang_label_value(gang)})
    if metadata.get("annotations") is None:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {DECISION_ANNOTATION: annotation, **(extra_annotations or {})}})
    else:
        ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(DECISION_ANNOTATION)}", "value": annotation})
        for key, value in sorted((extra_annotations or {}).items()):
            ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(key)}", "value": value})
    return ops


def patch_shape(pod: Mapping, patch: list[dict], spec: str | None = None) -> str:
    """What decides whether a release patch passes validation, apart from per-pod identity: the
    namespace, the pod's spec (without hostname/nodeName: core.pods.spec_shape; `spec` when
    already worked out) and the patch's operations and paths (not their values). Pods of one
    shape pass or fail a dry run alike."""
    metadata = pod.get("metadata") or {}
    if spec is None:
        spec = spec_shape(pod.get("spec") or {})
    ops = [(op.get("op"), op.get("path")) for op in patch if op.get("op") != "test" or op.get("path") != "/metadata/uid"]
    return json.dumps([metadata.get("namespace") or "default", spec, ops], separators=(",", ":"))


def _object(pod: Mapping | PodInfo | None) -> Mapping | None:
    """A pod object to build a patch from: a PodInfo's release_view, made now."""
    return release_view(pod) if isinstance(pod, PodInfo) else pod


def release_view(pod: PodInfo) -> dict:
    """The parts of a pod `build_patch` reads, from the controller's picture (which keeps no
    pod object): identity, whether labels and annotations exist, the gates, the nodeSelector."""
    return {
        "metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
                     "labels": dict(pod.labels) or None, "annotations": {} if pod.has_annotations else None},
        "spec": {"schedulingGates": [{"name": name} for name in pod.gates],
                 "nodeSelector": pod.selection["spec"].get("nodeSelector")},
    }


# ---------------------------------------------------------------------------------------------
# The release (I/O)


@dataclass
class ReleaseRequest:
    """What to release: the pods of one decision and where each is planned."""

    decision_id: str
    time: str  # RFC3339, the decision's time
    gang: str  # "ns/name"
    pod_count: int  # pods in the decision, as recorded
    placement: dict[str, str | None]  # pod key -> node name (None = unpinned)
    # pod key -> the pod as last seen: a PodInfo of the controller's picture (its release_view
    # is made only while its patch is built), or a pod object
    pods: dict[str, Mapping | PodInfo]
    hostnames: dict[str, str]  # node name -> kubernetes.io/hostname value
    pinned: bool = True
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)  # pod key -> extra (Decision.annotations)


@dataclass
class ReleaseOutcome:
    released: list[str] = field(default_factory=list)  # gates this call removed
    already: list[str] = field(default_factory=list)  # found without the gate (by us or another replica)
    vanished: list[str] = field(default_factory=list)  # deleted or replaced before we got to them
    failed: dict[str, str] = field(default_factory=dict)  # pod key -> why
    validation_failed: bool = False  # nothing was applied (a dry run failed, or the controller is stopping)
    plan_lost: str | None = None  # nothing was applied: the plan no longer held once nominated (why)

    @property
    def complete(self) -> bool:
        return not self.failed and not self.validation_failed


#: A nomination is an optimisation: a few quick tries, then the release goes on without it.
NOMINATE_BACKOFF = Backoff(base=0.05, cap=0.5, attempts=3)


def nominations(req: ReleaseRequest) -> dict[str, str]:
    """Pod key -> planned node, for a pinned release: each pod's status.nominatedNodeName.

    kube-scheduler's nominator follows status.nominatedNodeName of every pod in its queue, gated
    ones included (pkg/scheduler/backend/queue: PriorityQueue.Update calls UpdateNominatedPod for
    a pod in unschedulablePods; nominator.addNominatedPodUnlocked reads Status.NominatedNodeName
    in ModeNoop), and a scheduling cycle counts the nominated pods of equal or higher priority on
    their node (framework RunFilterPluginsWithNominatedPods / addGENominatedPods). So, set before
    the gate goes, it holds the planned room against every pod of no higher priority that the
    scheduler places afterwards: the window in which an ordinary pod can take a member's room
    shrinks from plan-to-release to plan-to-nomination."""
    if not req.pinned:
        return {}
    return {key: node for key, node in sorted(req.placement.items()) if node}


class Releaser:
    """Applies release patches through CoreV1Api with bounded concurrency and retries (at most
    `max_in_flight` requests at once: size the client's connection pool above it, kube.client)."""

    def __init__(self, core_api: Any, *, max_in_flight: int = 32, metrics: Any = None,
                 backoff: Backoff | None = None, before_apply: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.core = core_api
        self.semaphore = asyncio.Semaphore(max(1, max_in_flight))
        # Pod operations of all releases started (each a task) at once: the rest wait unstarted.
        self.started = asyncio.Semaphore(2 * max(1, max_in_flight))
        self.metrics = metrics
        self.backoff = backoff or Backoff()
        # Test hook: awaited before each real (not dry-run) patch with the pod key.
        self.before_apply = before_apply
        # Checked before each real patch: a replica that lost leadership stops releasing.
        self.should_continue: Callable[[], bool] = lambda: True
        # Checked once all patches are validated: a stopping controller starts no new release.
        self.may_apply: Callable[[], bool] = lambda: True
        self.dry_runs = 0  # dry-run requests sent, over all releases
        # Pinned releases nominate each pod to its node first (status.nominatedNodeName).
        self.nominate = True
        # Awaited once the nominations are made, before any gate goes, with the nominations
        # made (pod key -> node): None when the plan still holds, else why not (then nothing
        # is applied and the nominations are taken back). `Releases.confirm_plan` (release.releases).
        self.confirm: Callable[[ReleaseRequest, dict[str, str]], Awaitable[str | None]] | None = None
        # Holds a pinned release's DRA devices before any gate goes (controller.release.dra_hold): its
        # members' template claims allocated on their planned nodes, given back if the release
        # does not go ahead. None: nothing is held.
        self.devices: Any = None

    def _patch_for(self, req: ReleaseRequest, key: str, pod: Mapping) -> list[dict] | None:
        node = req.placement.get(key)
        hostname = req.hostnames.get(node, node) if (req.pinned and node) else None
        annotation = decision_annotation(req.decision_id, req.time, node, req.gang, req.pod_count)
        return build_patch(pod, annotation, hostname, req.gang.split("/", 1)[-1],
                           extra_annotations=req.annotations.get(key))

    async def _get(self, key: str) -> dict | None:
        namespace, name = key.split("/", 1)
        try:
            return await with_retries(
                lambda: call_json(self.core.read_namespaced_pod, name, namespace, verb="get", metrics=self.metrics),
                self.backoff,
            )
        except ApiCallError as exc:
            if exc.status == 404:
                return None
            raise

    async def _patch(self, key: str, body: list[dict], dry_run: bool) -> dict:
        namespace, name = key.split("/", 1)
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        async with self.semaphore:
            return await with_retries(
                lambda: call_json(self.core.patch_namespaced_pod, name, namespace, body,
                                  verb="patch", metrics=self.metrics, **kwargs),
                self.backoff,
            )

    async def _one(self, req: ReleaseRequest, key: str, dry_run: bool, outcome: ReleaseOutcome) -> None:
        """Validate or apply one pod's patch; refetch and rebuild on 409/422, a few times."""
        pod = _object(req.pods.get(key))
        expected_uid = ((pod or {}).get("metadata") or {}).get("uid")
        for attempt in range(4):
            if pod is None or (expected_uid and pod["metadata"].get("uid") != expected_uid):
                outcome.vanished.append(key)
                return
            body = self._patch_for(req, key, pod)
            if body is None:
                outcome.already.append(key)
                return
            if not dry_run and not self.should_continue():
                outcome.failed[key] = "stopped: no longer the leader"
                return
            try:
                if not dry_run and self.before_apply is not None:
                    await self.before_apply(key)
                await self._patch(key, body, dry_run)
            except ApiCallError as exc:
                if exc.status == 404:
                    outcome.vanished.append(key)
                    return
                if exc.status in (409, 422) and attempt < 3:
                    log.info("release of %s: %s; refetching", key, exc)
                    pod = await self._get(key)
                    continue
                outcome.failed[key] = str(exc)
                return
            if not dry_run:
                outcome.released.append(key)
                if self.metrics is not None:
                    self.metrics.pods_released.inc()
            return
        outcome.failed[key] = "the pod kept changing under the patch"

    async def _nominate(self, key: str, node: str | None) -> bool:
        """Set (node None: remove) the pod's status.nominatedNodeName; True when done. A failure
        is logged and the release goes on without it (the room is then not held: core.policy.planloss)."""
        namespace, name = key.split("/", 1)
        body = ([{"op": "add", "path": "/status/nominatedNodeName", "value": node}] if node
                else [{"op": "remove", "path": "/status/nominatedNodeName"}])
        try:
            async with self.semaphore:
                await with_retries(
                    lambda: call_json(self.core.patch_namespaced_pod_status, name, namespace, body,
                                      verb="patch", metrics=self.metrics),
                    NOMINATE_BACKOFF,
                )
            return True
        except ApiCallError as exc:
            log.info("%s status.nominatedNodeName of %s: %s", "setting" if node else "removing", key, exc)
            return False

    def _shapes(self, req: ReleaseRequest, keys: list[str], check: ReleaseOutcome) -> list[str]:
        """One pod key per distinct patch shape (the first in key order), for the dry runs."""
        representatives: dict[str, str] = {}
        for key in keys:
            seen = req.pods.get(key)
            pod = _object(seen)
            if pod is None:
                check.vanished.append(key)
                continue
            body = self._patch_for(req, key, pod)
            if body is not None:
                spec = seen.shape if isinstance(seen, PodInfo) else None
                representatives.setdefault(patch_shape(pod, body, spec), key)
        return list(representatives.values())

    async def release(self, req: ReleaseRequest) -> ReleaseOutcome:
        """Validate one patch per pod shape (dryRun=All) while nominating each pod to its node
        (`nominations`), let `confirm` check the plan still holds, then apply all; never applies
        after a failed validation or a lost plan, and then takes the nominations back. `dry_runs` counts the
        dry runs sent (a test and the bench read it)."""
        keys = sorted(req.placement)
        check = ReleaseOutcome()
        unready = self.devices.unready(req.placement, req.pods) if self.devices is not None and req.pinned else None
        if unready is not None:  # nothing written: planned again once the claims are made
            check.plan_lost = f"its devices cannot be held yet: {unready}"
            check.failed = {key: check.plan_lost for key in keys}
            check.validation_failed = True
            return check
        shapes = self._shapes(req, keys, check)
        self.dry_runs += len(shapes)
        holds = nominations(req) if self.nominate else {}
        # The devices are held (claims allocated) while the patches are validated and the pods
        # nominated: all before the first gate goes.
        devices = (asyncio.ensure_future(self.devices.hold(req.placement, req.pods))
                   if self.devices is not None and req.pinned else None)
        try:
            held = await self._each([*(functools.partial(self._one, req, key, True, check) for key in shapes),
                                     *(functools.partial(self._nominate, key, node) for key, node in holds.items())])
        finally:
            lost_devices, allocated = (await devices) if devices is not None else (None, [])
        held_keys = [key for key, ok in zip(holds, held[len(shapes):], strict=True) if ok]
        if lost_devices is not None and not (check.failed or check.vanished):
            check.plan_lost = f"its devices could not be held: {lost_devices}"
            check.failed = {key: check.plan_lost for key in keys}
        if not (check.failed or check.vanished) and self.confirm is not None and held_keys and self.may_apply():
            check.plan_lost = await self.confirm(req, {key: holds[key] for key in held_keys})
            if check.plan_lost is not None:
                check.failed = {key: check.plan_lost for key in keys}
        if allocated:
            contested = self.devices.contested(allocated)
            if contested is not None and not (check.failed or check.vanished):
                check.plan_lost = f"its devices were taken as they were held: {contested}"
                check.failed = {key: check.plan_lost for key in keys}
        if check.failed or check.vanished or not self.may_apply():
            if not (check.failed or check.vanished):
                check.failed = {key: "stopping: not started" for key in keys}
            check.validation_failed = True
            await self._each([functools.partial(self._nominate, key, None) for key in held_keys])
            if allocated:
                await self.devices.give_back(allocated)
            return check
        outcome = ReleaseOutcome()
        await self._each([functools.partial(self._one, req, key, False, outcome) for key in keys])
        return outcome

    async def _each(self, calls: list[Callable[[], Coroutine[Any, Any, Any]]]) -> list[Any]:
        """Run the calls as asyncio.gather would, each started (made a task) only once one of the
        `started` slots is free: the first round at 100,000 pods starts 1,686 releases of 37,595
        pods at once, and a task per pod waiting for the 32 patch slots was 40,000 tasks and their
        coroutines, most of what the leader's rounds added to its memory (bench/bench_memory.py)."""
        loop = asyncio.get_running_loop()
        results: list[Any] = [None] * len(calls)
        running: set[asyncio.Task] = set()
        settled = loop.create_future()
        left = len(calls)

        def finished(index: int, task: asyncio.Task) -> None:
            nonlocal left
            self.started.release()
            running.discard(task)
            left -= 1
            error = None if task.cancelled() else task.exception()  # (retrieved: never "unretrieved")
            if settled.done():
                return
            if task.cancelled():
                settled.set_exception(asyncio.CancelledError())
            elif error is not None:
                settled.set_exception(error)
            else:
                results[index] = task.result()
                if not left:
                    settled.set_result(None)

        try:
            for index, call in enumerate(calls):
                await self.started.acquire()
                task = loop.create_task(call())
                running.add(task)
                task.add_done_callback(functools.partial(finished, index))
            if calls:
                await settled
        except BaseException:
            for task in running:
                task.cancel()
            raise
        return results
