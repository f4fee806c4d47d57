"""PodDisruptionBudgets on kubesim: the disruption controller's status and the eviction subresource.

Written from https://kubernetes.io/docs/concepts/workloads/pods/disruptions/ ,
https://kubernetes.io/docs/tasks/run-application/configure-pdb/ , https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/
and the code they describe: pkg/controller/disruption/disruption.go (status) and
pkg/registry/core/pod/storage/eviction.go (eviction).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from ganggate.sim.apiserver.discovery import by_key
from ganggate.sim.apiserver.requests import Target
from ganggate.sim.helpers import disruption
from tests.kubectl_support import KUBECTL
from tests.kubesim_support import Raw, eventually, pod_manifest

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
EVICTION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def pdb_manifest(name: str, selector: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                            "spec": dict(spec)}
    if selector is not None:
        body["spec"]["selector"] = {"matchLabels": selector}
    return body


def ready_pod(name: str, labels: dict[str, str], *, ready: bool = True, deleting: bool = False,
              owned: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]
    return {"metadata": meta, "status": {"phase": "Running",
                                         "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


# ---- status math (pure) ---------------------------------------------------------------------------------

def status_of(spec: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    pdb = {"metadata": {"name": "b", "namespace": "default", "generation": 3}, "spec": dict(spec, selector={"matchLabels": {"app": "a"}})}
    return disruption.compute_status(pdb, pods)


def test_min_available_integer_counts_ready_pods_and_allows_the_rest() -> None:
    # "minAvailable: 2" over 3 Ready pods: 1 disruption allowed; expectedPods is the number of pods selected.
    pods = [ready_pod(f"p{i}", {"app": "a"}) for i in range(3)] + [ready_pod("other", {"app": "b"})]
    status = status_of({"minAvailable": 2}, pods)
    assert (status["currentHealthy"], status["desiredHealthy"], status["expectedPods"], status["disruptionsAllowed"]) == (3, 2, 3, 1)
    assert status["observedGeneration"] == 3
    assert {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods"}.items() <= status["conditions"][0].items()


def test_not_ready_and_terminating_pods_are_not_healthy() -> None:
    # countHealthyPods: a pod being deleted, or not Ready, does not count.
    pods = [ready_pod("p0", {"app": "a"}), ready_pod("p1", {"app": "a"}, ready=False),
            ready_pod("p2", {"app": "a"}, deleting=True)]
    status = status_of({"minAvailable": 1}, pods)
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (1, 0)
    assert status["conditions"][0]["reason"] == "InsufficientPods"


def test_percentages_and_max_unavailable_need_a_controller_scale() -> None:
    # getExpectedScale: pods without a controller are unmanaged and count 0, so the expected count is 0
    # and no disruption is allowed ("expectedCount <= 0"); a Job has no scale subresource: SyncFailed.
    bare = [ready_pod(f"p{i}", {"app": "a"}) for i in range(4)]
    status = status_of({"maxUnavailable": 1}, bare)
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (0, 0, 0)
    status = status_of({"minAvailable": "50%"}, bare)
    assert (status["expectedPods"], status["disruptionsAllowed"]) == (0, 0)
    owned = [ready_pod(f"p{i}", {"app": "a"}, owned=True) for i in range(4)]
    status = status_of({"maxUnavailable": "25%"}, owned)
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"
    assert 'found no controllers for pod "p0"' in status["conditions"][0]["message"]


def test_recently_evicted_pods_are_not_healthy() -> None:
    # buildDisruptedPodMap: a pod the eviction API just let go does not count while its deletion is pending.
    from datetime import datetime
    pods = [ready_pod(f"p{i}", {"app": "a"}) for i in range(3)]
    pdb = {"metadata": {"name": "b", "namespace": "default", "generation": 1},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}},
           "status": {"disruptedPods": {"p0": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                        "gone": "2020-01-01T00:00:00Z"}}}
    status = disruption.compute_status(pdb, pods)
    assert status["currentHealthy"] == 2
    assert list(status["disruptedPods"]) == ["p0"]


def test_empty_selector_selects_every_pod_in_the_namespace_and_none_in_others() -> None:
    # policy/v1: an empty selector matches every pod in the namespace.
    pdb = {"metadata": {"name": "b", "namespace": "default"}, "spec": {"selector": {}}}
    assert disruption.covers(pdb, ready_pod("p", {"x": "y"}))
    elsewhere = ready_pod("p", {})
    elsewhere["metadata"]["namespace"] = "other"
    assert not disruption.covers(pdb, elsewhere)
    assert not disruption.covers({"metadata": {"namespace": "default"}, "spec": {}}, ready_pod("p", {}))


def test_the_controller_counts_the_pods_its_selector_picks_as_labels_come_and_go() -> None:
    # getPodsForPdb lists the namespace's pods with the selector; kubesim's index must find the same.
    from types import SimpleNamespace

    from ganggate.sim.controllers.disruption import DisruptionController

    controller = DisruptionController("http://unused")
    store: dict[str, dict[str, Any]] = {}
    controller._pods = SimpleNamespace(store=store)  # type: ignore[assignment]  # a stand-in: the store alone

    def change(kind: str, pod: dict[str, Any]) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        old = store.get(key)
        if kind == "DELETED":
            store.pop(key, None)
        else:
            store[key] = pod
        controller.on_pod(kind, pod, old)

    pdb = {"metadata": {"name": "b", "namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "a", "tier": "gpu"}}}}
    change("ADDED", ready_pod("p0", {"app": "a", "tier": "gpu"}))
    change("ADDED", ready_pod("p1", {"app": "a"}))
    change("ADDED", ready_pod("p2", {"app": "b", "tier": "gpu"}))
    elsewhere = ready_pod("p3", {"app": "a", "tier": "gpu"})
    elsewhere["metadata"]["namespace"] = "other"
    change("ADDED", elsewhere)
    def picked():
        return sorted(p["metadata"]["name"] for p in controller._candidates(pdb) if disruption.covers(pdb, p))
    assert picked() == ["p0"]
    change("MODIFIED", ready_pod("p1", {"app": "a", "tier": "gpu"}))
    change("MODIFIED", ready_pod("p0", {"app": "a"}))
    assert picked() == ["p1"]
    change("DELETED", ready_pod("p1", {"app": "a", "tier": "gpu"}))
    assert picked() == []
    everything = {"metadata": {"name": "e", "namespace": "default"}, "spec": {"selector": {}}}
    assert len(controller._candidates(everything)) == 3  # no matchLabels: every pod, then the selector


def test_the_controllers_kept_counts_give_the_status_a_recount_gives_as_pods_and_budgets_change(monkeypatch) -> None:
    # disruption.go recounts every pod of the budget at each sync (countHealthyPods); kubesim keeps the
    # count from the events: after any sequence of pod and budget changes the two statuses must agree.
    import random
    from datetime import datetime, timedelta
    from types import SimpleNamespace

    from ganggate.sim.controllers.disruption import DisruptionController

    rng = random.Random(7)
    monkeypatch.setattr(disruption, "_now", lambda: "2030-01-01T00:00:00Z")  # the conditions' transition time
    controller = DisruptionController("http://unused")
    pods: dict[str, dict[str, Any]] = {}
    pdbs: dict[str, dict[str, Any]] = {}
    controller._pods = SimpleNamespace(store=pods)  # type: ignore[assignment]  # stand-ins: the stores alone
    controller._pdbs = SimpleNamespace(store=pdbs)  # type: ignore[assignment]
    now = datetime(2030, 1, 1, tzinfo=UTC)
    stamp = (now - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    selectors = [{"matchLabels": {"app": "a"}}, {"matchLabels": {"app": "a", "tier": "gpu"}}, {},
                 {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}]
    specs = [{"minAvailable": 2}, {"minAvailable": 0}, {}, {"minAvailable": 5}]

    def change(store: dict[str, dict[str, Any]], handler: Any, kind: str, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        old = store.get(key)
        if kind == "DELETED":
            store.pop(key, None)
        else:
            store[key] = obj
        handler(kind, obj, old)

    for step in range(600):
        roll = rng.random()
        if roll < 0.1:
            name = f"b{rng.randrange(3)}"
            pdb = {"metadata": {"name": name, "namespace": "default", "generation": 1},
                   "spec": dict(rng.choice(specs), selector=rng.choice(selectors))}
            if rng.random() < 0.5 and len(pods) > 1:
                pdb["status"] = {"disruptedPods": {p["metadata"]["name"]: stamp for p in rng.sample(list(pods.values()), 2)}}
            deleted = f"default/{name}" in pdbs and rng.random() < 0.2
            change(pdbs, controller.on_pdb, "DELETED" if deleted else ("MODIFIED" if f"default/{name}" in pdbs else "ADDED"), pdb)
        else:
            name = f"p{rng.randrange(12)}"
            labels = {k: v for k, v in (("app", rng.choice("ab")), ("tier", rng.choice(["gpu", "cpu"]))) if rng.random() < 0.8}
            pod = ready_pod(name, labels, ready=rng.random() < 0.7, deleting=rng.random() < 0.15)
            if rng.random() < 0.1:
                pod["metadata"]["namespace"] = "other"
            key = f"{pod['metadata']['namespace']}/{name}"
            change(pods, controller.on_pod, "DELETED" if key in pods and rng.random() < 0.2 else
                   ("MODIFIED" if key in pods else "ADDED"), pod)
        for key, pdb in pdbs.items():
            covered = controller._covered[key]
            assert disruption.counts_itself(pdb)
            counted = disruption.compute_status_counted(pdb, covered.pods, covered.healthy, now)
            assert counted == disruption.compute_status(pdb, list(pods.values()), now), (step, key)


# ---- the API --------------------------------------------------------------------------------------------

@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Simulator, Raw]]:
    """The API, the controllers (the disruption controller among them); no scheduler or kubelet."""
    async with Simulator(nodes=2, scheduler=False, kubelet=False, bookmark_seconds=0.2) as sim, \
            aiohttp.ClientSession() as session:
        yield sim, Raw(sim.url, session)


async def running_pod(raw: Raw, name: str, labels: dict[str, str], node: str = "node-0", ready: bool = True) -> None:
    """A pod bound to a node and Running (Ready or not), as the kubelet would report it."""
    status, body, _ = await raw.request("POST", PODS, pod_manifest(name, labels=labels, node_name=node))
    assert status == 201, body
    patch = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    status, body, _ = await raw.request("PATCH", f"{PODS}/{name}/status", patch, "application/strategic-merge-patch+json")
    assert status == 200, body


async def pdb_status(sim: Simulator, name: str, **expected: Any) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = (sim.store.get("poddisruptionbudgets.policy", "default", name) or {}).get("status") or {}
        return status if all(status.get(k) == v for k, v in expected.items()) else None
    return await eventually(check)


async def evict(raw: Raw, name: str, **delete_options: Any) -> tuple[int, Any, dict[str, str]]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return await raw.request("POST", f"{PODS}/{name}/eviction", body)


async def test_pdb_is_served_validated_and_its_status_kept(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    status, body, _ = await raw.request("POST", PDBS, pdb_manifest("both", {"app": "a"}, minAvailable=1, maxUnavailable=1))
    assert status == 422
    assert "minAvailable and maxUnavailable cannot be both set" in body["message"]
    status, body, _ = await raw.request("POST", PDBS, pdb_manifest("pct", {"app": "a"}, minAvailable="150%"))
    assert status == 422 and "must not be greater than 100%" in body["message"]
    for i in range(3):
        await running_pod(raw, f"a{i}", {"app": "a"})
    status, body, _ = await raw.request("POST", PDBS, pdb_manifest("budget", {"app": "a"}, minAvailable=2))
    assert status == 201, body
    assert body["metadata"]["generation"] == 1
    await pdb_status(sim, "budget", currentHealthy=3, desiredHealthy=2, expectedPods=3, disruptionsAllowed=1, observedGeneration=1)
    # A spec change bumps generation; the controller catches up.
    status, body, _ = await raw.request("PATCH", f"{PDBS}/budget", {"spec": {"minAvailable": 1}}, "application/merge-patch+json")
    assert status == 200 and body["metadata"]["generation"] == 2
    await pdb_status(sim, "budget", disruptionsAllowed=2, observedGeneration=2)
    status, body, _ = await raw.request("GET", "/apis/policy/v1")
    assert {"poddisruptionbudgets", "poddisruptionbudgets/status"} <= {r["name"] for r in body["resources"]}


async def test_eviction_spends_the_budget_then_answers_429(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    for i in range(2):
        await running_pod(raw, f"a{i}", {"app": "a"})
    await raw.request("POST", PDBS, pdb_manifest("budget", {"app": "a"}, minAvailable=1))
    await pdb_status(sim, "budget", disruptionsAllowed=1)
    status, body, _ = await evict(raw, "a0")
    assert status == 201 and body["status"] == "Success"
    # The evicted pod is terminating (graceful delete) and marked as a disruption target.
    pod = sim.store.get("pods", "default", "a0")
    if pod is not None:
        assert pod["metadata"].get("deletionTimestamp")
        target = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert target and target[0]["reason"] == "EvictionByEvictionAPI" and target[0]["status"] == "True"
    # checkAndDecrement wrote the decrement and the disrupted pod at once.
    budget = sim.store.get("poddisruptionbudgets.policy", "default", "budget")
    assert budget["status"]["disruptionsAllowed"] == 0
    assert "a0" in budget["status"]["disruptedPods"]
    # The controller then stops counting the terminating pod as healthy.
    await pdb_status(sim, "budget", currentHealthy=1, disruptionsAllowed=0)
    status, body, _ = await evict(raw, "a1")
    assert status == 429
    assert body["reason"] == "TooManyRequests" and body["message"] == EVICTION_MESSAGE
    cause = body["details"]["causes"][0]
    assert cause["reason"] == "DisruptionBudget"
    assert cause["message"] == "The disruption budget budget needs 1 healthy pods and has 1 currently"
    assert sim.store.get("pods", "default", "a1")["metadata"].get("deletionTimestamp") is None


async def test_an_empty_selector_counts_every_pod_but_guards_none(cluster: tuple[Simulator, Raw]) -> None:
    # The disruption controller lists the namespace's pods with LabelSelectorAsSelector({}) = everything
    # (disruption.go getPodsForPdb), but eviction.go getPodDisruptionBudgets and the scheduler's
    # filterPodsWithPDBViolation skip "a PDB with a nil or empty selector": it refuses no eviction.
    sim, raw = cluster
    await running_pod(raw, "e0", {"app": "e"})
    budget = pdb_manifest("all", None, minAvailable=1)
    budget["spec"]["selector"] = {}
    await raw.request("POST", PDBS, budget)
    await pdb_status(sim, "all", currentHealthy=1, disruptionsAllowed=0)
    assert not disruption.guards(sim.store.get("poddisruptionbudgets.policy", "default", "all"),
                                 sim.store.get("pods", "default", "e0"))
    status, body, _ = await evict(raw, "e0")
    assert status == 201 and body["status"] == "Success"


async def test_eviction_without_a_budget_or_of_a_pending_pod_just_deletes(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    await raw.request("POST", PODS, pod_manifest("pending", labels={"app": "a"}))
    await raw.request("POST", PDBS, pdb_manifest("budget", {"app": "a"}, minAvailable=5))
    await pdb_status(sim, "budget", observedGeneration=1)
    status, _, _ = await evict(raw, "pending")  # canIgnorePDB: Pending
    assert status == 201
    assert sim.store.get("pods", "default", "pending") is None  # never bound: no grace period
    status, body, _ = await evict(raw, "missing")
    assert status == 404


async def test_unhealthy_pods_follow_the_unhealthy_pod_eviction_policy(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    await running_pod(raw, "ok", {"app": "a"})
    await running_pod(raw, "sick", {"app": "a"}, ready=False)
    await raw.request("POST", PDBS, pdb_manifest("budget", {"app": "a"}, minAvailable=1))
    await pdb_status(sim, "budget", currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0)
    # IfHealthyBudget: currentHealthy >= desiredHealthy > 0, so the unready pod may go without spending the budget.
    status, body, _ = await evict(raw, "sick")
    assert status == 201, body
    # ... but the Ready one is guarded.
    status, body, _ = await evict(raw, "ok")
    assert status == 429
    await running_pod(raw, "sick2", {"app": "b"}, ready=False)
    await raw.request("POST", PDBS, pdb_manifest("strict", {"app": "b"}, minAvailable=1))
    await pdb_status(sim, "strict", observedGeneration=1)
    status, body, _ = await evict(raw, "sick2")  # desiredHealthy 1 > currentHealthy 0
    assert status == 429
    patch = {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    await raw.request("PATCH", f"{PDBS}/strict", patch, "application/merge-patch+json")
    status, body, _ = await evict(raw, "sick2")
    assert status == 201, body


async def test_two_budgets_over_one_pod_is_a_500(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    await running_pod(raw, "a0", {"app": "a", "tier": "x"})
    await raw.request("POST", PDBS, pdb_manifest("one", {"app": "a"}, minAvailable=0))
    await raw.request("POST", PDBS, pdb_manifest("two", {"tier": "x"}, minAvailable=0))
    status, body, _ = await evict(raw, "a0")
    assert status == 500
    assert body["message"] == "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


async def test_a_budget_not_yet_observed_is_still_being_processed(cluster: tuple[Simulator, Raw]) -> None:
    sim, raw = cluster
    await running_pod(raw, "a0", {"app": "a"})
    # Stored directly with a generation its status has not seen (as before the controller's first sync).
    await sim.server.create_object(
        Target(by_key(disruption.KEY), "default", None, None),
        pdb_manifest("fresh", {"app": "a"}, minAvailable=0))
    budget = sim.store.get(disruption.KEY, "default", "fresh")
    if (budget.get("status") or {}).get("observedGeneration") is None:
        status, body, headers = await evict(raw, "a0")
        assert status == 429
        assert body["details"]["causes"][0]["message"] == "The disruption budget fresh is still being processed by the server."
        assert headers.get("Retry-After") == "10"


async def test_kubectl_drain_evicts_and_waits_for_the_budget(cluster: tuple[Simulator, Raw]) -> None:
    # kubectl drain: cordon, then evict every pod on the node, retrying a 429 every 5 seconds
    # (k8s.io/kubectl/pkg/drain). The budget allows one eviction; the second waits until the first
    # evicted pod is gone and a replacement is Ready elsewhere.
    sim, raw = cluster
    await running_pod(raw, "a0", {"app": "a"})
    await running_pod(raw, "a1", {"app": "a"})
    await running_pod(raw, "a2", {"app": "a"}, node="node-1")
    await raw.request("POST", PDBS, pdb_manifest("budget", {"app": "a"}, minAvailable=2))
    await pdb_status(sim, "budget", disruptionsAllowed=1)
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", sim.kubeconfig, "drain", "node-0", "--ignore-daemonsets",
        "--delete-emptydir-data", "--force", "--timeout=60s",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "KUBECONFIG": sim.kubeconfig})

    refused = asyncio.Event()
    err_lines: list[bytes] = []

    async def read_stderr() -> None:
        async for line in proc.stderr:
            err_lines.append(line)
            if b"error when evicting pods/" in line and b"disruption budget" in line:
                refused.set()

    async def kubelet_and_replicas() -> None:
        # Standing in for the kubelet (finish what is terminating) and a ReplicaSet (replace it on
        # node-1). The replacement comes only once kubectl has been refused: otherwise, on a slow
        # machine, the budget could recover before kubectl's second eviction and never refuse it.
        while True:
            for pod in sim.store.list("pods", "default"):
                if pod["metadata"].get("deletionTimestamp"):
                    sim.store.delete("pods", "default", pod["metadata"]["name"])
                    await refused.wait()
                    await running_pod(raw, "r-" + pod["metadata"]["name"], {"app": "a"}, node="node-1")
            await asyncio.sleep(0.05)

    helper = asyncio.ensure_future(kubelet_and_replicas())
    reader = asyncio.ensure_future(read_stderr())
    try:
        async with asyncio.timeout(90):
            out = await proc.stdout.read()
            await proc.wait()
            await reader
    finally:
        helper.cancel()
        reader.cancel()
    err = b"".join(err_lines)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert "node/node-0 cordoned" in text
    assert "node/node-0 drained" in text
    assert sim.store.get("nodes", None, "node-0")["spec"].get("unschedulable") is True
    assert "error when evicting pods/" in err.decode() and "disruption budget" in err.decode()
