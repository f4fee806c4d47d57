"""With rounds planned in a worker thread, the budgets' pass and the preemption search are worked
out there too (each reads the whole state: tens to hundreds of milliseconds at 100,000 pods),
while the controller holds the state's changes; the loop only carries out what they found."""

from __future__ import annotations

import asyncio
import threading

from kubernetes_asyncio import client

from ganggate.controller.lifecycle import protection as protection_module
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.core.policy import preemption as preemption_module
from ganggate.core.state.snapshot import make_node, make_pod


async def test_the_budgets_pass_and_the_preemption_search_run_off_the_event_loop(monkeypatch) -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # nothing is called
    ctl = Controller(api, ControllerConfig(leader_election=False))
    try:
        loop_thread = threading.current_thread()
        where: dict[str, list[bool]] = {"budgets": [], "search": []}
        created: list[str] = []
        real_plan_budgets, real_plan_preemption = protection_module.plan_budgets, preemption_module.plan_preemption

        def plan_budgets(*args, **kwargs):
            where["budgets"].append(threading.current_thread() is loop_thread)
            return real_plan_budgets(*args, **kwargs)

        def plan_preemption(*args, **kwargs):
            where["search"].append(threading.current_thread() is loop_thread)
            return real_plan_preemption(*args, **kwargs)

        async def create(body: dict) -> None:
            created.append(body["metadata"]["name"])

        monkeypatch.setattr(protection_module, "plan_budgets", plan_budgets)
        monkeypatch.setattr("ganggate.controller.lifecycle.preemptor.plan_preemption", plan_preemption)
        protection = ctl.lifecycle.protection
        assert protection is not None
        protection.informer.synced = True  # (listed: no budget yet)
        protection._create = create
        ctl._start_release = lambda decision, now: None
        ctl._on_node_event("ADDED", make_node("n0", gpus=8))
        for i in range(2):  # a released, running gang of low priority: it gets a budget, and may be preempted
            ctl._on_pod_event("ADDED", make_pod(f"low-{i}", namespace="ml", gang="low", pod_num=2, gpus=4, gated=False,
                                                node_name="n0", phase="Running", owner="low", priority=0,
                                                decision={"id": "d", "node": "n0", "time": "2024-01-01T00:00:00Z"}))
        # a gang of higher priority that fits nowhere: the search runs for it
        ctl._on_pod_event("ADDED", make_pod("hi-0", namespace="ml", gang="hi", pod_num=1, gpus=8, priority=100,
                                            owner="hi"))
        started: list[object] = []

        async def run(plan, now) -> None:  # (the evictions are the API's: not here)
            started.append(plan)

        assert ctl.preemptor is not None
        ctl.preemptor._run = run
        await ctl.round_off_loop(1704067200.0 + 60)
        for _ in range(100):  # the pass's API calls are a task of its own
            if created and started:
                break
            await asyncio.sleep(0.01)
        assert where == {"budgets": [False], "search": [False]}
        assert created == ["ganggate-low"]
        assert [p.preemptor for p in started] == [("ml", "hi")]  # found, and started on the loop
    finally:
        await api.close()
