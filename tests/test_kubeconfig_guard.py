"""`sim up` and `sim serve` never overwrite the kubeconfig of a cluster that still answers
(sim/kubeconfig.py in_use); tests/test_sim_up.py runs the commands themselves."""

from __future__ import annotations

import asyncio

from ganggate.sim import Simulator


async def test_a_kubeconfig_whose_cluster_answers_is_in_use_until_it_stops(tmp_path) -> None:
    """What `sim up` and `sim serve` check before writing their kubeconfig (sim/kubeconfig.py)."""
    from ganggate.sim.kubeconfig import in_use

    path = tmp_path / "kubesim.kubeconfig"
    async with Simulator(nodes=1, scheduler=False, kubelet=False, kubeconfig_path=str(path)) as sim:
        busy = await asyncio.to_thread(in_use, path)
        assert busy is not None and f"still answers at {sim.url}" in busy and "--kubeconfig-out" in busy
    assert await asyncio.to_thread(in_use, path) is None  # stopped: the file may be written again
    assert in_use(tmp_path / "absent") is None


def test_a_refused_connection_says_no_cluster_answers_and_suggests_sim_up_on_loopback_only() -> None:
    from ganggate.kube.calls import NO_CLUSTER, ApiCallError, no_cluster_message

    local = ApiCallError(0, NO_CLUSTER, no_cluster_message("http://127.0.0.1:8001"))
    assert str(local) == "no cluster answers at http://127.0.0.1:8001 (is `ganggate sim up` running?)"
    assert local.retryable  # a cluster starting up may answer on the next try
    assert no_cluster_message("https://10.0.0.1:6443") == "no cluster answers at https://10.0.0.1:6443"
