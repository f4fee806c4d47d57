"""Restarts that do not fail Jobs (issue #19), end to end on kubesim with the real webhook, controller
and Job controller: ganggate marks the pods it deletes DisruptionTarget (reason DeletionByGanggate),
so the README's 8-pod Job, whose podFailurePolicy ignores that condition, survives ten whole-gang
restarts and completes; without the rule, the first restart tells the user what to add."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.controller_support import is_gated, job_cluster, list_events, wait_for
from tests.test_gang_lifecycle_e2e import Env

README = Path(__file__).resolve().parents[1] / "README.md"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def readme_job() -> dict:
    """The README's Job example, as a user would copy it."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    job = next(yaml.safe_load(b) for b in blocks if "kind: Job" in b)
    job["metadata"]["namespace"] = "default"
    job["spec"]["template"]["metadata"].setdefault("labels", {})["app"] = job["metadata"]["name"]
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    return job


def job_status(c: Env, name: str) -> dict:
    return (c.sim.store.get("jobs", "default", name) or {}).get("status") or {}


def conditions(c: Env, name: str) -> set[str]:
    return {x["type"] for x in job_status(c, name).get("conditions") or [] if x.get("status") == "True"}


async def patch_status(c: Env, name: str, status: dict) -> None:
    """A strategic merge patch of pods/<name>/status, as a kubelet writes it."""
    url = f"{c.sim.url}/api/v1/namespaces/default/pods/{name}/status"
    headers = {"Content-Type": "application/strategic-merge-patch+json"}
    async with c.session.patch(url, json={"status": status}, headers=headers) as response:
        assert response.status == 200, await response.text()


async def disrupt(c: Env, pod: dict) -> None:
    """What the kubelet does to a pod it evicts under node pressure: DisruptionTarget
    (TerminationByKubelet), then the containers killed and the pod Failed."""
    name = pod["metadata"]["name"]
    await patch_status(c, name, {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
         "message": "The node was low on resource: memory."}]})
    await c.sim.fail_pod("default", name, exit_code=137)


async def succeed_all(c: Env, pods: list[dict]) -> None:
    for pod in pods:
        await patch_status(c, pod["metadata"]["name"], {
            "phase": "Succeeded", "containerStatuses": [{"name": "trainer", "image": "x", "imageID": "", "ready": False,
                                                         "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}]})


async def test_the_readme_job_survives_ten_whole_gang_restarts_and_completes(tmp_path):
    job = readme_job()
    name = job["metadata"]["name"]
    assert job["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    async with job_cluster(tmp_path, Env, nodes=1, gpus_per_node=8, time_scale=10.0) as c:
        await c.request("POST", JOBS, job)
        seen: set[str] = set()
        for restart in range(10):
            async def fresh(restart: int = restart, seen: set[str] = seen) -> list[dict] | None:
                pods = await c.running(name, 8, what=f"{name} running (restart {restart})")
                return pods if not seen & {p["metadata"]["uid"] for p in pods} else None
            pods = await wait_for(fresh, timeout=60, what=f"{name} running again with new pods ({restart})")
            seen |= {p["metadata"]["uid"] for p in pods}
            await disrupt(c, pods[restart % 8])
        pods = await wait_for(lambda: _fresh(c, name, seen), timeout=60, what=f"{name} running after 10 restarts")
        assert "Failed" not in conditions(c, name)
        await succeed_all(c, pods)
        await wait_for(lambda: _true("Complete" in conditions(c, name)), timeout=60, what="the Job complete")
        assert not job_status(c, name).get("failed")  # nothing counted against backoffLimit
        # The 7 pods of each restart that ganggate deleted went with its DisruptionTarget reason
        # (the last state the test's watch saw of each pod).
        marked = [r for r in c.env.log.records.values() if r.deleted and any(
            x.get("type") == "DisruptionTarget" and x.get("reason") == "DeletionByGanggate"
            for x in (r.last.get("status") or {}).get("conditions") or [])]
        assert len(marked) == 70
        assert not [e for e in await list_events(c.env.core) if e.get("reason") == "GangRestartCountsAsFailure"]


async def _fresh(c: Env, name: str, seen: set[str]) -> list[dict] | None:
    pods = [p for p in c.pods(name) if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == 8 and not seen & {p["metadata"]["uid"] for p in pods} else None


async def _true(value: Any) -> Any:
    return value


async def test_without_the_rule_the_first_restart_names_the_fix(tmp_path):
    job = readme_job()
    del job["spec"]["podFailurePolicy"]
    job["spec"]["backoffLimit"] = 20
    name = job["metadata"]["name"]
    async with job_cluster(tmp_path, Env, nodes=1, gpus_per_node=8, time_scale=10.0) as c:
        await c.request("POST", JOBS, job)
        pods = await c.running(name, 8)
        await disrupt(c, pods[0])

        async def advised() -> list[dict] | None:
            return [e for e in await list_events(c.env.core) if e.get("reason") == "GangRestartCountsAsFailure"] or None
        [event] = await wait_for(advised, what="a GangRestartCountsAsFailure event")
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "Job" and event["involvedObject"]["name"] == name
        assert f"ganggate restarted gang default/{name} whole" in event["message"]
        assert ("add to the Job's spec podFailurePolicy: {rules: [{action: Ignore, onPodConditions: "
                "[{type: DisruptionTarget, status: \"True\"}]}]}") in event["message"]
        assert "backoffLimit (20)" in event["message"]
        # The restart counted: 7 deleted pods (the disrupted one too, without a rule).
        await wait_for(lambda: _true((job_status(c, name).get("failed") or 0) >= 7), what="the failures counted")
        await c.running(name, 8, what="running again")
        assert not any(is_gated(p) for p in c.pods(name))
