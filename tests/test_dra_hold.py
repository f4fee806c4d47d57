"""A released DRA gang's devices are held for it before any member can bind: on
`ganggate sim up --dra`, the moment the API server shows the first member without its gate, every
member's ResourceClaim is already allocated on the node that member is then bound to (so no other
pod can be given those devices between the release and the bindings), and the members run whole
with their claims reserved for them."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.test_dra_e2e import apply, claims, pod, template
from tests.test_sim_up import KUBECTL, eventually, gate_names, released_and_running, start_up

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def claims_at_first_release(api_url: str, prefix: str, seen: dict, stop: threading.Event,
                            watching: threading.Event) -> None:
    """Watch the pods; when one named `prefix`* first shows without its gate, read every claim."""
    with urllib.request.urlopen(f"{api_url}/api/v1/namespaces/default/pods?watch=1", timeout=120) as stream:
        watching.set()
        for line in stream:
            if stop.is_set():
                return
            obj = json.loads(line)["object"]
            if obj["metadata"]["name"].startswith(prefix) and not gate_names(obj):
                with urllib.request.urlopen(f"{api_url}/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
                                            timeout=30) as response:
                    seen["claims"] = json.loads(response.read())["items"]
                with urllib.request.urlopen(f"{api_url}/api/v1/namespaces/default/pods", timeout=30) as response:
                    seen["pods"] = json.loads(response.read())["items"]
                return


def node_of(claim: dict) -> str | None:
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            return field["values"][0]
    return None


def test_a_released_dra_gangs_claims_are_allocated_on_its_nodes_before_any_gate_goes(tmp_path: Path) -> None:
    up = start_up(tmp_path, "--dra", "--nodes", "2", "--gpus-per-node", "8")
    seen: dict = {}
    stop, watching = threading.Event(), threading.Event()
    watcher = threading.Thread(target=claims_at_first_release, args=(up.api_url, "held-", seen, stop, watching),
                               daemon=True)
    watcher.start()
    try:
        assert watching.wait(60), "the watch of the pods did not open"
        apply(up, template("two-gpus", 2), *(pod(f"held-{i}", claim_template="two-gpus", gang=("held", 6)) for i in range(6)))

        def running():
            pods = [p for p in up.pods("default") if p["metadata"]["name"].startswith("held-")]
            return pods if len(pods) == 6 and all(released_and_running(p) for p in pods) else None
        pods = {p["metadata"]["name"]: p for p in eventually(running, "the gang of 6 x 2 GPUs running whole")}
        watcher.join(timeout=60)
        assert "claims" in seen, "the watch never showed a released member"

        # When the first gate went: the six claims allocated, none reserved yet, no member bound.
        at_release = {c["metadata"]["ownerReferences"][0]["name"]: c for c in seen["claims"]}
        assert sorted(at_release) == sorted(pods)
        assert all(node_of(c) for c in at_release.values()), {n: c.get("status") for n, c in at_release.items()}
        assert not any(p["spec"].get("nodeName") for p in seen["pods"] if p["metadata"]["name"].startswith("held-"))
        # Each member bound where its claim was allocated then; 12 different devices.
        for name, member in pods.items():
            assert member["spec"]["nodeName"] == node_of(at_release[name])
        devices = [(r["pool"], r["device"]) for c in at_release.values()
                   for r in c["status"]["allocation"]["devices"]["results"]]
        assert len(devices) == 12 and len(set(devices)) == 12
        # Now running: each claim reserved for its pod, the allocation unchanged.
        now = {c["metadata"]["ownerReferences"][0]["name"]: c for c in claims(up) if c["metadata"]["name"].startswith("held-")}
        for name, claim in now.items():
            assert [r["name"] for r in claim["status"]["reservedFor"]] == [name]
            assert claim["status"]["allocation"] == at_release[name]["status"]["allocation"]
    finally:
        stop.set()
        assert up.stop() == 0
