"""The cluster fights back (#8): six disruptions end to end on kubesim, through the real webhook
and controller, with batch/v1 Jobs owning the pods (kubesim's Job controller and garbage
collector run). Each ends with every gang whole and running or whole and waiting, never partly
bound (tests/gang_checker.py); the GPU-seconds held by incomplete gangs, sampled every 100 ms of
simulated time, are logged for the record, not asserted.

Simulated time runs 10 times faster than the wall clock (kubesim's WallClock): grace periods
and toleration seconds in the pod specs are a few simulated seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ganggate.contract import GROUP_NAME, GROUP_POD_NUM
from ganggate.sim.clock import WallClock
from tests.controller_support import E2E, GPU, e2e_cluster, wait_for
from tests.gang_checker import GangSampler, assert_every_gang_whole_or_waiting, wait_quiet
from tests.kubectl_support import KUBECTL

log = logging.getLogger(__name__)
TIME_SCALE = 10.0
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def gang_job(name: str, pods: int, gpus: int, *, grace: int = 1, priority_class: str | None = None,
             toleration_seconds: int | None = None, gang: bool = True) -> dict:
    """An Indexed Job of `pods` pods of `gpus` GPUs each, a gang unless `gang=False`."""
    annotations = {GROUP_NAME: name, GROUP_POD_NUM: str(pods)} if gang else {}
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                            "containers": [{"name": "main", "image": "trainer:1", "resources": {
                                "limits": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if toleration_seconds is not None:
        spec["tolerations"] = [{"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": toleration_seconds} for key in NOT_READY_TAINTS]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "backoffLimit": 50,
                     "template": {"metadata": {"labels": {"app": name}, "annotations": annotations},
                                  "spec": spec}}}


class Cluster:
    """An e2e cluster with a raw HTTP session (Jobs, PriorityClasses, evictions) and the sampler."""

    def __init__(self, env: E2E, session: aiohttp.ClientSession, sampler: GangSampler) -> None:
        self.env, self.session, self.sampler = env, session, sampler
        self.sim = env.sim

    async def request(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        async with self.session.request(method, self.sim.url + path, json=body) as response:
            data = await response.json(content_type=None)
            assert response.status in ok, f"{method} {path}: {response.status} {data}"
            return data

    async def job(self, manifest: dict) -> None:
        await self.request("POST", "/apis/batch/v1/namespaces/default/jobs", manifest)

    async def priority_class(self, name: str, value: int) -> None:
        await self.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value})

    def pods(self, app: str) -> list[dict]:
        """The job's pods that have not ended, as the API server holds them."""
        return [p for p in self.sim.store.list("pods", "default")
                if (p["metadata"].get("labels") or {}).get("app") == app
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def running(self, app: str, count: int) -> list[dict] | None:
        pods = [p for p in self.pods(app) if (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count else None

    async def wait_running(self, app: str, count: int, what: str = "") -> list[dict]:
        async def check() -> list[dict] | None:
            return self.running(app, count)
        return await wait_for(check, timeout=30, what=what or f"{count} pods of {app} running")

    async def wait_gated(self, app: str, count: int) -> list[dict]:
        async def check() -> list[dict] | None:
            pods = [p for p in self.pods(app) if p["spec"].get("schedulingGates") and not p["spec"].get("nodeName")]
            return pods if len(pods) == count else None
        return await wait_for(check, timeout=30, what=f"{count} pods of {app} gated")

    async def finish(self) -> None:
        """Let the cluster come to rest, then check the invariant on the pods as the API lists them."""
        await wait_quiet(self.sim)
        gpu_seconds = await self.sampler.stop()
        log.info("GPU-seconds held by incomplete gangs: %.1f (peak %d GPUs, %d samples; partly bound at some "
                 "point: %s)", gpu_seconds, self.sampler.meter.peak, self.sampler.meter.samples,
                 sorted(self.sampler.partial_seen) or "none")
        assert_every_gang_whole_or_waiting(await self.env.pods())


@contextlib.asynccontextmanager
async def cluster(tmp_path, *, nodes: int, gpus: int = 8, **controller: Any) -> AsyncIterator[Cluster]:
    clock = WallClock(time_scale=TIME_SCALE)
    async with e2e_cluster(tmp_path, nodes=nodes, gpus_per_node=gpus, clock=clock, controllers=True) as env:
        await env.start_controller(**controller)
        sampler = GangSampler(env.sim, clock).start()
        async with aiohttp.ClientSession() as session:
            try:
                yield Cluster(env, session, sampler)
            finally:
                await sampler.stop()


def node_of(pod: dict) -> str:
    return pod["spec"]["nodeName"]


# ---- (1) a high-priority ordinary pod on a full cluster --------------------------------------


async def test_a_high_priority_pod_on_a_full_cluster_preempts_without_leaving_a_gang_partly_bound(tmp_path):
    """The scheduler preempts for it: the gang's budget steers it to other victims, or the gang restarts whole."""
    async with cluster(tmp_path, nodes=2) as c:
        await c.priority_class("urgent", 1000)
        await c.job(gang_job("filler", 1, 8, gang=False))  # ordinary, older: the cheaper victim by age
        [filler] = await c.wait_running("filler", 1)
        await c.job(gang_job("train", 2, 4))
        train = await c.wait_running("train", 2)
        assert {node_of(p) for p in train} != {node_of(filler)}  # the cluster is full
        await c.request("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent", "labels": {"app": "urgent"}},
            "spec": {"priorityClassName": "urgent", "terminationGracePeriodSeconds": 1, "containers": [
                {"name": "main", "image": "serve:1", "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                                              GPU: "4"}}}]}})
        await c.wait_running("urgent", 1, "the high-priority pod running (it preempted)")
        await c.finish()


# ---- (2) kubectl drain of a node hosting half a gang ----------------------------------------


async def test_kubectl_drain_of_a_node_hosting_half_a_gang(tmp_path):
    """Evictions go through the eviction API and the gang's budget; the gang never ends half evicted."""
    async with cluster(tmp_path, nodes=3, gpus=4) as c:
        await c.job(gang_job("train", 2, 4))
        train = await c.wait_running("train", 2)
        target = node_of(train[0])
        assert node_of(train[1]) != target  # the node hosts half the gang
        proc = await asyncio.create_subprocess_exec(
            KUBECTL, "drain", target, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2s",
            env={**os.environ, "KUBECONFIG": c.sim.kubeconfig}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        text = (out + err).decode()
        log.info("kubectl drain exited %s: %s", proc.returncode, text)
        node = c.sim.store.get("nodes", None, target)
        assert node["spec"].get("unschedulable") is True, text  # cordoned either way
        if proc.returncode != 0:
            # The drain may only fail because the gang's disruption budget refused the eviction.
            assert "disruption budget" in text, text
        else:
            await wait_for(lambda: _none_on(c, "train", target), what=f"no pod of train left on {target}")
        await c.finish()


async def _none_on(c: Cluster, app: str, node: str) -> bool:
    return not any(p["spec"].get("nodeName") == node for p in c.pods(app))


# ---- (3) a node going NotReady under a running gang -----------------------------------------


async def test_a_node_going_not_ready_under_a_running_gang(tmp_path):
    """NoExecute taints evict its pods after their toleration; the gang comes back whole elsewhere or waits whole."""
    async with cluster(tmp_path, nodes=3, gpus=4) as c:
        await c.job(gang_job("train", 2, 4, toleration_seconds=2))
        train = await c.wait_running("train", 2)
        lost = node_of(train[0])
        await c.sim.set_node_ready(lost, "False")

        async def restarted() -> list[dict] | None:
            pods = c.running("train", 2)
            return pods if pods and all(node_of(p) != lost for p in pods) else None

        await wait_for(restarted, timeout=30, what="train running whole on the nodes still ready")
        await c.finish()


# ---- (4) one member failing -----------------------------------------------------------------


async def test_one_member_failing_restarts_the_gang_whole(tmp_path):
    async with cluster(tmp_path, nodes=2, gpus=4) as c:
        await c.job(gang_job("train", 2, 4))
        train = await c.wait_running("train", 2)
        first = {p["metadata"]["uid"] for p in train}
        await _maybe_await(c.sim.fail_pod("default", train[0]["metadata"]["name"]))

        async def replaced() -> list[dict] | None:
            pods = c.running("train", 2)
            return pods if pods and not first & {p["metadata"]["uid"] for p in pods} else None

        await wait_for(replaced, timeout=30, what="train running again, both pods new")
        await c.finish()


async def _maybe_await(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


# ---- (5) a high-priority gang preempting two low-priority gangs -----------------------------


async def test_a_high_priority_gang_preempts_two_low_priority_gangs_whole(tmp_path):
    async with cluster(tmp_path, nodes=2, preemption="gang") as c:
        await c.priority_class("low", 10)
        await c.priority_class("high", 1000)
        for name in ("low-a", "low-b"):
            await c.job(gang_job(name, 2, 4, priority_class="low"))
        await c.wait_running("low-a", 2)
        await c.wait_running("low-b", 2)
        await c.job(gang_job("high", 4, 4, priority_class="high"))
        await c.wait_running("high", 4, "the high-priority gang running whole")
        await c.wait_gated("low-a", 2)
        await c.wait_gated("low-b", 2)
        await c.finish()


# ---- (6) a gang whose pods terminate slowly -------------------------------------------------


async def test_a_slowly_terminating_gang_keeps_its_gpus_from_the_next_gang_until_they_are_free(tmp_path):
    async with cluster(tmp_path, nodes=1) as c:
        await c.job(gang_job("first", 2, 4, grace=5))
        await c.wait_running("first", 2)
        await c.job(gang_job("second", 2, 4))
        await c.wait_gated("second", 2)
        await c.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/first",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})

        async def terminating() -> bool:
            pods = c.pods("first")
            return bool(pods) and all(p["metadata"].get("deletionTimestamp") for p in pods)

        await wait_for(terminating, what="first's pods terminating")
        assert all(p["spec"].get("schedulingGates") for p in c.pods("second"))
        await c.wait_running("second", 2, "second running once first's pods are gone")
        records = c.env.log.records
        gone = [r.seq_deleted for k, r in records.items() if k.startswith("default/first-")]
        released = [r.seq_ungated for k, r in records.items() if k.startswith("default/second-")]
        assert len(gone) == 2 and None not in gone and len(released) == 2 and None not in released
        assert min(released) > max(gone), "second's gates came off while first's pods still held the GPUs"
        await c.finish()
