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


def record_watch(url: str, record: list, stop: threading.Event, watching: threading.Event) -> None:
    """Append every event of a watch of `url` (as JSON objects) to `record` until `stop`."""
    with urllib.request.urlopen(f"{url}?watch=1", timeout=120) as stream:
        watching.set()
        for line in stream:
            record.append(json.loads(line))
            if stop.is_set():
                return


def revision(event: dict) -> int:
    """The cluster-wide revision an event was written at (one counter for every kind, as etcd's)."""
    return int(event["object"]["metadata"]["resourceVersion"])


def node_of(claim: dict) -> str | None:
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            return field["values"][0]
    return None


def test_a_released_dra_gangs_claims_are_allocated_on_its_nodes_before_any_gate_goes(tmp_path: Path) -> None:
    up = start_up(tmp_path, "--dra", "--nodes", "2", "--gpus-per-node", "8")
    pod_events: list = []
    claim_events: list = []
    stop = threading.Event()
    watchers = []
    for url, record in ((f"{up.api_url}/api/v1/namespaces/default/pods", pod_events),
                        (f"{up.api_url}/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", claim_events)):
        watching = threading.Event()
        watcher = threading.Thread(target=record_watch, args=(url, record, stop, watching), daemon=True)
        watcher.start()
        watchers.append(watcher)
        assert watching.wait(60), f"the watch of {url} did not open"
    try:
        apply(up, template("two-gpus", 2), *(pod(f"held-{i}", claim_template="two-gpus", gang=("held", 6)) for i in range(6)))

        def running():
            pods = [p for p in up.pods("default") if p["metadata"]["name"].startswith("held-")]
            return pods if len(pods) == 6 and all(released_and_running(p) for p in pods) else None
        pods = {p["metadata"]["name"]: p for p in eventually(running, "the gang of 6 x 2 GPUs running whole")}

        # The revision at which the API server first showed a member without its gate, and the first
        # at which a member was bound: the revisions are one cluster-wide order, as etcd's are.
        members = [e for e in pod_events if e["object"]["metadata"]["name"].startswith("held-")]
        first_ungated = min(revision(e) for e in members if not gate_names(e["object"]))
        first_bound = min(revision(e) for e in members if e["object"]["spec"].get("nodeName"))
        assert first_ungated < first_bound
        # Each member's claim: its allocation as first written, and the revision it was written at.
        allocated: dict[str, tuple[int, dict]] = {}
        for event in claim_events:
            claim = event["object"]
            if (claim.get("status") or {}).get("allocation") and claim["metadata"].get("ownerReferences"):
                allocated.setdefault(claim["metadata"]["ownerReferences"][0]["name"], (revision(event), claim))
        assert sorted(allocated) == sorted(pods)
        # When the first gate went, the six claims were allocated already (not by the scheduler at
        # binding, which comes later).
        assert all(rv < first_ungated for rv, _ in allocated.values()), (first_ungated, {n: rv for n, (rv, _) in allocated.items()})
        at_release = {name: claim for name, (_, claim) in allocated.items()}
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
