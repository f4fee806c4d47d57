"""A released member pinned to a node whose room an ordinary pod took after the plan (#19):
its plan is lost at once (cause PlanLost), and the repair follows the documented rule."""

from __future__ import annotations

from ganggate.controller.status.tables import lifecycle_state
from ganggate.core.policy.lifecycle import judge_loss
from ganggate.core.policy.planloss import contesting_pods, lost_nodes, plans_lost, unseen_nominations
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z
GANG = ("default", "train")


def member(name: str, node: str | None, *, unschedulable: bool = False, min_available: int | None = None,
           owner: str | None = "job") -> dict:
    """A released member of `train` (2 pods of 4 GPUs) pinned to n1, bound to `node` or not."""
    pod = make_pod(name, gang="train", pod_num=2, min_available=min_available, gpus=4, gated=False,
                   node_name=node, phase="Running" if node else "Pending", owner=owner,
                   decision={"id": "d1", "time": "2024-01-01T00:00:00Z", "node": "n1", "gang": "default/train",
                             "pods": 2})
    if unschedulable:
        pod.setdefault("status", {})["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match "
                        "Pod's node affinity/selector."}]
    return pod


def cluster(*pods: dict) -> ClusterState:
    state = ClusterState()
    state.reset([make_node("n1", gpus=8), make_node("n2", gpus=8)], list(pods))
    return state


def intruder(**extra) -> dict:
    """An ordinary pod bound to n1 after the plan, into the room promised to t-1."""
    return make_pod("ordinary", gpus=4, node_name="n1", phase="Running", **extra)


def test_a_pinned_member_the_scheduler_cannot_place_after_an_ordinary_pod_took_its_room_is_a_lost_plan():
    state = cluster(member("t-0", "n1"), member("t-1", None, unschedulable=True), intruder())
    [loss] = plans_lost(state)
    assert (loss.gang_key, loss.pod_key, loss.cause) == (GANG, "default/t-1", "PlanLost")
    assert lifecycle_state(state.gangs[GANG], T0, state) == "released (broken: t-1 pinned to n1 cannot bind: PlanLost)"
    # The gang needs both pods: the whole gang is restarted through its owner.
    breakage = judge_loss(state, loss)
    assert breakage.below_min and not breakage.replan
    assert sorted(p.name for p in breakage.to_delete) == ["t-0", "t-1"]
    assert "lost pod t-1 (PlanLost" in breakage.message("restart")
    assert "restarting: deleting 2 pods" in breakage.message("restart")


