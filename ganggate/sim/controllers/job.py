"""kubesim's Job controller stand-in: an HTTP client of the API server, like kube-controller-manager's.

It watches Jobs and pods (ganggate.sim.client.informers.Reflector) and syncs Jobs with five
workers, one Job per worker at a time, as pkg/controller/job/job_controller.go does: creates
pods from the template (through the API, so they pass the admission chain and the ganggate
webhook gates them; in slow-start batches of 1, 2, 4, ... sent together) to keep `parallelism` pods
active up to the remaining completions; replaces pods that fail or are deleted until the number
of failures exceeds `backoffLimit` (then FailureTarget and Failed, reason BackoffLimitExceeded,
and the active pods deleted); marks the Job SuccessCriteriaMet and Complete with a completionTime
once enough pods succeeded; writes status.active/ready/succeeded/failed/startTime/
completedIndexes through the status subresource. Controller expectations (controller_utils.go
ControllerExpectations) stop it from acting again before it has seen its own creates and deletes.
As job_controller.go: a Job created, deleted or whose spec changed (a new generation) is synced at
once, while pod events and status-only updates wait the 1 s syncJobBatchPeriod (a burst of them is
one sync); one sync creates or deletes at most MaxPodCreateDeletePerSync (500) pods; a sync that
fails (a pod create the API server refused) is retried after 1 s, 2 s, 4 s, ... at most 1 min
(the queue's ItemExponentialFailureRateLimiter with DefaultJobApiBackOff and MaxJobApiBackOff),
and from the first success on at 1 s again. It records Events on the Job as RealPodControl and
syncJob do (source job-controller, through ganggate.sim.client.events): SuccessfulCreate
"Created pod: <name>", FailedCreate "Error creating: <the API server's message>" (none when the
namespace is terminating), SuccessfulDelete "Deleted pod: <name>", FailedDelete "Error deleting:
...", Completed "Job completed", the failure reason with its message, Suspended "Job suspended".

A failed pod is matched against the Job's `podFailurePolicy` (controllers.pod_failure_policy,
from pkg/controller/job/pod_failure_policy.go): an Ignore rule leaves it out of status.failed and
the backoff limit, a FailJob rule fails the Job at once (FailureTarget and Failed, reason
PodFailurePolicy), Count or no match counts it. Under `podReplacementPolicy: Failed` (the default
with a podFailurePolicy) a terminating pod is not replaced until it has Failed (manageJob counts
terminating pods against parallelism, and firstPendingIndexes their indexes, when
onlyReplaceFailedPods); status.terminating counts them (JobPodReplacementPolicy, on by default).

Simplifications: no pod finalizers (`batch.kubernetes.io/job-tracking`): terminated and deleted
pods are counted from the watch, in memory, so a pod deleted before it finished counts as failed
(as with the finalizer; matched against the podFailurePolicy as last seen) and the counts do not
survive a restart of the controller; no backoffLimitPerIndex (nor the FailIndex action),
activeDeadlineSeconds, ttlSecondsAfterFinished, adoption of orphans, and no delay before replacing
a failed pod (the real controller waits DefaultJobPodFailureBackOff, 10 s doubling to 10 min, after
pod failures).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.client.events import EventRecorder
from ganggate.sim.client.informers import ReflectorLike, SharedInformers, object_key, reflector_for, run_synced
from ganggate.sim.client.workqueue import ExponentialFailureRateLimiter, WorkQueue, put_status
from ganggate.sim.controllers import job_pods, pod_failure_policy

log = logging.getLogger(__name__)

#: kube-controller-manager's --concurrent-job-syncs default (cmd/kube-controller-manager/app/
#: options/jobcontroller.go): Jobs synced at once; one Job is never synced by two workers.
CONCURRENT_JOB_SYNCS = 5
#: pkg/controller/controller_utils.go SlowStartInitialBatchSize: the first batch of creates.
SLOW_START_INITIAL_BATCH_SIZE = 1
#: job_controller.go syncJobBatchPeriod: how long pod events and status-only updates of a Job wait,
#: so that a burst of them is one sync.
SYNC_JOB_BATCH_SECONDS = 1.0
#: job_controller.go DefaultJobApiBackOff and MaxJobApiBackOff: the failed-sync retry delays.
JOB_API_BACKOFF_SECONDS = 1.0
MAX_JOB_API_BACKOFF_SECONDS = 60.0
#: job_controller.go MaxPodCreateDeletePerSync: pods one sync creates or deletes at most.
MAX_POD_CREATE_DELETE_PER_SYNC = 500
#: The Events' source (job_controller.go: v1.EventSource{Component: "job-controller"}).
COMPONENT = "job-controller"
#: controller_utils.go / job_controller.go Event reasons.
SUCCESSFUL_CREATE, FAILED_CREATE = "SuccessfulCreate", "FailedCreate"
SUCCESSFUL_DELETE, FAILED_DELETE = "SuccessfulDelete", "FailedDelete"


async def _all(calls: Any) -> None:
    """Await the calls together; the first failure is raised once all have ended."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _status_message(body: Any, status: int) -> str:
    """What a StatusError's Error() says: the Status's message (the HTTP status when there is none)."""
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return f"the server responded with HTTP {status}"


