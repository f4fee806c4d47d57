"""kubesim's controllers share one watch per collection (SharedInformers), as
kube-controller-manager's share their informers: the API server sends each change once."""

from __future__ import annotations

import asyncio

from ganggate.sim import Simulator
from ganggate.sim.client.informers import SharedInformers
from tests.test_kubesim_scheduler_support import pod_manifest


def _watchers(sim: Simulator, key: str) -> int:
    return sum(1 for w in sim.store.hub.watchers if w.key == key)


async def _eventually(check, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    assert check()


async def test_the_five_controllers_open_one_pod_watch_between_them():
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=True) as sim:
        assert set(sim.components) == {"JobController", "GarbageCollector", "NodeLifecycleController",
                                       "DisruptionController", "ResourceClaimController"}
        await _eventually(lambda: _watchers(sim, "pods") >= 1)
        assert _watchers(sim, "pods") == 1
        assert _watchers(sim, "nodes") == 1
        assert _watchers(sim, "jobs.batch") == 1  # the Job controller's and the garbage collector's


async def test_a_handler_that_starts_late_is_told_of_what_is_there_then_of_changes():
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False) as sim:
        await sim.server.create_object(_pods_target(), pod_manifest("before"))
        shared = SharedInformers(sim.url)
        first: list[tuple[str, str]] = []
        late: list[tuple[str, str]] = []
        one = shared.reflector("/api/v1/pods", lambda kind, pod, _old: first.append((kind, pod["metadata"]["name"])))
        two = shared.reflector("/api/v1/pods", lambda kind, pod, _old: late.append((kind, pod["metadata"]["name"])))
        tasks = [asyncio.ensure_future(one.run())]
        try:
            await asyncio.wait_for(one.synced.wait(), 10)
            assert first == [("ADDED", "before")]
            tasks.append(asyncio.ensure_future(two.run()))
            await asyncio.wait_for(two.synced.wait(), 10)
            assert late == [("ADDED", "before")]
            await sim.server.create_object(_pods_target(), pod_manifest("after"))
            await _eventually(lambda: ("ADDED", "after") in first and ("ADDED", "after") in late)
            assert _watchers(sim, "pods") == 1
            assert set(one.store) == {"default/before", "default/after"}
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await shared.stop()


def _pods_target():
    from ganggate.sim.apiserver.discovery import by_key
    from ganggate.sim.apiserver.requests import Target

    return Target(by_key("pods"), "default", None, None)
