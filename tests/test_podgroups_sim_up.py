"""PodGroup gangs on `ganggate sim up`, with kubectl, as a user runs them:

- the API serves PodGroups (GenericWorkload on) but the scheduler does not gang-schedule them:
  ganggate admits them; the shipped example (a PodGroup of minCount 4 and a Job naming it) runs
  whole, two PodGroups that fit only one at a time run one after the other, one larger than the
  cluster is told it can never fit, a pod naming a missing PodGroup waits with an Event saying so;
  each PodGroup's PodGroupInitiallyScheduled condition is written;
- the scheduler gang-schedules them too (GenericWorkload on in it as well) and ganggate runs with
  --podgroups=create: PodGroup pods are left ungated and run whole by the scheduler's plugin, an
  annotation gang still runs whole and gets a PodGroup owned by its Job, and `ganggate status`
  reports both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_sim_up import DECISION, EXAMPLES, KUBECTL, Up, eventually, gate_names, start_up

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
GATE = "scheduling.k8s.io/group-gate"


def apply(up: Up, tmp: Path, name: str, text: str) -> None:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    result = up.kubectl("apply", "-f", str(path))
    assert result.returncode == 0, result.stderr


def podgroup_gang(name: str, size: int, gpus: int = 4, run_seconds: float | None = None, pods: int | None = None) -> str:
    docs = [f"apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: {name}}}\n"
            f"spec: {{schedulingPolicy: {{gang: {{minCount: {size}}}}}}}\n"]
    annotations = f"annotations: {{kubesim.io/run-seconds: '{run_seconds}'}}" if run_seconds else ""
    for index in range(size if pods is None else pods):
        docs.append(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{index}, {annotations}}}\n"
                    f"spec:\n  restartPolicy: Never\n  schedulingGroup: {{podGroupName: {name}}}\n"
                    f"  containers: [{{name: m, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]\n")
    return "---\n".join(docs)


def podgroup(up: Up, name: str) -> dict[str, Any]:
    result = up.kubectl("get", "podgroup", name, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def condition(up: Up, name: str) -> dict[str, Any] | None:
    return next(iter(podgroup(up, name).get("status", {}).get("conditions") or []), None)


def members(up: Up, group: str) -> list[dict[str, Any]]:
    return [p for p in up.pods("default") if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group
            or (p["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name") == group]


def running(pods: list[dict[str, Any]], count: int) -> bool:
    return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)


def event(up: Up, reason: str, pod: str) -> dict[str, Any] | None:
    result = up.kubectl("get", "events", "-o", "json", "--field-selector", f"involvedObject.name={pod}")
    return next((e for e in json.loads(result.stdout)["items"] if e["reason"] == reason), None)


def test_ganggate_admits_podgroups_where_the_scheduler_does_not_gang_schedule_them(tmp_path):
    up = start_up(tmp_path, "--nodes", "2", "--feature-gates", "GenericWorkload=true",
                  "--scheduler-feature-gates", "GenericWorkload=false")
    try:
        assert "podgroups" in up.kubectl("api-resources", "--api-group", "scheduling.k8s.io").stdout
        # two PodGroups of 4 x 4 GPUs, only one of which fits at a time: one runs, then the other
        apply(up, tmp_path, "ab", podgroup_gang("a", 4, run_seconds=1) + "---\n" + podgroup_gang("b", 4, run_seconds=1))
        seen: set[str] = set()

        def both_ran() -> bool:
            pods = up.pods("default")
            live = {g: [p for p in pods if p["metadata"]["name"].startswith(f"{g}-") and p["spec"].get("nodeName")
                        and p["status"].get("phase") not in ("Succeeded", "Failed")] for g in "ab"}
            assert not (live["a"] and live["b"]), "both PodGroups hold GPUs at once"
            seen.update(g for g in "ab" if sum(1 for p in pods if p["metadata"]["name"].startswith(f"{g}-")
                                              and p["spec"].get("nodeName")) == 4)
            return seen == {"a", "b"}

        eventually(both_ran, "both PodGroups run, one after the other", attempts=1200)
        assert condition(up, "a")["status"] == condition(up, "b")["status"] == "True"
        # one larger than the cluster: never bound, told so, its condition False
        apply(up, tmp_path, "big", podgroup_gang("big", 5))
        cannot = eventually(lambda: event(up, "GangCannotFit", "big-0"), "GangCannotFit on big-0")
        assert "can never fit" in cannot["message"]
        said = eventually(lambda: (c := condition(up, "big")) and "GangCannotFit" in c["message"] and c,
                          "big's condition")
        assert (said["status"], said["reason"]) == ("False", "Unschedulable")
        assert not any(p["spec"].get("nodeName") for p in members(up, "big"))
        # the shipped example: a PodGroup of minCount 4 and a Job of 4 pods naming it, run whole
        applied = up.kubectl("apply", "-f", str(EXAMPLES / "podgroups" / "podgroup-job.yaml"))
        assert applied.returncode == 0, applied.stderr
        pods = eventually(lambda: (lambda p: running(p, 4) and p)(members(up, "pg-train")), "pg-train running")
        assert len({json.loads(p["metadata"]["annotations"][DECISION])["id"] for p in pods}) == 1
        assert eventually(lambda: (c := condition(up, "pg-train")) and c["status"] == "True" and c, "pg-train's condition")
        # a pod naming a PodGroup that does not exist waits, gated, and is told why
        apply(up, tmp_path, "late", podgroup_gang("late", 1, gpus=0).split("---\n", 1)[1])
        told = eventually(lambda: event(up, "PodGroupNotFound", "late-0"), "PodGroupNotFound on late-0")
        assert "'late' does not exist" in told["message"] and told["type"] == "Warning"
        assert gate_names(members(up, "late")[0]) == [GATE]
        apply(up, tmp_path, "late-group", podgroup_gang("late", 1, gpus=0, pods=0))
        eventually(lambda: running(members(up, "late"), 1), "late-0 running once its PodGroup exists")
    finally:
        up.stop()


def test_native_gang_scheduling_is_respected_and_annotation_gangs_carry_over(tmp_path):
    up = start_up(tmp_path, "--nodes", "4", "--feature-gates", "GenericWorkload=true",
                  "--podgroups", "create")
    try:
        applied = up.kubectl("apply", "-f", str(EXAMPLES / "podgroups" / "podgroup-job.yaml"))
        assert applied.returncode == 0, applied.stderr
        pods = eventually(lambda: (lambda p: running(p, 4) and p)(members(up, "pg-train")), "pg-train running")
        assert all(not gate_names(p) and DECISION not in (p["metadata"].get("annotations") or {}) for p in pods)
        said = eventually(lambda: condition(up, "pg-train"), "pg-train's condition")
        assert said["status"] == "True" and "ganggate" not in said["message"]  # the scheduler wrote it
        applied = up.kubectl("apply", "-f", str(EXAMPLES / "podgroups" / "annotation-gang-job.yaml"))
        assert applied.returncode == 0, applied.stderr
        pods = eventually(lambda: (lambda p: running(p, 4) and p)(members(up, "ann-train")), "ann-train running")
        assert len({json.loads(p["metadata"]["annotations"][DECISION])["id"] for p in pods}) == 1
        made = podgroup(up, "ann-train")
        assert made["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert [(o["kind"], o["name"]) for o in made["metadata"]["ownerReferences"]] == [("Job", "ann-train")]
        assert eventually(lambda: (c := condition(up, "ann-train")) and c["status"] == "True", "ann-train's condition")
        status = subprocess.run([str(Path(sys.executable).parent / "ganggate"), "status", "--kubeconfig",
                                 str(up.kubeconfig)], capture_output=True, text=True, timeout=60).stdout
        assert "default/ann-train" in status and "running" in status
        assert "PodGroups admitted by the scheduler's gang plugin" in status and "default/pg-train  4/4" in status
    finally:
        up.stop()
