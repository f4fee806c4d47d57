"""GPUs claimed through DRA on `ganggate sim up --dra --nodes 2 --gpus-per-node 8`, driven by kubectl:
a DDP Job gang claiming 2 GPUs per pod through a ResourceClaimTemplate (examples/dra/) runs whole;
a second, wider gang waits gated with no claim allocated while ordinary 1-GPU DRA pods run, and
starts whole once the first gang is gone; a gang whose selector no device matches gets
GangCannotFit; a gang of plain nvidia.com/gpu pods runs whole through the DeviceClass's
extendedResourceName; no gang is ever left partly bound (pods sampled throughout).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ganggate.replay.results.gangcheck import gang_states
from tests.test_sim_up import EXAMPLES, KUBECTL, eventually, gate_names, released_and_running, start_up

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
PARTIAL_LIMIT_SECONDS = 5.0


def template(name: str, count: int, selector: str | None = None) -> dict:
    exactly: dict = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}}}


def pod(name: str, *, claim_template: str | None = None, gpus: int = 0, gang: tuple[str, int] | None = None) -> dict:
    container: dict = {"name": "main", "image": "busybox:1.36", "resources": {}}
    spec: dict = {"containers": [container], "restartPolicy": "Never"}
    if claim_template:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim_template}]
        container["resources"]["claims"] = [{"name": "gpus"}]
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    annotations = {"scheduling.k8s.io/group-name": gang[0], "scheduling.k8s.io/group-pod-num": str(gang[1])} if gang else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


def apply(up, *objects: dict) -> None:
    result = subprocess.run([KUBECTL, "--kubeconfig", str(up.kubeconfig), "apply", "-f", "-"],
                            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


class Sampler(threading.Thread):
    """Reads the pods every few hundred ms; records how long any gang stayed partly bound."""

    def __init__(self, up) -> None:
        super().__init__(daemon=True)
        self.up, self.stopped = up, threading.Event()
        self.since: dict[str, float] = {}
        self.longest: dict[str, float] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            result = self.up.kubectl("get", "pods", "-o", "json")
            if result.returncode == 0:
                now = time.monotonic()
                states = gang_states(json.loads(result.stdout)["items"])
                for key, state in states.items():
                    if state.whole_running or state.waiting:
                        self.since.pop(key, None)
                    else:
                        start = self.since.setdefault(key, now)
                        self.longest[key] = max(self.longest.get(key, 0.0), now - start)
                self.samples += 1
            self.stopped.wait(0.3)


def claims(up) -> list[dict]:
    result = up.kubectl("get", "resourceclaims", "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["items"]


def events_of(up, reason: str) -> list[str]:
    result = up.kubectl("get", "events", "--field-selector", f"reason={reason}", "-o", "json")
    return [f"{e['involvedObject']['name']}: {e['message']}" for e in json.loads(result.stdout)["items"]]


def test_dra_gangs_run_whole_wait_whole_and_say_when_they_cannot_fit(tmp_path: Path) -> None:
    up = start_up(tmp_path, "--dra", "--nodes", "2", "--gpus-per-node", "8")
    sampler = Sampler(up)
    sampler.start()
    try:
        applied = up.kubectl("apply", "-f", str(EXAMPLES / "dra" / "ddp-job.yaml"))
        assert applied.returncode == 0, applied.stderr

        def ddp_running():
            pods = [p for p in up.pods("default") if p["metadata"]["name"].startswith("ddp-dra-")]
            return pods if len(pods) == 4 and all(released_and_running(p) for p in pods) else None
        eventually(ddp_running, "the DDP gang of 4 x 2 GPUs running whole")

        # A gang of 6 x 2 GPUs cannot fit beside it (8 of 16 GPUs free): it waits gated.
        apply(up, template("one-gpu", 1), *(pod(f"wide-{i}", claim_template="two-gpus", gang=("wide", 6)) for i in range(6)))
        # Why it waits: GangUnschedulable ("room for 4 of them") once the controller has seen all 6
        # pods, GangWaiting first if it saw them arrive one by one; either way none is released.
        eventually(lambda: any(e.startswith("wide-") for reason in ("GangUnschedulable", "GangWaiting")
                               for e in events_of(up, reason)) and
                   len([c for c in claims(up) if c["metadata"]["name"].startswith("wide-")]) == 6,
                   "the wide gang waiting, its 6 claims made")
        assert all(p["spec"].get("schedulingGates") for p in up.pods("default")
                   if p["metadata"]["name"].startswith("wide-"))
        # Ordinary 1-GPU DRA pods still get the free devices meanwhile.
        apply(up, *(pod(f"single-{i}", claim_template="one-gpu") for i in range(2)))
        eventually(lambda: (lambda p: len(p) == 2 and all(x["status"].get("phase") == "Running" for x in p))(
            [p for p in up.pods("default") if p["metadata"]["name"].startswith("single-")]), "the single pods running")
        wide = [p for p in up.pods("default") if p["metadata"]["name"].startswith("wide-")]
        assert len(wide) == 6 and all(gate_names(p) and not p["spec"].get("nodeName") for p in wide)
        assert not [c["metadata"]["name"] for c in claims(up)
                    if c["metadata"]["name"].startswith("wide-") and (c.get("status") or {}).get("allocation")]

        # A selector no device matches: GangCannotFit, naming it.
        apply(up, template("b200", 1, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"),
              *(pod(f"b200-{i}", claim_template="b200", gang=("b200", 2)) for i in range(2)))
        cannot = eventually(lambda: [e for e in events_of(up, "GangCannotFit") if e.startswith("b200-")],
                            "GangCannotFit for the B200 gang")
        assert "NVIDIA B200" in cannot[0], cannot

        # The first gang ends: the wide one starts whole.
        deleted = up.kubectl("delete", "job", "ddp-dra", "--wait=false")
        assert deleted.returncode == 0, deleted.stderr
        eventually(lambda: (lambda p: len(p) == 6 and all(released_and_running(x) for x in p))(
            [p for p in up.pods("default") if p["metadata"]["name"].startswith("wide-")]), "the wide gang running whole")
        assert all((c.get("status") or {}).get("allocation") for c in claims(up) if c["metadata"]["name"].startswith("wide-"))

        # Plain nvidia.com/gpu pods: served by the class's extendedResourceName (2 GPUs are left).
        apply(up, *(pod(f"plain-{i}", gpus=1, gang=("plain", 2)) for i in range(2)))
        plain = eventually(lambda: (lambda p: p if len(p) == 2 and all(released_and_running(x) for x in p) else None)(
            [p for p in up.pods("default") if p["metadata"]["name"].startswith("plain-")]), "the plain GPU gang running")
        assert all(p["status"].get("extendedResourceClaimStatus", {}).get("resourceClaimName") for p in plain)

        status = subprocess.run([sys.executable, "-m", "ganggate", "status", "--kubeconfig", str(up.kubeconfig)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "default/b200" in status.stdout and "NVIDIA B200" in status.stdout, status.stdout
    finally:
        sampler.stopped.set()
        sampler.join(timeout=30)
        assert up.stop() == 0
    assert sampler.samples > 10
    assert all(seconds <= PARTIAL_LIMIT_SECONDS for seconds in sampler.longest.values()), sampler.longest
