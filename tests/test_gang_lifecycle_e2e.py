"""A gang's whole life end to end (#8) on kubesim with the real webhook and controller, batch/v1
Jobs owning the pods (kubesim's Job controller and garbage collector run): a member failing
breaks the gang (GangBroken) and it is restarted whole; a released gang is protected by a
PodDisruptionBudget that goes with its Job; a gang past its group-timeout-seconds is told so;
GPUs of pods still terminating are not promised to the next gang."""

from __future__ import annotations

import contextlib
from typing import Any

from ganggate.contract import GANG_LABEL, GROUP_NAME, GROUP_POD_NUM, GROUP_TIMEOUT_SECONDS
from tests.controller_support import GPU, JobCluster, is_gated, job_cluster, list_events, wait_for


def gang_job(name: str, pods: int, gpus: int, *, grace: int = 1, annotations: dict | None = None) -> dict:
    notes = {GROUP_NAME: name, GROUP_POD_NUM: str(pods), **(annotations or {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "backoffLimit": 20,
                     "template": {"metadata": {"labels": {"app": name}, "annotations": notes},
                                  "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                                           "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                               "limits": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}}}]}}}}


class Env(JobCluster):
    async def events(self, reason: str, kind: str = "Pod") -> list[dict]:
        """Events of a reason on objects of a kind (the gang's owner, a Job, hears them too)."""
        return [e for e in await list_events(self.env.core)
                if e.get("reason") == reason and e["involvedObject"]["kind"] == kind]

    def budgets(self) -> list[dict]:
        return list(self.sim.store.list("poddisruptionbudgets", "default"))


def cluster(tmp_path, *, nodes: int = 2, gpus: int = 8, time_scale: float = 10.0, **controller: Any
            ) -> contextlib.AbstractAsyncContextManager[Env]:
    return job_cluster(tmp_path, Env, nodes=nodes, gpus_per_node=gpus, time_scale=time_scale, **controller)


async def test_a_member_failing_breaks_the_gang_and_it_restarts_whole_with_new_pods(tmp_path):
    async with cluster(tmp_path, gpus=4) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 2, 4))
        first = await c.running("train", 2)
        failed = first[0]["metadata"]["name"]
        await c.sim.fail_pod("default", failed)

        async def broken() -> list[dict] | None:
            return await c.events("GangBroken") or None
        [event] = await wait_for(broken, what="a GangBroken event")
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == failed
        assert f"gang default/train lost pod {failed} (Failed: its container failed)" in event["message"]
        assert "restarting: deleting 1 pod" in event["message"]
        [on_job] = await wait_for(lambda: c.events("GangBroken", kind="Job"), what="a GangBroken event on the Job")
        assert on_job["involvedObject"]["name"] == "train" and on_job["message"] == event["message"]
        old = {p["metadata"]["uid"] for p in first}

        async def replaced() -> list[dict] | None:
            pods = await c.running("train", 2)
            return pods if not old & {p["metadata"]["uid"] for p in pods} else None
        again = await wait_for(replaced, what="train running again, both pods new")
        # Both came back gated and were released by one decision: the gang was admitted whole.
        decisions = {p["metadata"]["annotations"]["ganggate.io/decision"].split('"id":"')[1][:16] for p in again}
        assert len(decisions) == 1
        assert not any(is_gated(p) for p in again)


async def test_with_on_member_loss_none_the_gang_is_only_reported(tmp_path):
    async with cluster(tmp_path, gpus=4, on_member_loss="none") as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 2, 4))
        first = await c.running("train", 2)
        await c.sim.fail_pod("default", first[0]["metadata"]["name"])

        async def broken() -> list[dict] | None:
            return await c.events("GangBroken") or None
        [event] = await wait_for(broken, what="a GangBroken event")
        assert "not restarted (--on-member-loss=none)" in event["message"]
        survivor = c.sim.store.get("pods", "default", first[1]["metadata"]["name"])
        assert survivor["metadata"]["uid"] == first[1]["metadata"]["uid"]
        assert not survivor["metadata"].get("deletionTimestamp")


