"""Which Jobs count ganggate's restarts as failures, and what the user is told to add."""

from __future__ import annotations

from ganggate.core.policy.disruption import condition_patch, restart_advice

IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def job(*rules: dict, backoff: int | None = None) -> dict:
    spec: dict = {"podFailurePolicy": {"rules": list(rules)}} if rules else {}
    if backoff is not None:
        spec["backoffLimit"] = backoff
    return {"spec": spec}


def test_a_job_ignoring_disruption_targets_needs_nothing() -> None:
    assert restart_advice(job(IGNORE)) is None
    fail_on_42 = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    assert restart_advice(job(fail_on_42, IGNORE)) is None  # 42 is not what a killed pod reports


def test_a_job_without_the_rule_is_told_what_to_add() -> None:
    advice = restart_advice(job(backoff=3))
    assert advice is not None and "backoffLimit (3)" in advice
    assert 'podFailurePolicy: {rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget, status: "True"}]}]}' in advice


def test_a_rule_ahead_that_counts_or_fails_a_deleted_pod_is_named() -> None:
    fail_nonzero = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}
    assert "rule 0 (FailJob on exit codes)" in (restart_advice(job(fail_nonzero, IGNORE)) or "")
    count = {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert "rule 0 says Count for DisruptionTarget" in (restart_advice(job(count, IGNORE)) or "")


def test_the_condition_patch_merges_by_type() -> None:
    patch = condition_patch("ganggate: gang ml/g lost pod w-0 (Failed); restarting the gang whole", "2024-01-01T00:00:00Z")
    [condition] = patch["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("DisruptionTarget", "True", "DeletionByGanggate")
