"""kubesim's graceful pod deletion, end to end on a ManualClock.

Written from the documentation of pod termination
(https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination): a deleted pod
gets a deletionTimestamp and deletionGracePeriodSeconds, keeps running and keeps its node until its
kubelet has stopped it after the grace period, then disappears; and from
pkg/registry/core/pod/strategy.go CheckGracefulDelete and apiserver rest/delete.go BeforeDelete.
"""

from __future__ import annotations

import asyncio

from ganggate.sim.clock import ManualClock
from tests.kubesim_lifecycle_support import PODS, Watch, delete, gone, pod_where, simulator, sleeper_at
from tests.test_kubesim_scheduler_support import bound_node, condition, pod_manifest, unschedulable_message, wait_for


def _phase(phase):
    return lambda pod: (pod.get("status") or {}).get("phase") == phase


async def test_a_deleted_pod_holds_its_node_for_its_grace_period_then_the_kubelet_removes_it():
    clock = ManualClock()
    async with simulator(clock, nodes=1, gpus_per_node=8) as (sim, api):
        await api.create_pod(pod_manifest("old", gpus=8))
        await pod_where(api, "old", _phase("Running"), "old to run")
        watch = Watch(api, "old")
        code, body = await delete(api, "old")
        assert code == 200
        assert body["metadata"]["deletionGracePeriodSeconds"] == 30  # spec.terminationGracePeriodSeconds default
        assert body["metadata"]["deletionTimestamp"]
        assert body["status"]["phase"] == "Running"
        # Still counted on its node: a pod needing that room waits.
        await api.create_pod(pod_manifest("new", gpus=8))
        await unschedulable_message(api, "new", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
        await sleeper_at(clock, 30)
        clock.advance_to(29)
        await asyncio.sleep(0.1)
        assert (await api.pod("old"))["metadata"]["deletionTimestamp"]
        clock.advance_to(30)
        await gone(api, "old")
        events = await watch.until("DELETED")
        watch.close()
        kinds = [k for k, _ in events]
        assert kinds[-1] == "DELETED" and "MODIFIED" in kinds
        last = events[-1][1]
        # Killed at the end of the grace period: containers exit 137, the pod ends Failed (getPhase).
        assert last["status"]["phase"] == "Failed"
        assert last["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
        assert await bound_node(api, "new") == "node-0"


async def test_grace_zero_deletes_at_once_and_watchers_see_modified_then_deleted():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("p", gpus=1))
        await pod_where(api, "p", _phase("Running"), "p to run")
        watch = Watch(api, "p")
        await asyncio.sleep(0.1)
        code, body = await delete(api, "p", gracePeriodSeconds=0)
        assert code == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 0
        assert await api.pod("p") is None
        events = await watch.until("DELETED")
        watch.close()
        kinds = [k for k, _ in events]
        assert kinds[-2:] == ["MODIFIED", "DELETED"]
        assert events[-2][1]["metadata"]["deletionTimestamp"]


async def test_a_second_delete_may_only_shorten_the_grace():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("p", gpus=1))
        await pod_where(api, "p", _phase("Running"), "p to run")
        _, first = await delete(api, "p", gracePeriodSeconds=60)
        await sleeper_at(clock, 60)
        _, longer = await delete(api, "p", gracePeriodSeconds=120)
        assert longer["metadata"]["deletionGracePeriodSeconds"] == 60
        assert longer["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        _, shorter = await delete(api, "p", gracePeriodSeconds=10)
        assert shorter["metadata"]["deletionGracePeriodSeconds"] == 10
        assert shorter["metadata"]["deletionTimestamp"] < first["metadata"]["deletionTimestamp"]
        await sleeper_at(clock, 10)  # the kubelet counts the shorter grace from when it noticed
        clock.advance_to(10)
        await gone(api, "p")


async def test_unbound_and_terminal_pods_go_at_once():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("gated", gated=True))
        code, body = await delete(api, "gated")
        assert code == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 0
        assert await api.pod("gated") is None
        await api.create_pod(pod_manifest("done", annotations={"kubesim.io/run-seconds": "1"}))
        await sleeper_at(clock, 1)
        clock.advance_to(1)
        await pod_where(api, "done", _phase("Succeeded"), "done to succeed")
        _, body = await delete(api, "done")
        assert body["metadata"]["deletionGracePeriodSeconds"] == 0
        assert await api.pod("done") is None