async def test_a_released_gang_has_a_budget_that_goes_with_its_job(tmp_path):
    async with cluster(tmp_path) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 3, 2))
        pods = await c.running("train", 3)
        assert {p["metadata"]["labels"][GANG_LABEL] for p in pods} == {"train"}

        async def budget() -> dict | None:
            return next(iter(c.budgets()), None)
        pdb = await wait_for(budget, what="the gang's PodDisruptionBudget")
        assert pdb["metadata"]["name"] == "ganggate-train"
        assert pdb["spec"]["minAvailable"] == 3
        assert pdb["spec"]["selector"] == {"matchLabels": {GANG_LABEL: "train"}}
        job = c.sim.store.get("jobs", "default", "train")
        assert [(o["kind"], o["uid"]) for o in pdb["metadata"]["ownerReferences"]] == [("Job", job["metadata"]["uid"])]
        await c.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/train",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})

        async def gone() -> bool:
            return not c.pods("train", ended=True) and not c.budgets()
        await wait_for(gone, what="the Job's pods and the gang's budget gone")


async def test_no_budget_without_protect_running_gangs(tmp_path):
    async with cluster(tmp_path, protect_running_gangs=False) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 2, 2))
        await c.running("train", 2)
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("other", 1, 2))
        await c.running("other", 1)
        assert c.budgets() == []


async def test_a_gang_waiting_past_its_timeout_gets_one_event_and_keeps_its_pods(tmp_path):
    async with cluster(tmp_path, nodes=1, gpus=4) as c:
        job = gang_job("big", 2, 4, annotations={GROUP_TIMEOUT_SECONDS: "1"})
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", job)

        async def timed_out() -> list[dict] | None:
            return await c.events("GangTimedOut") or None
        [event] = await wait_for(timed_out, what="a GangTimedOut event")
        assert event["type"] == "Warning" and "has waited more than 1s" in event["message"]
        assert "nothing is deleted" in event["message"]
        pods = c.pods("big")
        assert len(pods) == 2 and all(is_gated(p) for p in pods)
        assert [e["count"] for e in await c.events("GangTimedOut")] == [1]


async def test_a_bad_timeout_is_denied_by_the_webhook(tmp_path):
    async with cluster(tmp_path) as c:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {
            GROUP_NAME: "g", GROUP_POD_NUM: "1", GROUP_TIMEOUT_SECONDS: "soon"}},
            "spec": {"containers": [{"name": "main", "image": "x"}]}}
        body = await c.request("POST", "/api/v1/namespaces/default/pods", pod, ok=(400, 403, 422))
        assert "annotation scheduling.k8s.io/group-timeout-seconds='soon': must be a plain decimal integer" in body["message"]
        assert c.sim.store.get("pods", "default", "p") is None


async def test_gpus_of_terminating_pods_are_not_promised_until_free(tmp_path):
    async with cluster(tmp_path, nodes=1, gpus=4) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("old", 1, 4, grace=30))
        [old] = await c.running("old", 1)
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("next", 1, 4))
        await c.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/old",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})
        await c.request("DELETE", f"/api/v1/namespaces/default/pods/{old['metadata']['name']}")

        async def waiting() -> list[dict] | None:
            events = [e for e in await c.events("GangWaiting") if "terminating pod" in e["message"]]
            return events or None
        [event] = (await wait_for(waiting, what="next waits for the terminating pod"))[:1]
        assert "waiting for 1 terminating pod to go from 1 node" in event["message"]
        # While the old pod terminates, the new one stays gated.
        going = c.sim.store.get("pods", "default", old["metadata"]["name"])
        if going is not None:
            assert all(is_gated(p) for p in c.pods("next"))
        await c.running("next", 1, "next running once the old pod is gone")
        assert c.sim.store.get("pods", "default", old["metadata"]["name"]) is None


def user_budget(name: str, app: str, **spec: Any) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
            "spec": {**spec, "selector": {"matchLabels": {"app": app}}}}


async def evict(c: Env, pod: dict) -> tuple[int, dict]:
    name = pod["metadata"]["name"]
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}
    async with c.session.post(f"{c.sim.url}/api/v1/namespaces/default/pods/{name}/eviction", json=body) as response:
        return response.status, await response.json(content_type=None)


async def budget_settled(c: Env, name: str, allowed: int) -> None:
    async def check() -> bool:
        pdb = c.sim.store.get("poddisruptionbudgets", "default", name) or {}
        status = pdb.get("status") or {}
        return (status.get("observedGeneration") == pdb["metadata"].get("generation")
                and status.get("disruptionsAllowed") == allowed)
    await wait_for(check, what=f"budget {name} allowing {allowed}")


