"""Never more than declared, end to end (issue #19), on kubesim with the real webhook and controller:
a gang never has more than group-pod-num live members released, for bare pods, for a Job whose
pods are replaced, and across a controller restart; a pod beyond the number stays gated with a
GangExcessMember Event, and is released when a live member ends."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ganggate.contract import GROUP_NAME, GROUP_POD_NUM
from ganggate.controller.round.informer import Informer
from ganggate.controller.status.tables import status_text
from tests.controller_support import (
    GPU,
    create_pods,
    e2e_cluster,
    gang_pod,
    is_gated,
    job_cluster,
    list_events,
    wait_for,
)
from tests.test_gang_lifecycle_e2e import Env


class MostReleased:
    """Watches the pods and keeps, per gang, the most live (not Succeeded/Failed, not being
    deleted) members without the gate there ever were at once: what a user would count."""

    def __init__(self, core: Any) -> None:
        self.pods: dict[str, dict] = {}
        self.most: dict[str, int] = {}
        self.informer = Informer(core.list_pod_for_all_namespaces, "pods(most)", on_list=self._list,
                                 on_event=self._event)
        self._task: asyncio.Task | None = None

    def _list(self, items: list[dict]) -> None:
        for pod in items:
            self._event("ADDED", pod)

    def _event(self, kind: str, pod: dict) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if kind == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        group = (meta.get("annotations") or {}).get(GROUP_NAME)
        if group is None:
            return
        live = sum(1 for p in self.pods.values()
                   if (p["metadata"].get("annotations") or {}).get(GROUP_NAME) == group and not is_gated(p)
                   and not p["metadata"].get("deletionTimestamp")
                   and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
        self.most[group] = max(self.most.get(group, 0), live)

    async def __aenter__(self) -> MostReleased:
        self._task = asyncio.create_task(self.informer.run())
        await wait_for(lambda: _value(self.informer.synced), what="the test's pod watch")
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _value(value: Any) -> Any:
    return value


async def excess_events(core: Any) -> list[dict]:
    return [e for e in await list_events(core) if e.get("reason") == "GangExcessMember"]


def pod_state(sim: Any, name: str) -> dict:
    return sim.store.get("pods", "default", name)


async def bound(sim: Any, names: list[str]) -> bool:
    pods = [pod_state(sim, n) for n in names]
    return all(p is not None and p["spec"].get("nodeName") for p in pods)


async def test_bare_pods_a_fourth_waits_gated_and_replaces_a_failed_member_across_a_restart(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env, MostReleased(env.core) as most:
        controller, _ = await env.start_controller()
        await create_pods(env.core, [gang_pod(f"w-{i}", "g", 3) for i in range(3)])
        await wait_for(lambda: bound(env.sim, ["w-0", "w-1", "w-2"]), what="the gang of 3 bound")
        await create_pods(env.core, [gang_pod("w-3", "g", 3)])

        async def told() -> list[dict] | None:
            return await excess_events(env.core) or None
        [event] = await wait_for(told, what="a GangExcessMember event")
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == "w-3"
        assert "pod w-3 is beyond the 3 pods gang default/g declares" in event["message"]
        assert "with 4 live pods of which 3 released" in event["message"]
        text = await status_text(env.api, "default")
        assert "GangExcessMember: 1 pod beyond group-pod-num 3 held gated (w-3)" in text

        # A new controller (a restart) reads the same picture and still holds the fourth back.
        await env.stop_controller(controller)
        replacement, _ = await env.start_controller()
        await wait_for(lambda: _value(replacement.synced and replacement.rounds > 2), what="rounds after restart")
        assert is_gated(pod_state(env.sim, "w-3"))

        # A member fails: the fourth replaces it (bare pods are never deleted by a restart).
        await env.sim.fail_pod("default", "w-0")
        await wait_for(lambda: bound(env.sim, ["w-3"]), what="w-3 released and bound in w-0's place")
        await create_pods(env.core, [gang_pod("w-4", "g", 3)])

        async def told_again() -> bool:
            return any(e["involvedObject"]["name"] == "w-4" for e in await excess_events(env.core))
        await wait_for(told_again, what="w-4 told it is beyond the gang's number")
        assert is_gated(pod_state(env.sim, "w-4"))
        assert most.most["g"] == 3


def mismatched_job(name: str, parallelism: int, pod_num: int) -> dict:
    """A Job running more pods at once than its template's group-pod-num says (the mismatch a user
    makes; the controller holds whatever reaches it)."""
    notes = {GROUP_NAME: name, GROUP_POD_NUM: str(pod_num), "kubesim.io/run-seconds": "3"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"completions": parallelism, "parallelism": parallelism, "backoffLimit": 20,
                     "template": {"metadata": {"labels": {"app": name}, "annotations": notes},
                                  "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                               "limits": {"cpu": "1", "memory": "1Gi", GPU: "1"}}}]}}}}


async def test_a_job_whose_pods_are_replaced_never_has_more_released_than_declared(tmp_path):
    async with job_cluster(tmp_path, Env, nodes=1, gpus_per_node=8, time_scale=10.0) as c, \
            MostReleased(c.env.core) as most:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", mismatched_job("train", 4, 2))
        first = await c.running("train", 2)

        async def told() -> list[dict] | None:
            events = await excess_events(c.env.core)
            return events if len(events) == 2 else None
        await wait_for(told, what="two GangExcessMember events")
        # A member fails: the Job replaces it, and the gang restarts; the rest finish in turns.
        await c.sim.fail_pod("default", first[0]["metadata"]["name"])

        # The excess pods run in turn as members finish. (The last of the 4 completions would wait
        # for a second pod that never comes: the mismatch itself, which the Job should not make.)
        async def three_done() -> bool:
            job = c.sim.store.get("jobs", "default", "train")
            return ((job.get("status") or {}).get("succeeded") or 0) >= 3
        await wait_for(three_done, timeout=60, what="three of the Job's pods succeeded")
        assert most.most["train"] == 2
