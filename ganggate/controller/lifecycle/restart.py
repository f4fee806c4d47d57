"""Deleting a gang member as Kubernetes' own disruptions do: DisruptionTarget first, then the delete.

`delete_member` writes the pod condition DisruptionTarget=True, reason DeletionByGanggate
(ganggate.core.policy.disruption), through the status subresource with a strategic merge patch carrying
the pod's uid, as pkg/util/pod/pod.go PatchPodStatus does for the taint manager and the scheduler's
preemption ("uid is used to ensure the patch applies to the right pod"), then deletes the pod with a
uid precondition. A Job whose podFailurePolicy has the rule `onPodConditions: [{type:
DisruptionTarget}] -> Ignore` then replaces the pod without counting it against its backoffLimit
(pkg/controller/job/pod_failure_policy.go). If the condition cannot be written (no RBAC on
pods/status, say), the pod is still deleted: the restart matters more; a WARNING says the Job
may count it.

`JobAdvice` tells the user, once per Job, with a Warning Event `GangRestartCountsAsFailure` on the
Job, when ganggate restarts a gang of a Job whose podFailurePolicy would count the deleted pods
as failures, and what to add (core.disruption.restart_advice).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ganggate.controller.reporting.events import PodRef
from ganggate.core.policy.disruption import condition_patch, restart_advice
from ganggate.core.state.pods import PodInfo
from ganggate.kube.calls import ApiCallError, call_json, rfc3339
from ganggate.kube.clock import WALL, Clock

log = logging.getLogger(__name__)

_REMEMBER = 10_000  # Job uids already advised (oldest forgotten first)


async def delete_member(core: Any, pod_key: str, uid: str, message: str, *, metrics: Any = None,
                        clock: Clock = WALL) -> bool:
    """Mark the pod DisruptionTarget, then delete it (uid precondition). False when the pod was
    gone or replaced (404/409) before the delete; other API errors propagate."""
    namespace, name = pod_key.split("/", 1)
    patch = condition_patch(message, rfc3339(clock.now()))
    patch["metadata"] = {"uid": uid}
    try:
        await call_json(core.patch_namespaced_pod_status, name, namespace, patch, verb="patch", metrics=metrics)
    except ApiCallError as exc:
        if exc.status == 404:
            return False
        log.warning("could not mark %s DisruptionTarget before deleting it (%s); deleting it anyway: its Job may "
                    "count it as a failure", pod_key, exc)
    try:
        await call_json(core.delete_namespaced_pod, name, namespace, body={"preconditions": {"uid": uid}},
                        verb="delete", metrics=metrics)
    except ApiCallError as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


class JobAdvice:
    """Once per Job: read it and, when its podFailurePolicy would count ganggate's restarts as
    failures, say what to add (an Event on the Job and a WARNING)."""

    def __init__(self, api_client: Any, events: Any, spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task],
                 metrics: Any = None) -> None:
        from kubernetes_asyncio import client

        self.batch = client.BatchV1Api(api_client)
        self.events = events
        self.spawn = spawn
        self.metrics = metrics
        self._seen: OrderedDict[str, None] = OrderedDict()

    def restarting(self, gang: str, pods: Iterable[PodInfo]) -> None:
        """A restart of `gang` deletes these pods: check the batch/v1 Jobs that own them."""
        for pod in pods:
            ref = pod.controller_ref
            if not ref or ref.get("kind") != "Job" or not str(ref.get("apiVersion") or "").startswith("batch/"):
                continue
            uid = str(ref.get("uid") or "")
            if not uid or uid in self._seen:
                continue
            self._seen[uid] = None
            while len(self._seen) > _REMEMBER:
                self._seen.popitem(last=False)
            self.spawn(self._check(pod.namespace, str(ref.get("name")), uid, gang))

    async def _check(self, namespace: str, name: str, uid: str, gang: str) -> None:
        try:
            job = await call_json(self.batch.read_namespaced_job, name, namespace, verb="get", metrics=self.metrics)
        except ApiCallError as exc:
            log.info("cannot read Job %s/%s to check its podFailurePolicy: %s", namespace, name, exc)
            return
        if ((job.get("metadata") or {}).get("uid") or uid) != uid:
            return
        advice = restart_advice(job)
        if advice is None:
            return
        message = (f"ganggate restarted gang {gang} whole by deleting its pods (condition DisruptionTarget, reason "
                   f"DeletionByGanggate); {advice}")
        self.events.emit(PodRef(namespace, name, uid, kind="Job", api_version="batch/v1"),
                         "GangRestartCountsAsFailure", message)
