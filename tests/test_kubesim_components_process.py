"""kubesim with its scheduler and controllers in a process of their own (components_process,
`ganggate sim serve --components-process`): they act over HTTP as they do on the server's loop."""

from __future__ import annotations

import pytest

from ganggate.sim import Simulator
from ganggate.sim.clock import ManualClock
from tests.test_kubesim_scheduler import simulator
from tests.test_kubesim_scheduler_support import bound_node, condition, pod_manifest, unschedulable_message


async def test_pods_are_bound_by_the_scheduler_in_the_other_process():
    async with simulator(nodes=2, gpus_per_node=8, components_process=True) as (sim, api):
        assert sim.components == {}  # nothing of theirs runs on this loop
        for i in range(4):
            await api.create_pod(pod_manifest(f"p{i}", cpu="1", memory="1Gi", gpus=1))
        nodes = [await bound_node(api, f"p{i}") for i in range(4)]
        assert sorted(nodes) == ["node-0", "node-0", "node-1", "node-1"]
        assert condition(await api.pod("p0"))["status"] == "True"
        await api.create_pod(pod_manifest("big", gpus=9))
        assert await unschedulable_message(api, "big") == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


async def test_the_components_process_is_stopped_with_the_simulator():
    async with Simulator(nodes=1, kubelet=False, components_process=True) as sim:
        process = sim._process
        assert process is not None and process.returncode is None
    assert process.returncode is not None


def test_a_manual_clock_cannot_cross_into_another_process():
    with pytest.raises(ValueError, match="wall clock"):
        Simulator(nodes=1, clock=ManualClock(), components_process=True)


async def test_sim_serve_components_process_binds_pods_and_stops_on_sigterm(tmp_path):
    import asyncio
    import json
    import sys

    import aiohttp
    import yaml

    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ganggate", "sim", "serve", "--port", "0", "--nodes", "1", "--no-kubelet",
        "--components-process", "--kubeconfig-out", str(kubeconfig), stdout=asyncio.subprocess.PIPE)
    try:
        assert b"kubesim serving" in await asyncio.wait_for(process.stdout.readline(), 60)
        url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        async with aiohttp.ClientSession() as session:
            body = json.dumps(pod_manifest("p", cpu="1", memory="1Gi", gpus=1))
            async with session.post(f"{url}/api/v1/namespaces/default/pods", data=body,
                                    headers={"Content-Type": "application/json"}) as response:
                assert response.status == 201
            for _ in range(500):
                async with session.get(f"{url}/api/v1/namespaces/default/pods/p") as response:
                    pod = await response.json()
                if pod["spec"].get("nodeName"):
                    break
                await asyncio.sleep(0.02)
        assert pod["spec"]["nodeName"] == "node-0"
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0
