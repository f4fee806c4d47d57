"""`ganggate sim up --node-group`: the README's Job, larger than the cluster, starts whole once
kubesim's cluster-autoscaler has added nodes for its ProvisioningRequest; driven with kubectl."""

from __future__ import annotations

import json

from tests.test_sim_up import EXAMPLES, Up, decision_id, eventually, released_and_running, start_up


def test_a_job_larger_than_the_cluster_starts_whole_on_new_nodes(tmp_path) -> None:
    up: Up = start_up(tmp_path, "--nodes", "1", "--gpus-per-node", "4", "--node-group", "gpu:0:2,gpus=8,delay=1",
                      "--autoscaler-scan-seconds", "0.3")
    try:
        applied = up.kubectl("apply", "-f", str(EXAMPLES / "pytorch-ddp-job.yaml"))
        assert applied.returncode == 0, applied.stderr
        seen_partial = []

        def all_running():
            pods = [p for p in up.pods("default") if p["metadata"]["name"].startswith("ddp-train-")]
            bound = [p for p in pods if p["spec"].get("nodeName")]
            gated = [p for p in pods if p["spec"].get("schedulingGates")]
            if bound and (gated or len(pods) < 8):  # a worker bound before the whole gang was released
                seen_partial.append((len(bound), len(gated)))
            return pods if len(pods) == 8 and all(map(released_and_running, pods)) else None

        pods = eventually(all_running, "the 8 workers released and Running", attempts=1200)
        assert not seen_partial  # no worker bound while another was still held back
        assert len({decision_id(p) for p in pods}) == 1
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert any(n.startswith("gpu-") for n in nodes)  # 4 GPUs of node-0 could not hold 8 workers
        requests = up.kubectl("get", "provisioningrequests", "-o", "json")
        assert requests.returncode == 0
        assert json.loads(requests.stdout)["items"] == []  # deleted once the gang started
    finally:
        up.stop()
