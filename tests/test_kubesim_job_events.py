"""kubesim's Job controller as kube-controller-manager's (job_controller.go, controller_utils.go):
FailedCreate and SuccessfulCreate Events on the Job, the failed-sync back-off (1 s doubling to
1 min, forgotten after a success), MaxPodCreateDeletePerSync and the 1 s syncJobBatchPeriod.

The simulator runs on a ManualClock, so every delay is read off the clock exactly (no timing)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from ganggate.sim.client.events import COMBINED_PREFIX, EventCorrelator, make_event
from ganggate.sim.client.workqueue import ExponentialFailureRateLimiter
from ganggate.sim.clock import ManualClock
from ganggate.sim.controllers import job as job_controller
from tests.kubesim_support import Raw, eventually
from tests.test_kubesim_jobs import JOBS, PODS, job_manifest, job_pods

VAPS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
DENY_MESSAGE = "pods of this Job are refused"


@pytest.fixture
async def manual() -> AsyncIterator[tuple[Simulator, Raw, ManualClock]]:
    clock = ManualClock()
    async with Simulator(nodes=1, scheduler=False, kubelet=False, clock=clock) as sim, \
            aiohttp.ClientSession() as session:
        yield sim, Raw(sim.url, session), clock


async def deny_pods_labelled(raw: Raw, label: str) -> None:
    """A ValidatingAdmissionPolicy that refuses the pods carrying `label`."""
    vap = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": "deny"}, "spec": {
               "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                       "operations": ["CREATE"], "resources": ["pods"]}]},
               "validations": [{"expression": f"!has(object.metadata.labels) || !('{label}' in object.metadata.labels)",
                                "message": DENY_MESSAGE}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": "deny"}, "spec": {"policyName": "deny", "validationActions": ["Deny"]}}
    for path, body in ((VAPS, vap), (BINDINGS, binding)):
        status, answer, _ = await raw.request("POST", path, body)
        assert status == 201, answer


def job_events(sim: Simulator, job: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in sim.store.list("events", "default")
            if e["involvedObject"].get("kind") == "Job" and e["involvedObject"].get("name") == job
            and e["reason"] == reason]


def labelled_job(name: str, parallelism: int) -> dict[str, Any]:
    body = job_manifest(name, parallelism=parallelism, completions=parallelism)
    body["spec"]["template"]["metadata"]["labels"] = {"refuse-me": "yes"}
    return body


async def test_a_refused_pod_create_is_a_failed_create_event_retried_1_2_4_8_seconds_later(manual):
    sim, raw, clock = manual
    await deny_pods_labelled(raw, "refuse-me")
    status, created, _ = await raw.request("POST", JOBS, labelled_job("typo", 4))
    assert status == 201, created
    jc = sim.components.get("JobController")
    key = "default/typo"
    for attempt in range(1, 5):
        # Validating admission sees the generated name, so each attempt's message (and Event) differs.
        events = await eventually(lambda attempt=attempt: len(job_events(sim, "typo", "FailedCreate")) == attempt
                                  and job_events(sim, "typo", "FailedCreate"))
        for event in events:
            assert event["type"] == "Warning" and event["source"] == {"component": "job-controller"}
            assert re.fullmatch(r'Error creating: pods "typo-[a-z0-9]{5}" is forbidden: ValidatingAdmissionPolicy '
                                rf"'deny' with binding 'deny' denied request: {DENY_MESSAGE}", event["message"])
        due = await eventually(lambda: jc._queue._waiting.get(key))
        assert due - clock.now() == pytest.approx(2 ** (attempt - 1))  # 1 s, 2 s, 4 s, 8 s
        clock.advance_to(due)
    assert job_pods(sim, "typo") == []  # slow start: one refused create per sync, not four
    # Let the pods through: the next retry creates them, and the back-off starts again from 1 s.
    status, _, _ = await raw.request("DELETE", BINDINGS + "/deny")
    assert status == 200
    clock.advance_to(await eventually(lambda: jc._queue._waiting.get(key)))
    await eventually(lambda: len(job_pods(sim, "typo")) == 4)
    created_events = await eventually(lambda: len(job_events(sim, "typo", "SuccessfulCreate")) == 4
                                      and job_events(sim, "typo", "SuccessfulCreate"))
    names = {p["metadata"]["name"] for p in job_pods(sim, "typo")}
    assert {e["message"] for e in created_events} == {f"Created pod: {n}" for n in names}
    assert jc._queue.rate_limiter.retries(key) == 0


async def test_pod_events_wait_the_batch_period_and_one_sync_creates_at_most_the_limit(manual, monkeypatch):
    sim, raw, clock = manual
    assert job_controller.MAX_POD_CREATE_DELETE_PER_SYNC == 500  # job_controller.go MaxPodCreateDeletePerSync
    monkeypatch.setattr(job_controller, "MAX_POD_CREATE_DELETE_PER_SYNC", 3)  # the same rule, on a small Job
    jc = sim.components.get("JobController")
    status, created, _ = await raw.request("POST", JOBS, job_manifest("wide", parallelism=5, completions=5))
    assert status == 201, created
    # A new Job is synced at once: 3 pods, and no more until a later sync.
    await eventually(lambda: len(job_pods(sim, "wide")) == 3 and not jc.has_work())
    due = await eventually(lambda: jc._queue._waiting.get("default/wide"))
    assert due - clock.now() == pytest.approx(1.0)  # the pods' own ADDED events: batched by 1 s
    assert len(job_pods(sim, "wide")) == 3
    clock.advance_to(due)
    await eventually(lambda: len(job_pods(sim, "wide")) == 5)
    # A deleted pod is replaced one batch period after its deletion, not before.
    await eventually(lambda: not jc.has_work() and "default/wide" not in jc._queue._waiting
                     or clock.advance_to(clock.now() + 1.0))
    victim = job_pods(sim, "wide")[0]["metadata"]["name"]
    status, _, _ = await raw.request("DELETE", f"{PODS}/{victim}", {"gracePeriodSeconds": 0})
    assert status == 200
    due = await eventually(lambda: jc._queue._waiting.get("default/wide"))
    assert due - clock.now() == pytest.approx(1.0)
    assert len([p for p in job_pods(sim, "wide") if not p["metadata"].get("deletionTimestamp")]) == 4
    clock.advance_to(due)
    await eventually(lambda: len([p for p in job_pods(sim, "wide") if not p["metadata"].get("deletionTimestamp")]) == 5)


def test_the_rate_limiter_doubles_from_1_second_to_at_most_1_minute_and_forgets():
    limiter = ExponentialFailureRateLimiter(job_controller.JOB_API_BACKOFF_SECONDS,
                                            job_controller.MAX_JOB_API_BACKOFF_SECONDS)
    assert [limiter.when("a") for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert limiter.when("b") == 1  # per key
    limiter.forget("a")
    assert limiter.when("a") == 1


def _event(message: str, reason: str = "SuccessfulCreate") -> dict[str, Any]:
    ref = {"kind": "Job", "namespace": "default", "name": "big", "uid": "u1", "apiVersion": "batch/v1"}
    return make_event(ref, "job-controller", "Normal", reason, message, 1, "2026-01-01T00:00:00Z")


def test_the_correlator_counts_repeats_combines_the_tenth_message_and_limits_a_burst_to_25():
    correlator = EventCorrelator()
    first = correlator.correlate(_event("Error creating: no", "FailedCreate"), 0.0)
    again = correlator.correlate(_event("Error creating: no", "FailedCreate"), 1.0)
    assert first.event is not None and first.event["count"] == 1
    assert again.event is None and again.patch_name == first.event["metadata"]["name"] and again.patch["count"] == 2
    outcomes = [correlator.correlate(_event(f"Created pod: big-{i}"), 2.0) for i in range(30)]
    written = [o for o in outcomes if not o.skip]
    assert [o.event["message"] for o in written[:9]] == [f"Created pod: big-{i}" for i in range(9)]
    assert written[9].event["message"] == COMBINED_PREFIX + "Created pod: big-9"
    assert all(o.patch_name == written[9].event["metadata"]["name"] for o in written[10:])
    assert len(written) == 25 - 2  # the spam filter: 25 per source and object, two taken by FailedCreate
    assert correlator.correlate(_event("Created pod: late"), 2.0 + 300.0).skip is False  # one refilled in 5 min