def test_no_loss_while_the_scheduler_has_not_said_unschedulable_or_the_room_is_coming_back():
    # Not yet tried by the scheduler: it may still bind.
    assert plans_lost(cluster(member("t-0", "n1"), member("t-1", None), intruder())) == []
    # The pod in its room is being deleted: the room comes back, the member will bind.
    going = intruder()
    going["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    assert plans_lost(cluster(member("t-0", "n1"), member("t-1", None, unschedulable=True), going)) == []
    # Nothing took its room (the scheduler's word was stale): no loss.
    assert plans_lost(cluster(member("t-0", "n1"), member("t-1", None, unschedulable=True))) == []


def test_an_elastic_gang_still_at_min_available_has_only_the_stranded_member_replanned():
    state = cluster(member("t-0", "n1", min_available=1), member("t-1", None, unschedulable=True, min_available=1),
                    intruder())
    [loss] = plans_lost(state)
    breakage = judge_loss(state, loss)
    assert breakage.replan and not breakage.below_min
    assert [p.name for p in breakage.to_delete] == ["t-1"]
    assert "re-planning: deleting 1 pinned pod" in breakage.message("restart")


def test_a_bare_stranded_member_is_reported_and_never_deleted():
    state = cluster(member("t-0", "n1", owner=None), member("t-1", None, unschedulable=True, owner=None), intruder())
    [loss] = plans_lost(state)
    breakage = judge_loss(state, loss)
    assert breakage.to_delete == [] and sorted(p.name for p in breakage.bare) == ["t-0", "t-1"]


# ---- end to end: kubesim, the webhook and the controller --------------------------------------


async def _until(check, what: str, seconds: float = 60.0):
    import asyncio

    for _ in range(int(seconds / 0.1)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


GANG_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 20, "template": {
                "metadata": {"annotations": {"scheduling.k8s.io/group-name": "train",
                                             "scheduling.k8s.io/group-pod-num": "2"}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [{
                    "name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}


def ordinary(name: str, gpus: int, node: str | None = None) -> dict:
    spec = {"containers": [{"name": "main", "image": "app:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def test_a_released_gang_holds_its_room_against_ordinary_pods_the_scheduler_meets_first():
    """The release nominates each member to its planned node (status.nominatedNodeName) before
    its gate goes: the default scheduler then keeps a pod of no higher priority out of that
    room, whichever it tries first, and the gang binds whole."""
    import asyncio

    import aiohttp

    from ganggate.replay.run.stack import Stack, start_gate
    from ganggate.sim.scheduler.scheduler import Scheduler
    from ganggate.sim.simulator import Simulator

    async with Simulator(nodes=1, gpus_per_node=4, scheduler=False) as sim:
        stack = Stack(mode="ganggate", sim=sim)
        stack.api = sim.api_client()
        scheduler_task = None
        try:
            await start_gate(stack)
            async with aiohttp.ClientSession(sim.url) as http:
                async def pods() -> list[dict]:
                    async with http.get("/api/v1/namespaces/default/pods") as response:
                        return (await response.json())["items"]

                async with http.post("/apis/batch/v1/namespaces/default/jobs", json=GANG_JOB) as response:
                    assert response.status == 201, await response.text()

                async def released() -> list[dict]:
                    items = [p for p in await pods() if p["metadata"]["name"].startswith("train-")]
                    ungated = [p for p in items if not p["spec"].get("schedulingGates")]
                    return ungated if len(ungated) == 2 else []

                members = await _until(released, "the gang released")
                assert [p["status"].get("nominatedNodeName") for p in members] == ["node-0", "node-0"]
                async with http.post("/api/v1/namespaces/default/pods", json=ordinary("eager", 2)) as response:
                    assert response.status == 201, await response.text()
                scheduler_task = asyncio.create_task(Scheduler(sim.url).run())

                def tried(pod: dict) -> bool:  # bound, or found Unschedulable
                    conditions = pod["status"].get("conditions") or []
                    return bool(pod["spec"].get("nodeName")) or any(c.get("reason") == "Unschedulable"
                                                                    for c in conditions)

                async def settled() -> dict[str, str | None] | None:
                    items = await pods()
                    if len(items) != 3 or not all(tried(p) for p in items):
                        return None
                    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}

                placed = await _until(settled, "every pod tried by the scheduler")
                assert placed.pop("eager") is None
                assert list(placed.values()) == ["node-0", "node-0"]  # the gang, whole
        finally:
            if scheduler_task is not None:
                scheduler_task.cancel()
                await asyncio.gather(scheduler_task, return_exceptions=True)
            await stack.close()


async def test_a_job_gang_whose_released_room_an_ordinary_pod_took_is_restarted_whole_and_reported():
    """A Job gang of 2 x 2 GPUs is released pinned to the one 4-GPU node; before the scheduler
    binds it, a pod created with spec.nodeName (it bypasses the scheduler) takes 2 of those GPUs.
    The scheduler binds one member and reports the other Unschedulable: the controller says so at
    once (a GangBroken Event naming PlanLost, the metric) and restarts the whole gang through its
    Job instead of letting one member run alone until the bind timeout."""
    import asyncio

    from ganggate.replay.run.stack import Stack, start_gate
    from ganggate.sim.scheduler.scheduler import Scheduler
    from ganggate.sim.simulator import Simulator

    async with Simulator(nodes=1, gpus_per_node=4, scheduler=False) as sim:
        stack = Stack(mode="ganggate", sim=sim)
        stack.api = sim.api_client()
        scheduler_task = None
        try:
            await start_gate(stack)
            import aiohttp

            async with aiohttp.ClientSession(sim.url) as http:
                async def get(path: str) -> dict:
                    async with http.get(path) as response:
                        return await response.json()

                async def pods() -> list[dict]:
                    return (await get("/api/v1/namespaces/default/pods"))["items"]

                job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
                       "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 20, "template": {
                           "metadata": {"annotations": {"scheduling.k8s.io/group-name": "train",
                                                        "scheduling.k8s.io/group-pod-num": "2"}},
                           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [{
                               "name": "main", "image": "trainer:1",
                               "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}
                async with http.post("/apis/batch/v1/namespaces/default/jobs", json=job) as response:
                    assert response.status == 201, await response.text()

                async def released() -> list[dict]:
                    items = [p for p in await pods() if p["metadata"]["name"].startswith("train-")]
                    ungated = [p for p in items if not p["spec"].get("schedulingGates")]
                    return ungated if len(ungated) == 2 else []

                first = await _until(released, "the gang released")
                first_uids = {p["metadata"]["uid"] for p in first}
                intruder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"},
                            "spec": {"nodeName": "node-0", "containers": [{
                                "name": "main", "image": "app:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
                async with http.post("/api/v1/namespaces/default/pods", json=intruder) as response:
                    assert response.status == 201, await response.text()
                scheduler = Scheduler(sim.url)
                scheduler_task = asyncio.create_task(scheduler.run())

                async def broken_event() -> list[dict]:
                    events = (await get("/api/v1/namespaces/default/events"))["items"]
                    broken = [e for e in events if e.get("reason") == "GangBroken"]
                    kinds = sorted(e["involvedObject"]["kind"] for e in broken)
                    return broken if kinds == ["Job", "Pod"] else []  # the lost pod and its Job

                event = next(e for e in await _until(broken_event, "a GangBroken Event on the pod and the Job")
                             if e["involvedObject"]["kind"] == "Pod")
                assert event["type"] == "Warning"
                assert "PlanLost" in event["message"] and "restarting: deleting 2 pods" in event["message"]
                assert stack.controller.metrics.member_losses.labels(cause="PlanLost")._value.get() == 1

                # The first run's pods are gone; the Job's replacements come back gated and wait
                # for the room the intruder holds; once it goes, the gang runs whole.
                async def replaced() -> bool:
                    items = [p for p in await pods() if p["metadata"]["name"].startswith("train-")]
                    return bool(items) and not first_uids & {p["metadata"]["uid"] for p in items}

                await _until(replaced, "the first run's pods replaced")
                async with http.delete("/api/v1/namespaces/default/pods/intruder",
                                       json={"gracePeriodSeconds": 0}) as response:
                    assert response.status == 200

                async def whole() -> bool:
                    items = [p for p in await pods() if p["metadata"]["name"].startswith("train-")
                             and not p["metadata"].get("deletionTimestamp")]
                    return len(items) == 2 and all(p["spec"].get("nodeName") for p in items)

                await _until(whole, "the gang bound whole")
        finally:
            if scheduler_task is not None:
                scheduler_task.cancel()
                await asyncio.gather(scheduler_task, return_exceptions=True)
            await stack.close()


# ---- before the gates go (controller.release.releases `confirm_plan`) ---------------------------------

def gated_gang_promised_on_n1() -> tuple[ClusterState, dict[str, str]]:
    """`train` (2 pods x 4 GPUs), still gated, planned on n1 and promised there."""
    state = cluster(*(make_pod(f"t-{i}", gang="train", pod_num=2, gpus=4, gated=True) for i in range(2)))
    placement = {"default/t-0": "n1", "default/t-1": "n1"}
    state.promise(GANG, placement, deadline=T0 + 120)
    return state, placement


def test_a_plan_is_lost_before_the_gates_go_when_a_pod_bound_since_took_its_room():
    state, placement = gated_gang_promised_on_n1()
    assert lost_nodes(state, placement) == []
    state.apply_pod("ADDED", intruder())  # bound to n1: 4 + 8 promised > 8
    assert lost_nodes(state, placement) == ["n1"]
    # Room another node has is no concern of this plan.
    state.apply_pod("ADDED", make_pod("elsewhere", gpus=8, node_name="n2", phase="Running"))
    assert lost_nodes(state, placement) == ["n1"]


def test_the_nominations_not_yet_shown_by_the_watch_are_waited_for():
    state, placement = gated_gang_promised_on_n1()
    assert unseen_nominations(state, placement) == ["default/t-0", "default/t-1"]
    shown = make_pod("t-0", gang="train", pod_num=2, gpus=4, gated=True)
    shown.setdefault("status", {})["nominatedNodeName"] = "n1"
    state.apply_pod("MODIFIED", shown)
    assert unseen_nominations(state, placement) == ["default/t-1"]
    state.apply_pod("DELETED", make_pod("t-1", gang="train", pod_num=2, gpus=4, gated=True))
    assert unseen_nominations(state, placement) == []  # a vanished pod is not waited for


def test_a_new_pending_pod_that_fits_a_planned_node_only_without_the_gang_is_waited_for_until_tried():
    state, placement = gated_gang_promised_on_n1()
    state.apply_pod("ADDED", make_pod("small", gpus=2))  # n1 had room for it; the gang takes all 8
    state.apply_pod("ADDED", make_pod("huge", gpus=16))  # fits nowhere, with or without the gang
    assert contesting_pods(state, placement) == ["default/small"]
    tried = make_pod("small", gpus=2)
    tried.setdefault("status", {})["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    state.apply_pod("MODIFIED", tried)
    assert contesting_pods(state, placement) == []  # the scheduler has tried it: not waited for again