async def test_a_user_budget_over_the_gang_means_ganggate_makes_none_and_evictions_follow_it(tmp_path):
    async with cluster(tmp_path) as c:
        await c.request("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                        user_budget("team", "train", minAvailable=2))
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 2, 2))
        pods = await c.running("train", 2)

        async def told() -> list[dict] | None:
            return await c.events("GangProtectedByUserBudget") or None
        [event] = await wait_for(told, what="the gang told it is covered by the user's budget")
        assert event["type"] == "Normal" and "PodDisruptionBudget team" in event["message"]
        assert [b["metadata"]["name"] for b in c.budgets()] == ["team"]
        await budget_settled(c, "team", 0)
        # The user's budget alone decides: 429, not the 500 of two budgets over one pod.
        status, body = await evict(c, pods[0])
        assert status == 429, body
        assert "disruption budget" in body["message"]


async def test_a_user_budget_made_later_replaces_ganggates_and_an_eviction_it_allows_succeeds(tmp_path):
    async with cluster(tmp_path) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 2, 2))
        pods = await c.running("train", 2)

        async def ours() -> bool:
            return [b["metadata"]["name"] for b in c.budgets()] == ["ganggate-train"]
        await wait_for(ours, what="ganggate's budget of the gang")
        await c.request("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                        user_budget("team", "train", minAvailable=1))

        async def only_theirs() -> bool:
            return [b["metadata"]["name"] for b in c.budgets()] == ["team"]
        await wait_for(only_theirs, what="ganggate's budget deleted for the user's")
        [event] = await c.events("GangProtectedByUserBudget")
        assert "PodDisruptionBudget team" in event["message"]
        await budget_settled(c, "team", 1)
        status, body = await evict(c, pods[0])
        assert status in (200, 201), body


def count_pod_deletes(c: Env) -> list[str]:
    """The pods the controller asks the API server to delete, from now on."""
    controller = c.env.controllers[-1][0]
    rest = controller.api_client.rest_client
    original, deleted = rest.DELETE, []

    async def counting(url: str, *args: Any, **kwargs: Any) -> Any:
        if "/pods/" in url:
            deleted.append(url.rsplit("/", 1)[1])
        return await original(url, *args, **kwargs)
    rest.DELETE = counting
    return deleted


async def pause_garbage_collector() -> None:
    """Stop kubesim's garbage collector: the test deletes the pods itself, one at a time, as the
    real one does for a large gang (its workers are rate-limited), where kubesim's deletes three
    pods at once."""
    import asyncio

    [task] = [t for t in asyncio.all_tasks() if t.get_name() == "kubesim-garbagecollector"]
    task.cancel()


async def test_deleting_a_running_gangs_job_is_not_a_member_loss(tmp_path):
    async with cluster(tmp_path) as c:
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("train", 3, 2))
        pods = await c.running("train", 3)
        controller = c.env.controllers[-1][0]
        deleted = count_pod_deletes(c)
        await pause_garbage_collector()
        await c.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/train",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
        for pod in pods:  # the collector's work: the owner is gone, so are its pods, one by one
            name = pod["metadata"]["name"]
            await c.request("DELETE", f"/api/v1/namespaces/default/pods/{name}",
                            {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": pod["metadata"]["uid"]}},
                            ok=(200, 202, 404, 409))
            rounds = controller.rounds

            async def handled(name: str = name, rounds: int = rounds) -> bool:
                seen = controller.state.pods.get(f"default/{name}")
                return (seen is None or not seen.member) and controller.rounds >= rounds + 2
            await wait_for(handled, what=f"the controller to see {name} go")

        async def gone() -> bool:
            return not c.pods("train", ended=True)
        await wait_for(gone, what="the Job's pods gone")
        # A gang of another Job losing a member afterwards is reported: the controller has
        # handled everything before it (events go out in order of the losses).
        await c.request("POST", "/apis/batch/v1/namespaces/default/jobs", gang_job("other", 2, 2))
        other = await c.running("other", 2)
        await c.sim.fail_pod("default", other[0]["metadata"]["name"])

        async def broken() -> list[dict] | None:
            return await c.events("GangBroken") or None
        events = await wait_for(broken, what="other's GangBroken event")
        assert [e["involvedObject"]["name"] for e in events] == [other[0]["metadata"]["name"]]
        assert not any(name.startswith("train-") for name in deleted), deleted
