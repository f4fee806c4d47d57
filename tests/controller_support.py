"""Shared helpers for the controller's end-to-end tests on kubesim, through real HTTP.

`e2e_cluster` starts kubesim (API server, scheduler, kubelet), the real HTTPS webhook
registered with a MutatingWebhookConfiguration (URL clientConfig, caBundle from certs made
here), and the lease namespace. `PodLog` watches pods and remembers what a user would see
(when each pod lost its gate, when it was bound); `assert_gangs_whole` is the one checker all
tests use: no gang ends partly bound, no pod was bound while gated, each pod released once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ganggate.contract import GATE_NAME, GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM
from ganggate.controller.release.patches import DECISION_ANNOTATION
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.kube.calls import Backoff, call_json, with_retries

GPU = "nvidia.com/gpu"


def gang_pod(name: str, group: str | None, num: int | None, *, gpus: int = 1, cpu: str = "1", memory: str = "1Gi",
             min_available: int | None = None, namespace: str = "default", run_seconds: float | None = None,
             owner: str | None = None, scheduler: str | None = None, labels: dict | None = None) -> dict:
    """A pod as a user or a Job controller would create it (no gate: the webhook adds it)."""
    annotations: dict[str, str] = {}
    if group is not None:
        annotations[GROUP_NAME] = group
    if num is not None:
        annotations[GROUP_POD_NUM] = str(num)
    if min_available is not None:
        annotations[GROUP_MIN_AVAILABLE] = str(min_available)
    if run_seconds is not None:
        annotations["kubesim.io/run-seconds"] = str(run_seconds)
    limits = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[GPU] = str(gpus)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": annotations}
    if labels:
        metadata["labels"] = labels
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner,
                                        "uid": f"job-uid-{owner}", "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": limits}}],
                            "restartPolicy": "Never"}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


async def create_pods(core: Any, pods: list[dict]) -> list[dict]:
    """Create pods concurrently; returns the created objects (as the API answered)."""
    sem = asyncio.Semaphore(32)

    async def one(pod: dict) -> dict:
        async with sem:
            return await call_json(core.create_namespaced_pod, pod["metadata"]["namespace"], pod)

    return list(await asyncio.gather(*(one(p) for p in pods)))


async def list_pods(core: Any, namespace: str | None = None) -> list[dict]:
    """The pods as a user lists them (retrying the faults some tests inject)."""
    if namespace:
        body = await with_retries(lambda: call_json(core.list_namespaced_pod, namespace), Backoff(attempts=5))
    else:
        body = await with_retries(lambda: call_json(core.list_pod_for_all_namespaces), Backoff(attempts=5))
    return body.get("items") or []


async def list_events(core: Any, namespace: str = "default") -> list[dict]:
    return (await call_json(core.list_namespaced_event, namespace)).get("items") or []


def is_gated(pod: dict) -> bool:
    return any(g.get("name") == GATE_NAME for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def decision(pod: dict) -> dict | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DECISION_ANNOTATION)
    return json.loads(raw) if raw else None


async def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll an async predicate until it returns something truthy (a safety net, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


class PatchCounter:
    """Counts, per pod, the PATCH requests the controller got applied (2xx and not dry-run);
    those of the status subresource (a release's status.nominatedNodeName) apart."""

    def __init__(self, api_client: Any) -> None:
        self.applied: Counter[str] = Counter()
        self.dry_runs: Counter[str] = Counter()
        self.status: Counter[str] = Counter()
        rest = api_client.rest_client
        original = rest.PATCH

        async def counting(url: str, *args: Any, **kwargs: Any) -> Any:
            resp = await original(url, *args, **kwargs)
            query = dict(kwargs.get("query_params") or [])
            parts = url.split("?", 1)[0].split("/namespaces/", 1)[-1].split("/")
            # The pod itself, or its status subresource (pods/<name>/status: the DisruptionTarget
            # write, a release's status.nominatedNodeName), counted apart.
            if "/pods/" in url and len(parts) >= 3 and 200 <= resp.status <= 299:
                key = f"{parts[0]}/{parts[2]}"
                if len(parts) > 3:  # a subresource: pods/<name>/status
                    self.status[key] += 1
                else:
                    (self.dry_runs if query.get("dryRun") else self.applied)[key] += 1
            return resp

        rest.PATCH = counting


@dataclass
class PodRecord:
    """What the watch showed of one pod, in order of arrival."""

    seq_ungated: int | None = None
    seq_bound: int | None = None
    bound_while_gated: bool = False
    node: str | None = None
    last: dict = field(default_factory=dict)
    deleted: bool = False
    seq_deleted: int | None = None


class PodLog:
    """Watches all pods (its own raw HTTP watch) and records gate removals and bindings in order."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.records: dict[str, PodRecord] = {}
        self.seq = 0
        self.marks: dict[str, int] = {}
        self._task: asyncio.Task | None = None

    def mark(self, name: str) -> None:
        """Remember the current position in the stream (e.g. "node added")."""
        self.marks[name] = self.seq

    async def start(self) -> None:
        from ganggate.controller.round.informer import Informer

        def on_list(items: list[dict]) -> None:
            for pod in items:
                self._see(pod, False)

        def on_event(kind: str, pod: dict) -> None:
            self._see(pod, kind == "DELETED")

        self.informer = Informer(self.core.list_pod_for_all_namespaces, "pods(test)", on_list=on_list,
                                 on_event=on_event)
        self._task = asyncio.create_task(self.informer.run())
        await wait_for(lambda: _true(self.informer.synced), what="test pod watch synced")

    def _see(self, pod: dict, deleted: bool) -> None:
        self.seq += 1
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}/{meta.get('uid')}"
        rec = self.records.setdefault(key, PodRecord())
        rec.last = pod
        rec.deleted = deleted
        if deleted:
            rec.seq_deleted = self.seq
        gated = is_gated(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if not gated and rec.seq_ungated is None:
            rec.seq_ungated = self.seq
        if node and rec.seq_bound is None:
            rec.seq_bound = self.seq
            rec.node = node
            rec.bound_while_gated = gated

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def by_name(self, namespace: str, name: str) -> list[PodRecord]:
        prefix = f"{namespace}/{name}/"
        return [r for k, r in self.records.items() if k.startswith(prefix)]


async def _true(value: Any) -> Any:
    return value


def assert_gangs_whole(pods: list[dict], log: PodLog | None = None, patches: PatchCounter | None = None) -> None:
    """The checker every test uses, on the pods as they are now (listed through the API).

    - a gang (all-or-nothing) is bound entirely or not at all; one with min-available has
      0 or at least min-available pods bound;
    - every released pod of a gang carries one decision annotation, and the first
      min-available released pods share one decision id;
    - no pod was ever bound while still gated (from the watch), and no pod's gate was removed
      by more than one applied PATCH.
    """
    gangs: dict[tuple[str, str], list[dict]] = {}
    for pod in pods:
        ann = (pod["metadata"].get("annotations") or {})
        if GROUP_NAME in ann and (pod["spec"].get("schedulerName") or "default-scheduler") == "default-scheduler":
            gangs.setdefault((pod["metadata"]["namespace"], ann[GROUP_NAME]), []).append(pod)
    for key, members in gangs.items():
        ann = members[0]["metadata"]["annotations"]
        num = int(ann[GROUP_POD_NUM])
        min_av = int(ann.get(GROUP_MIN_AVAILABLE, num))
        live = [p for p in members if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        ever_bound = [p for p in members if p["spec"].get("nodeName")]
        released = [p for p in members if not is_gated(p)]
        if min_av == num and len(members) >= num:
            assert len(ever_bound) in (0, len(members)), (
                f"gang {key} partly bound: {len(ever_bound)} of {len(members)} "
                f"{sorted(p['metadata']['name'] for p in ever_bound)}")
        if ever_bound:
            assert len(ever_bound) >= min(min_av, len(live) or min_av) or len(live) < len(members), (
                f"gang {key}: only {len(ever_bound)} bound, min-available {min_av}")
        for pod in released:
            assert decision(pod) is not None, f"{pod['metadata']['name']} released without a decision annotation"
            assert decision(pod)["gang"] == f"{key[0]}/{key[1]}"
    if log is not None:
        for key, rec in log.records.items():
            assert not rec.bound_while_gated, f"{key} bound while gated"
            if rec.seq_bound is not None and rec.seq_ungated is not None:
                assert rec.seq_ungated <= rec.seq_bound
    if patches is not None:
        twice = {k: n for k, n in patches.applied.items() if n > 1}
        assert not twice, f"pods released by more than one PATCH: {twice}"


# ---- the cluster ---------------------------------------------------------------------------


@dataclass
class E2E:
    sim: Any
    api: Any  # ApiClient for the test itself
    core: Any
    webhook: Any
    log: PodLog
    controllers: list[tuple[Controller, asyncio.Task, Any]] = field(default_factory=list)

    async def start_controller(self, count_patches: bool = True, **overrides: Any) -> tuple[Controller, PatchCounter]:
        """A controller in this process, with its own ApiClient (as a separate replica would have)."""
        settings: dict[str, Any] = dict(leader_election=False, bind_timeout_seconds=120.0, debounce_seconds=0.02,
                                        tick_seconds=0.2)
        settings.update(overrides)
        api = self.sim.api_client()
        counter = PatchCounter(api)
        controller = Controller(api, ControllerConfig(**settings))
        task = asyncio.create_task(controller.run())
        self.controllers.append((controller, task, api))
        return controller, counter

    async def stop_controller(self, controller: Controller) -> None:
        for entry in list(self.controllers):
            if entry[0] is controller:
                _, task, api = entry
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await api.close()
                self.controllers.remove(entry)

    async def pods(self, namespace: str | None = None) -> list[dict]:
        return await list_pods(self.core, namespace)

    async def check(self, *counters: PatchCounter) -> None:
        merged = PatchCounter.__new__(PatchCounter)
        merged.applied = Counter()
        for c in counters:
            merged.applied.update(c.applied)
        assert_gangs_whole(await self.pods(), self.log, merged)


async def register_webhook(core_api_client: Any, url: str, ca_pem: bytes) -> None:
    from kubernetes_asyncio import client

    admission = client.AdmissionregistrationV1Api(core_api_client)
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "ganggate"},
        "webhooks": [{
            "name": "gate.ganggate.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": url + "/mutate", "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
        }],
    }
    await call_json(admission.create_mutating_webhook_configuration, body)


@contextlib.asynccontextmanager
async def e2e_cluster(tmp_path: Path, *, nodes: int = 2, gpus_per_node: int = 8, **sim_kwargs: Any
                      ) -> AsyncIterator[E2E]:
    """kubesim + the real HTTPS webhook registered through a MutatingWebhookConfiguration."""
    from kubernetes_asyncio import client

    from ganggate.admission.server import WebhookConfig, start_webhook
    from ganggate.certs.files import CA_CERT, TLS_CERT, TLS_KEY, generate
    from ganggate.sim import Simulator

    certs = tmp_path / "certs"
    generate(certs, "ganggate-webhook", "ganggate-system", ips=("127.0.0.1",))
    webhook = await start_webhook(WebhookConfig(cert_file=str(certs / TLS_CERT), key_file=str(certs / TLS_KEY),
                                                host="127.0.0.1", port=0, cert_reload_seconds=0))
    try:
        # No kube-controller-manager stand-ins: gang_pod(owner=...) names Jobs that do not exist,
        # whose pods a garbage collector would delete.
        sim_kwargs.setdefault("controllers", False)
        async with Simulator(nodes=nodes, gpus_per_node=gpus_per_node, cpu="64", memory="512Gi",
                             **sim_kwargs) as sim:
            api = sim.api_client()
            core = client.CoreV1Api(api)
            await register_webhook(api, f"https://127.0.0.1:{webhook.port}", (certs / CA_CERT).read_bytes())
            await call_json(core.create_namespace, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "ganggate-system"}})
            log = PodLog(core)
            await log.start()
            env = E2E(sim=sim, api=api, core=core, webhook=webhook, log=log)
            try:
                yield env
            finally:
                for controller, _, _ in list(env.controllers):
                    await env.stop_controller(controller)
                await log.stop()
                await api.close()
    finally:
        await webhook.close()


async def node_gpus_free(env: E2E) -> dict[str, int]:
    """Per node, allocatable GPUs minus the GPUs of bound, non-terminated pods (as a user would add up)."""
    from ganggate.core.fit.resources import node_allocatable, pod_requests

    nodes = (await call_json(env.core.list_node)).get("items") or []
    free = {n["metadata"]["name"]: node_allocatable(n).get(GPU, 0) // 1000 for n in nodes}
    for pod in await env.pods():
        node = pod["spec"].get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and node in free:
            free[node] -= pod_requests(pod).get(GPU, 0) // 1000
    return free


class JobCluster:
    """An E2E cluster run with kubesim's Job controller, driven over HTTP by the tests that
    create batch/v1 Jobs and watch their pods (lifecycle and preemption end to end)."""

    def __init__(self, env: E2E, session: Any) -> None:
        self.env, self.sim, self.session = env, env.sim, session

    async def request(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 202)) -> Any:
        async with self.session.request(method, self.sim.url + path, json=body) as response:
            data = await response.json(content_type=None)
            assert response.status in ok, f"{method} {path}: {response.status} {data}"
            return data

    def pods(self, app: str, *, ended: bool = False) -> list[dict]:
        """The pods labelled app=<app> in default; without `ended`, only those not Succeeded or Failed."""
        return [p for p in self.sim.store.list("pods", "default")
                if (p["metadata"].get("labels") or {}).get("app") == app
                and (ended or (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))]

    async def running(self, app: str, count: int, what: str = "") -> list[dict]:
        """Wait until exactly `count` pods of the app are Running and not terminating."""
        async def check() -> list[dict] | None:
            pods = [p for p in self.pods(app) if (p.get("status") or {}).get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]
            return pods if len(pods) == count else None
        return await wait_for(check, timeout=30, what=what or f"{count} pods of {app} running")


@contextlib.asynccontextmanager
async def job_cluster(tmp_path: Path, wrapper: type[JobCluster], *, nodes: int, gpus_per_node: int,
                      time_scale: float, **controller: Any) -> AsyncIterator[Any]:
    """e2e_cluster with kubesim's controllers on a sped-up wall clock and one gate controller
    started with `controller` settings, handed to the test as `wrapper(env, session)`."""
    import aiohttp

    from ganggate.sim.clock import WallClock

    async with e2e_cluster(tmp_path, nodes=nodes, gpus_per_node=gpus_per_node,
                           clock=WallClock(time_scale=time_scale), controllers=True) as env:
        await env.start_controller(**controller)
        async with aiohttp.ClientSession() as session:
            yield wrapper(env, session)
