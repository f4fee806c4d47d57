"""kubesim's Job controller honours podFailurePolicy (Ignore, FailJob, Count; onPodConditions and
onExitCodes) and podReplacementPolicy, and the API server validates them, as Kubernetes does."""

from __future__ import annotations

from typing import Any

import pytest

from ganggate.sim.controllers import pod_failure_policy as job_failure_policy
from tests.kubesim_support import eventually
from tests.test_kubesim_jobs import JOBS, PODS, condition_types, job_manifest, job_pods, job_status

DISRUPTION_IGNORED = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def with_policy(name: str, policy: dict | None, **kw: Any) -> dict:
    job = job_manifest(name, **kw)
    if policy is not None:
        job["spec"]["podFailurePolicy"] = policy
    return job


async def fail(raw: Any, pod: dict, *, exit_code: int = 1, disrupted: bool = False) -> None:
    """Fail the pod as a kubelet would (terminated container, phase Failed), after a disruption
    (a DisruptionTarget condition, as eviction or ganggate sets it) when asked."""
    status: dict[str, Any] = {"phase": "Failed", "containerStatuses": [
        {"name": "main", "image": "busybox:1.36", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}}}]}
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    code, body, _ = await raw.request("PATCH", f"{PODS}/{pod['metadata']['name']}/status", {"status": status},
                                      "application/merge-patch+json")
    assert code == 200, body


def test_matching_follows_the_rules_in_order() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "status": {
        "conditions": [{"type": "DisruptionTarget", "status": "True"}],
        "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 42}}}]}}
    fail_42 = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    ignore = DISRUPTION_IGNORED["rules"][0] | {"onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert job_failure_policy.match({"rules": [ignore, fail_42]}, pod) == job_failure_policy.Match(False, "Ignore")
    matched = job_failure_policy.match({"rules": [fail_42, ignore]}, pod)
    assert matched.action == "FailJob" and matched.fail_message == (
        "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0")
    not_in = {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [42]}}
    assert job_failure_policy.match({"rules": [not_in]}, pod) == job_failure_policy.Match()  # no rule matched
    other = {"action": "Ignore", "onExitCodes": {"containerName": "side", "operator": "In", "values": [42]}}
    assert job_failure_policy.match({"rules": [other]}, pod).counts


async def test_a_disrupted_pod_is_ignored_and_replaced_and_a_plain_failure_counts(idle):
    sim, raw = idle
    await raw.request("POST", JOBS, with_policy("pfp", DISRUPTION_IGNORED, completions=2, parallelism=2,
                                                indexed=True, backoff_limit=0))
    await eventually(lambda: len(job_pods(sim, "pfp")) == 2)
    first = job_pods(sim, "pfp")[0]
    await fail(raw, first, exit_code=137, disrupted=True)
    await eventually(lambda: len(job_pods(sim, "pfp")) == 3)  # replaced, same index
    assert "failed" not in job_status(sim, "pfp") and not condition_types(sim, "pfp") & {"Failed"}
    second = next(p for p in job_pods(sim, "pfp") if p["metadata"]["uid"] != first["metadata"]["uid"]
                  and p["status"].get("phase") != "Failed")
    await fail(raw, second)  # no rule matches: counted, and backoffLimit 0 is exceeded
    await eventually(lambda: "Failed" in condition_types(sim, "pfp"))
    assert job_status(sim, "pfp")["failed"] == 1


async def test_a_fail_job_rule_fails_the_job_at_once_with_its_message(idle):
    sim, raw = idle
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In",
                                                               "values": [3, 42]}}]}
    await raw.request("POST", JOBS, with_policy("fatal", policy, completions=2, parallelism=2, backoff_limit=6))
    await eventually(lambda: len(job_pods(sim, "fatal")) == 2)
    victim = job_pods(sim, "fatal")[0]
    await fail(raw, victim, exit_code=42)
    await eventually(lambda: "Failed" in condition_types(sim, "fatal"))
    failed = next(c for c in job_status(sim, "fatal")["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert failed["message"] == (f"Container main for pod default/{victim['metadata']['name']} failed with exit code "
                                 "42 matching FailJob rule at index 0")
    assert "FailureTarget" in condition_types(sim, "fatal")


async def test_a_count_rule_counts_against_the_backoff_limit(idle):
    sim, raw = idle
    policy = {"rules": [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    await raw.request("POST", JOBS, with_policy("counted", policy, completions=1, parallelism=1, backoff_limit=0))
    await eventually(lambda: len(job_pods(sim, "counted")) == 1)
    await fail(raw, job_pods(sim, "counted")[0], disrupted=True)
    await eventually(lambda: "Failed" in condition_types(sim, "counted"))
    assert job_status(sim, "counted")["failed"] == 1


async def test_under_replacement_policy_failed_a_terminating_pod_is_replaced_only_once_failed(idle):
    sim, raw = idle
    job = with_policy("patient", None, completions=1, parallelism=1)
    job["spec"]["podReplacementPolicy"] = "Failed"
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 600
    await raw.request("POST", JOBS, job)
    await eventually(lambda: len(job_pods(sim, "patient")) == 1)
    [pod] = job_pods(sim, "patient")
    name = pod["metadata"]["name"]
    code, body, _ = await raw.request("POST", f"{PODS}/{name}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": "node-0"}})
    assert code == 201, body
    code, _, _ = await raw.request("DELETE", f"{PODS}/{name}")
    assert code == 200
    # The status is written after the sync's creates: once it counts the pod terminating, no
    # replacement was made for it.
    await eventually(lambda: job_status(sim, "patient").get("terminating") == 1)
    assert len(job_pods(sim, "patient")) == 1
    await fail(raw, sim.store.get("pods", "default", name))
    await eventually(lambda: len(job_pods(sim, "patient")) == 2)


@pytest.mark.parametrize("spec, message", [
    ({"podFailurePolicy": {"rules": [{"action": "Ignore"}]}},
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required"),
    ({"podFailurePolicy": {"rules": [{"action": "FailIndex", "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
     'spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set'),
    ({"podFailurePolicy": {"rules": [{"action": "Skip", "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
     'spec.podFailurePolicy.rules[0].action: Unsupported value: "Skip": supported values: "Count", "FailJob", "Ignore"'),
    ({"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}}]}},
     "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator"),
    ({"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2, 1]}}]}},
     "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: [2, 1]: must be ordered"),
    ({"podFailurePolicy": DISRUPTION_IGNORED, "podReplacementPolicy": "TerminatingOrFailed"},
     'spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"'),
    ({"podReplacementPolicy": "Never"},
     'spec.podReplacementPolicy: Unsupported value: "Never": supported values: "Failed", "TerminatingOrFailed"'),
])
async def test_bad_policies_are_refused_and_nothing_is_stored(idle, spec, message):
    sim, raw = idle
    job = job_manifest("bad")
    job["spec"].update(spec)
    status, body, _ = await raw.request("POST", JOBS, job)
    assert status == 422 and message in body["message"], body
    assert sim.store.get("jobs.batch", "default", "bad") is None


async def test_a_policy_needs_restart_policy_never_and_a_pattern_status_defaults_to_true(idle):
    sim, raw = idle
    job = with_policy("onfailure", DISRUPTION_IGNORED)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    status, body, _ = await raw.request("POST", JOBS, job)
    assert status == 422 and ('spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is '
                              "supported when podFailurePolicy is specified") in body["message"]
    status, stored, _ = await raw.request("POST", JOBS, with_policy("fine", DISRUPTION_IGNORED))
    assert status == 201
    assert stored["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}]
    assert stored["spec"]["podReplacementPolicy"] == "Failed"
