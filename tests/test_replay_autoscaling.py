"""A replay on an autoscaled cluster (--node-group): ganggate with the autoscaler off leaves a gang
larger than the static cluster waiting for ever; asking for room (ProvisioningRequests or
placeholders) starts every gang whole, with no GPU-hour held by a partial gang."""

from __future__ import annotations

import pytest

from ganggate.replay.results.autoscaling import paid
from ganggate.replay.run.engine import Scenario, run_scenario, uniform_nodes
from ganggate.replay.traces.format import Job
from ganggate.sim.autoscaler.nodegroups import parse_node_group

JOBS = [
    Job("small", 0, 2, 4, "1", "1Gi", 600),
    Job("big", 60, 3, 8, "1", "1Gi", 1800),  # 24 GPUs: more than the static 8, within 8 + 3 x 8
    Job("after", 120, 1, 2, "1", "1Gi", 300),
]


def _scenario() -> Scenario:
    return Scenario(JOBS, uniform_nodes(1, 8), node_groups=[parse_node_group("gpu:0:3,gpus=8,delay=60")],
                    autoscaler={"scan_seconds": 30.0, "unneeded_seconds": 600.0})


@pytest.mark.parametrize("mode", ["provreq", "placeholders"])
async def test_asking_for_room_starts_the_big_gang_whole_on_new_nodes(mode: str) -> None:
    result = await run_scenario(_scenario(), mode, exact_webhook=False)
    figures = paid(mode, result.provisioned, result.samples, result.records, result.end)
    assert figures.started == 3 and figures.partial_gpu_hours == 0.0
    big = next(r for r in result.records if r.job_id == "big")
    assert big.started_at is not None and any(n.startswith("gpu-") for n in big.nodes)
    assert max(g for _, g in result.provisioned) > 8  # nodes were bought
    assert result.provisioned[-1][1] == 8  # and given back once unneeded (the group's minimum is 0)


async def test_with_the_autoscaler_off_the_big_gang_never_starts_and_holds_nothing() -> None:
    result = await run_scenario(_scenario(), "ganggate", exact_webhook=False)
    figures = paid("ganggate", result.provisioned, result.samples, result.records, result.end)
    big = next(r for r in result.records if r.job_id == "big")
    assert big.started_at is None and figures.partial_gpu_hours == 0.0
    assert max(g for _, g in result.provisioned) == 8  # gated pods are invisible to the autoscaler