async def test_updates_keep_the_deletion_timestamp_and_a_pod_being_deleted_is_not_scheduled():
    clock = ManualClock()
    async with simulator(clock, nodes=1, kubelet=False, scheduler=False) as (sim, api):
        await api.create_pod(pod_manifest("p", node_name="node-0"))
        _, deleting = await delete(api, "p")
        replaced = dict(deleting, metadata={k: v for k, v in deleting["metadata"].items()
                                            if not k.startswith("deletion")})
        async with api.session.put(f"{api.url}{PODS}/p", json=replaced) as response:
            body = await response.json()
            assert response.status == 200, body
        assert body["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
        assert body["metadata"]["deletionGracePeriodSeconds"] == 30
        # No kubelet: the pod stays Terminating, as on a real cluster.
        assert (await api.pod("p"))["metadata"]["deletionTimestamp"]


async def test_a_pod_fails_when_its_annotation_says_so():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("oom", annotations={"kubesim.io/fail-after-seconds": "5",
                                                             "kubesim.io/fail-reason": "OOMKilled"}))
        (await api.pod("oom"))  # created
        await sleeper_at(clock, 5)
        clock.advance_to(5)
        # restartPolicy defaults to Always: the container restarts in place, the pod keeps running.
        pod = await pod_where(api, "oom", lambda p: p["status"]["containerStatuses"][0].get("restartCount") == 1,
                              "a restart")
        (container,) = pod["status"]["containerStatuses"]
        assert pod["status"]["phase"] == "Running"
        assert container["lastState"]["terminated"] == {**container["lastState"]["terminated"],
                                                         "exitCode": 137, "reason": "OOMKilled"}
        never = pod_manifest("never", annotations={"kubesim.io/fail-after-seconds": "3"})
        never["spec"]["restartPolicy"] = "Never"
        await api.create_pod(never)
        await sleeper_at(clock, 8)
        clock.advance_to(8)
        failed = await pod_where(api, "never", _phase("Failed"), "never to fail")
        terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (1, "Error")


async def test_a_pod_fails_through_the_fault_endpoint():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        pod = pod_manifest("victim", gpus=8)
        pod["spec"]["restartPolicy"] = "Never"
        await api.create_pod(pod)
        await pod_where(api, "victim", _phase("Running"), "victim to run")
        await api.create_pod(pod_manifest("next", gpus=8))
        await unschedulable_message(api, "next")
        await sim.fail_pod("default", "victim", reason="Error", exit_code=3)
        failed = await pod_where(api, "victim", _phase("Failed"), "victim to fail")
        terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
        assert await bound_node(api, "next") == "node-0"  # a failed pod holds nothing


async def test_job_pods_deleted_gracefully_are_replaced_and_counted_failed_once_gone():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"backoffLimit": 3, "template": {"spec": {"restartPolicy": "Never", "containers": [
                   {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}
        async with api.session.post(f"{api.url}/apis/batch/v1/namespaces/default/jobs", json=job) as response:
            assert response.status == 201
        first = await wait_for(lambda: _running_pod(api), "the job's pod to run")
        await delete(api, first["metadata"]["name"])

        async def replaced():
            if clock.now() < 5:  # the Job controller waits its 1 s syncJobBatchPeriod on this clock
                clock.advance_to(clock.now() + 0.25)
            pods = [p for p in await api.pods() if p["metadata"]["name"] != first["metadata"]["name"]]
            return pods or None
        await wait_for(replaced, "a replacement pod")  # the terminating pod is not active any more
        clock.advance_to(clock.now() + 30)  # the grace period, from whenever the kubelet saw the deletion
        await gone(api, first["metadata"]["name"])


async def _running_pod(api):
    pods = [p for p in await api.pods() if (p.get("status") or {}).get("phase") == "Running"]
    return pods[0] if pods else None


async def test_the_api_server_stamps_conditions_and_deletion_on_its_own_clock_as_creation():
    # kube-apiserver stamps creationTimestamp, the SchedulingGated and PodScheduled conditions and
    # deletionTimestamp all with metav1.Now(); on a simulated clock a pod's deletion or condition
    # time once came from the real clock, before (or long after) its creation.
    clock = ManualClock(epoch_start=1_000_000_000)  # 2001-09-09T01:46:40Z
    async with simulator(clock, nodes=1, scheduler=False, kubelet=False, controllers=False) as (sim, api):
        created = await api.create_pod(pod_manifest("p", gpus=1, gated=True))
        assert created["metadata"]["creationTimestamp"] == "2001-09-09T01:46:40Z"
        assert condition(created)["reason"] == "SchedulingGated"
        assert condition(created)["lastTransitionTime"] == "2001-09-09T01:46:40Z"
        clock.advance_to(60)
        await api.patch(f"{PODS}/p", [{"op": "remove", "path": "/spec/schedulingGates"}], "application/json-patch+json")
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-0"}}
        async with api.session.post(f"{api.url}{PODS}/p/binding", json=binding) as response:
            assert response.status == 201, await response.text()
        bound = await api.pod("p")
        assert condition(bound)["status"] == "True"
        assert condition(bound)["lastTransitionTime"] == "2001-09-09T01:47:40Z"
        clock.advance_to(120)
        code, body = await delete(api, "p")
        assert code == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 30
        assert body["metadata"]["deletionTimestamp"] == "2001-09-09T01:49:10Z"  # now (01:48:40) + 30 s