class JobController:
    """Runs batch/v1 Jobs against kubesim."""

    def __init__(self, base_url: str, *, shared: SharedInformers | None = None, clock: Any = None,
                 batch_seconds: float = SYNC_JOB_BATCH_SECONDS) -> None:
        self.base_url = base_url.rstrip("/")
        self.batch_seconds = batch_seconds
        self.shared = shared  # the process's shared informers (Components), or None: watches of its own
        self._session: aiohttp.ClientSession | None = None
        self._jobs: ReflectorLike | None = None
        self._pods: ReflectorLike | None = None
        self._queue = WorkQueue(rate_limiter=ExponentialFailureRateLimiter(
            JOB_API_BACKOFF_SECONDS, MAX_JOB_API_BACKOFF_SECONDS), clock=clock)
        self.recorder = EventRecorder(self.base_url, COMPONENT)
        self._expect: dict[str, set[str]] = {}  # job key -> names (creates) and uids (deletes) not yet seen
        # job uid -> pod uid -> (phase, index, the pod as last seen: what a podFailurePolicy matches)
        self._finished: dict[str, dict[str, tuple[str, int | None, dict]]] = {}
        self.ready = asyncio.Event()
        """Set once the pods and the Jobs have been listed."""

    # -- informer handlers ---------------------------------------------------------------

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    def has_work(self) -> bool:
        """Jobs queued or being synced (a sync creates its pods one request at a time), or pod
        creations and deletions sent but not yet seen in the watch, or Events not yet written.
        Jobs waiting out the batch period or a retry delay are not work yet."""
        return self._queue.busy or any(self._expect.values()) or not self.recorder.idle

    def enqueue(self, key: str) -> None:
        """enqueueSyncJobImmediately."""
        self._queue.add(key)

    def enqueue_batched(self, key: str) -> None:
        """enqueueSyncJobBatched: after syncJobBatchPeriod (an earlier pending sync wins)."""
        self._queue.add_after(self.batch_seconds, key)

    def on_job(self, kind: str, job: dict, old: dict | None) -> None:
        key = object_key(job)
        if kind == "DELETED":
            self._expect.pop(key, None)
            self._finished.pop((job.get("metadata") or {}).get("uid", ""), None)
            self._queue.forget(key)
            return
        # updateJob: a status-only update (same generation) is batched, a new spec synced at once.
        if old is not None and (old.get("metadata") or {}).get("generation") == (job.get("metadata") or {}).get("generation"):
            self.enqueue_batched(key)
        else:
            self.enqueue(key)

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        ref = job_pods.controller_ref(pod)
        if ref is None:
            return
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{ref.get('name')}"
        expected = self._expect.get(key)
        if expected is not None:
            expected.discard(meta.get("name", ""))
            if kind == "DELETED":
                expected.discard(meta.get("uid", ""))
        phase = (pod.get("status") or {}).get("phase")
        finished = self._finished.setdefault(ref.get("uid", ""), {})
        if meta.get("uid") not in finished:
            if phase in job_pods.TERMINAL:
                finished[meta["uid"]] = (phase, job_pods.pod_index(pod), pod)
            elif kind == "DELETED":
                finished[meta["uid"]] = ("Failed", job_pods.pod_index(pod), pod)  # removed before it finished
        self.enqueue_batched(key)

    # -- one sync ------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        """Bring one Job's pods and status in line with its spec (syncJob)."""
        job = self._jobs.store.get(key) if self._jobs else None
        if job is None or job_pods.is_finished(job) or self._expect.get(key):
            return
        meta, spec = job["metadata"], job.get("spec") or {}
        uid = meta["uid"]
        pods = [p for p in (self._pods.store.values() if self._pods else [])
                if (job_pods.controller_ref(p) or {}).get("uid") == uid]
        active = [p for p in pods if job_pods.is_active(p)]
        terminating = [p for p in pods if job_pods.is_terminating(p)]
        finished = self._finished.get(uid, {})
        matches = [pod_failure_policy.match(spec.get("podFailurePolicy"), pod)
                   for phase, _, pod in finished.values() if phase == "Failed"]
        failed = sum(1 for m in matches if m.counts)
        fail_job = next((m.fail_message for m in matches if m.fail_message), None)
        indexed = spec.get("completionMode") == "Indexed"
        succeeded_indexes = {i for phase, i, _ in finished.values() if phase == "Succeeded" and i is not None}
        succeeded = len(succeeded_indexes) if indexed else sum(1 for phase, _, _ in finished.values() if phase == "Succeeded")
        status = dict(job.get("status") or {})
        now = now_rfc3339()
        conditions = list(status.get("conditions") or [])
        completions = spec.get("completions")
        done = (succeeded >= int(completions)) if completions is not None else (succeeded > 0 and not active)
        to_delete: list[dict] = []
        ended: tuple[str, str, str] | None = None  # the Event of a Job that finishes (enactJobFinished)
        if fail_job is not None:  # a FailJob rule matched (getFailJobMessage): the Job fails at once
            reason = pod_failure_policy.REASON
            conditions += [job_pods.condition(t, reason, fail_job, now) for t in ("FailureTarget", "Failed")]
            to_delete = active
            ended = ("Warning", reason, fail_job)
        elif failed > int(spec.get("backoffLimit", 6)):
            message = "Job has reached the specified backoff limit"
            conditions += [job_pods.condition(t, "BackoffLimitExceeded", message, now) for t in ("FailureTarget", "Failed")]
            to_delete = active
            ended = ("Warning", "BackoffLimitExceeded", message)
        elif done:
            message = "Reached expected number of succeeded pods"
            conditions += [job_pods.condition(t, "CompletionsReached", message, now) for t in ("SuccessCriteriaMet", "Complete")]
            status["completionTime"] = now
            to_delete = active
            ended = ("Normal", "Completed", "Job completed")
        elif spec.get("suspend"):
            if not any(c.get("type") == "Suspended" for c in conditions):
                conditions.append(job_pods.condition("Suspended", "JobSuspended", "Job suspended", now))
                self._event(job, "Normal", "Suspended", "Job suspended")
            to_delete = active[:MAX_POD_CREATE_DELETE_PER_SYNC]
        else:
            status.setdefault("startTime", now)
            to_delete = list(job_pods.excess_active(job, active, succeeded))[:MAX_POD_CREATE_DELETE_PER_SYNC]
            # onlyReplaceFailedPods: a terminating pod holds its place (and index) until it has Failed.
            busy = active + terminating if pod_failure_policy.only_replace_failed(job) else active
            # manageJob: deletions take precedence; a sync that deletes creates nothing.
            creates = [] if to_delete else list(job_pods.plan_creates(job, busy, succeeded_indexes, succeeded))
            await self._create_slow_start(key, job, creates[:MAX_POD_CREATE_DELETE_PER_SYNC])
        # Deletes go out together (job_controller.go deleteJobPods: one goroutine per pod).
        await _all(self._delete(key, job, pod) for pod in to_delete)
        gone = {p["metadata"]["uid"] for p in to_delete}
        still = [p for p in active if p["metadata"]["uid"] not in gone]
        status.update({"active": len(still), "ready": sum(1 for p in still if job_pods.is_ready(p)),
                       "terminating": len(terminating),
                       "succeeded": succeeded, "failed": failed, "uncountedTerminatedPods": {}})
        if conditions:
            status["conditions"] = conditions
        if indexed and succeeded_indexes:
            status["completedIndexes"] = job_pods.format_indexes(succeeded_indexes)
        for field in ("active", "succeeded", "failed"):
            if not status[field]:
                del status[field]  # omitempty
        if status != (job.get("status") or {}):
            await self._write_status(key, job, status)
        if ended is not None:
            self._event(job, *ended)

    def _event(self, job: dict, event_type: str, reason: str, message: str) -> None:
        self.recorder.event(dict(job, kind="Job", apiVersion="batch/v1"), event_type, reason, message)

    async def _create_slow_start(self, key: str, job: dict, indexes: list[int | None]) -> None:
        """Create the pods in batches of 1, 2, 4, ... sent together, stopping at the first
        batch with a failure (job_controller.go manageJob, controller.SlowStartInitialBatchSize 1):
        a template the API server refuses costs one request, not one per pod."""
        done, batch = 0, SLOW_START_INITIAL_BATCH_SIZE
        while done < len(indexes):
            chunk = indexes[done:done + batch]
            await _all(self._create(key, job, index) for index in chunk)
            done += len(chunk)
            batch *= 2

    async def _create(self, key: str, job: dict, index: int | None) -> None:
        pod = job_pods.pod_from_template(job, index)
        url = f"{self.base_url}/api/v1/namespaces/{job['metadata'].get('namespace', 'default')}/pods"
        async with self._http.post(url, json=pod) as response:
            body = await response.json(content_type=None)
            if response.status != 201:
                message = _status_message(body, response.status)
                causes = ((body or {}).get("details") or {}).get("causes") or [] if isinstance(body, dict) else []
                if any(c.get("type") == "NamespaceTerminating" for c in causes):
                    return  # every later create fails the same way: no Event, no retry (manageJob)
                self._event(job, "Warning", FAILED_CREATE, f"Error creating: {message}")
                raise RuntimeError(f"FailedCreate {key}: {response.status} {message}")
        name = body["metadata"]["name"]
        self._event(job, "Normal", SUCCESSFUL_CREATE, f"Created pod: {name}")
        # The watch may deliver the pod before this response: an expectation it already met would wait for ever.
        if self._pods is None or f"{body['metadata'].get('namespace')}/{name}" not in self._pods.store:
            self._expect.setdefault(key, set()).add(name)

    async def _delete(self, key: str, job: dict, pod: dict) -> None:
        meta = pod["metadata"]
        url = f"{self.base_url}/api/v1/namespaces/{meta.get('namespace')}/pods/{meta['name']}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta.get("uid")}}
        async with self._http.delete(url, json=body) as response:
            answer = await response.json(content_type=None)
            seen = self._pods.store.get(object_key(pod)) if self._pods else None
            if response.status == 200:
                self._event(job, "Normal", SUCCESSFUL_DELETE, f"Deleted pod: {meta['name']}")
            if response.status == 200 and seen is not None and seen["metadata"].get("uid") == meta.get("uid"):
                self._expect.setdefault(key, set()).add(meta["uid"])  # not yet seen gone (the watch may be first)
            elif response.status not in (200, 404, 409):
                self._event(job, "Warning", FAILED_DELETE, f"Error deleting: {_status_message(answer, response.status)}")
                raise RuntimeError(f"FailedDelete {key}: {response.status}")

    async def _write_status(self, key: str, job: dict, status: dict[str, Any]) -> None:
        meta = job["metadata"]
        url = f"{self.base_url}/apis/batch/v1/namespaces/{meta.get('namespace')}/jobs/{meta['name']}/status"
        await put_status(self._http, url, job, status, key)

    # -- the loop ------------------------------------------------------------------------

    async def _work(self) -> None:
        assert self._session is not None
        await asyncio.gather(self._queue.run(self.sync, log, "job", workers=CONCURRENT_JOB_SYNCS),
                             self.recorder.run(self._session))

    async def run(self) -> None:
        """Watch Jobs and pods and sync Jobs until cancelled."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            self._pods = reflector_for(session, self.base_url, "/api/v1/pods", self.on_pod, self.shared)
            self._jobs = reflector_for(session, self.base_url, "/apis/batch/v1/jobs", self.on_job, self.shared)
            # Know the pods before judging the Jobs.
            await run_synced(self._pods, self._jobs, self._work, self.ready)
