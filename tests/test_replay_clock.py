"""The gate controller on the replay's simulated clock: its starvation hold-back, gang timeouts
and bind timeouts fire in simulated time, in a replay that runs in a few wall seconds (they
never fired in a compressed replay while the controller read the wall clock).

Every assertion is about what a user sees (Events, when jobs started); none about a duration.
"""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from ganggate.replay.run.engine import Scenario, run_scenario, uniform_nodes
from ganggate.replay.traces.format import Job


def starving_scenario() -> Scenario:
    """2 nodes x 8 GPUs, four 4-GPU jobs running at once; a 2 x 8-GPU gang arrives at t=50 while
    a stream of 4-GPU jobs (one every 50 s, faster than they finish) keeps taking every room
    that frees up: only a hold-back lets the gang ever start before the stream is served."""
    jobs = [Job(f"s{i}", 0, 1, 4, "1", "1Gi", 400 + 100 * i) for i in range(4)]
    jobs.append(Job("big", 50, 2, 8, "1", "1Gi", 100))
    jobs += [Job(f"t{i}", 100 + 50 * i, 1, 4, "1", "1Gi", 400) for i in range(20)]
    return Scenario(jobs, uniform_nodes(2, 8))


async def test_a_starving_gang_gets_capacity_held_back_after_the_simulated_starvation_limit():
    # No pod has a deadline here, so the hold is blind: its limit is the blind one (#20).
    held = await run_scenario(starving_scenario(), "ganggate",
                              controller_settings={"starvation_seconds": 300, "starvation_blind_seconds": 300})
    never = await run_scenario(starving_scenario(), "ganggate", controller_settings={"starvation_seconds": 300})
    started = {mode: {r.job_id: r.started_at for r in result.records} for mode, result in
               (("held", held), ("never", never))}
    assert all(r.finished_at is not None for r in held.records)
    # Held back from t=350 (50 + 300): the gang starts once the jobs running on the held nodes end,
    # ahead of the stream; without the hold-back it waits for the whole stream.
    assert started["held"]["big"] < started["never"]["big"]
    assert started["held"]["big"] < max(t for t in started["held"].values())
    messages = [m for reason, pod, m, _ in held.events if reason == "GangUnschedulable" and pod.startswith("big-")]
    assert any("capacity held back on 2 nodes" in m for m in messages), messages
    assert not any("capacity held back" in m for reason, pod, m, _ in never.events if pod.startswith("big-"))
    # With the default blind limit (6 h) the gang's Event says why nothing is held yet.
    assert any("not every pod there has a deadline: held after 21600s" in m
               for reason, pod, m, _ in never.events if pod.startswith("big-"))


async def test_a_gang_waiting_past_its_timeout_gets_gangtimedout_at_that_simulated_time():
    jobs = [Job("long", 0, 1, 8, "1", "1Gi", 1000), Job("late", 10, 1, 8, "1", "1Gi", 60)]
    result = await run_scenario(Scenario(jobs, uniform_nodes(1, 8)), "ganggate", gang_timeout_seconds=120)
    timed_out = [(pod, message) for reason, pod, message, _ in result.events if reason == "GangTimedOut"]
    assert timed_out == [("late-0", "gang default/late has waited more than 120s "
                                    "(scheduling.k8s.io/group-timeout-seconds) and is still waiting; nothing is deleted")]
    records = {r.job_id: r for r in result.records}
    assert records["late"].started_at == 1000 and records["late"].finished_at == 1060  # nothing deleted


async def test_released_pods_that_cannot_bind_time_out_in_simulated_time():
    """A cluster whose scheduler is down, on a manual clock as the replay drives it: released
    pods never bind; the bind timeout fires only when the simulated clock passes it."""
    from ganggate.contract import GATE_NAME, GROUP_NAME, GROUP_POD_NUM
    from ganggate.controller.round.loop import Controller, ControllerConfig
    from ganggate.replay.run.stack import SimulatedClock
    from ganggate.sim import Simulator
    from ganggate.sim.clock import ManualClock
    from tests.controller_support import _true, create_pods, is_gated, list_events, list_pods, wait_for

    manual = ManualClock()
    async with Simulator(nodes=1, gpus_per_node=8, scheduler=False, kubelet=False, clock=manual) as sim:
        api = sim.api_client()
        controller = Controller(api, ControllerConfig(leader_election=False, on_bind_timeout="wait", tick_seconds=0.1,
                                                      metrics_port=None), clock=SimulatedClock(manual))
        task = asyncio.create_task(controller.run())
        try:
            core = client.CoreV1Api(api)
            await create_pods(core, [{
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"g-{i}", "namespace": "default", "annotations": {GROUP_NAME: "g", GROUP_POD_NUM: "2"}},
                "spec": {"schedulingGates": [{"name": GATE_NAME}], "containers": [{"name": "c", "image": "i", "resources": {
                    "limits": {"nvidia.com/gpu": "1"}}}]}} for i in range(2)])
            async def released():
                pods = await list_pods(core, "default")
                return len(pods) == 2 and not any(is_gated(p) for p in pods)

            await wait_for(released, what="the gang released")
            rounds = controller.rounds
            await wait_for(lambda: _true(controller.rounds >= rounds + 5), what="rounds on the wall clock's ticks")
            assert not [e for e in await list_events(core) if e["reason"] == "GangBindTimeout"]
            manual.advance_to(manual.now() + 121)  # past the 120 s bind timeout, in simulated time

            async def bind_timeouts():
                found = [e for e in await list_events(core) if e["reason"] == "GangBindTimeout"]
                return found if len(found) == 2 else None

            events = await wait_for(bind_timeouts, what="GangBindTimeout on both pods")
            assert {e["involvedObject"]["name"] for e in events} == {"g-0", "g-1"}
            assert all(e["message"] == "released with gang default/g but not bound within 120s; waiting" for e in events)
            assert len(await list_pods(core, "default")) == 2  # nothing deleted
        finally:
            controller.stop()
            await task
            await api.close()
