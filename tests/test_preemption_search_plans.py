"""The preemption search asks "does the gang fit now?" after each victim it adds and each it
prunes; for a gang of one shape asking whole GPUs it asks packing.fits_as_planned instead of
placing the gang and giving the room back. The plans (victims, placement, message) and the
reasons for none are those of placing it every time, on random clusters of many small
lower-priority gangs."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ganggate.core.incremental import IncrementalRounds
from ganggate.core.policy import preemption
from ganggate.core.policy.preemption import plan_preemption
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

NOW = 1704067200.0 + 60


def _cluster(seed: int) -> ClusterState:
    """Nodes of 8 GPUs filled by owned, released gangs of priority 0-2 (1-4 pods of 1-4 GPUs),
    and gangs of priority 100 (one shape, whole GPUs) that fit nowhere."""
    rng = random.Random(seed)
    nodes = [make_node(f"n{i:02d}", gpus=8, cpu="96", memory="768Gi") for i in range(rng.randint(6, 16))]
    free = {n["metadata"]["name"]: 8 for n in nodes}
    pods: list[dict] = []
    for g in range(200):
        size, gpus = rng.randint(1, 4), rng.choice((1, 1, 2, 4))
        spots = [name for name, left in free.items() if left >= gpus]
        if len(spots) < size:
            continue
        chosen = rng.sample(spots, size)
        for j, node in enumerate(chosen):
            free[node] -= gpus
            pods.append(make_pod(f"low{g}-{j}", namespace="ml", gang=f"low{g}", pod_num=size, gpus=gpus, gated=False,
                                 node_name=node, phase="Running", owner=f"low{g}", priority=rng.randint(0, 2),
                                 created=f"2024-01-01T00:00:{rng.randrange(60):02d}Z",
                                 decision={"id": f"d{g}", "node": node, "time": "2024-01-01T00:00:00Z"}))
    for h in range(3):
        size, gpus = rng.randint(1, 6), rng.choice((1, 2, 4, 8))
        pods += [make_pod(f"hi{h}-{j}", namespace="ml", gang=f"hi{h}", pod_num=size, gpus=gpus, priority=100,
                          owner=f"hi{h}", created=f"2024-01-01T00:01:{h:02d}Z") for j in range(size)]
    state = ClusterState()
    state.reset(nodes, pods)
    return state


def _search(state: ClusterState) -> Any:
    waitings = IncrementalRounds().decide(state, NOW)[1]
    plan, reasons = plan_preemption(state, waitings, NOW)
    shown = None if plan is None else (plan.preemptor, [v.name for v in plan.victims], plan.placement, plan.message)
    return shown, [(r.gang_key, r.reason) for r in reasons]


@pytest.mark.parametrize("seed", range(12))
def test_the_search_plans_what_placing_the_gang_each_time_plans(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    state = _cluster(seed)
    told = _search(state)
    monkeypatch.setattr(preemption, "fits_as_planned", lambda *args, **kwargs: None)  # always place it
    assert _search(state) == told
