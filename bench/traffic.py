"""Gangs released among a stream of ordinary pods on a nearly full cluster: the scenario.

kubesim with its scheduler, kubelet and Job controller, and (mode `ganggate`) the webhook and
the gate controller as `ganggate sim up` assembles them, in one process on the wall clock. A
driver creates, as Poisson arrivals, ordinary ungated 1-GPU bare pods that run a few seconds
(keeping most GPUs busy) and Jobs whose pods form gangs. In mode `ganggate` the Jobs' pod
template carries the gang annotations; in mode `baseline` the same Jobs carry none (plain
Jobs under the default scheduler alone). Optional latency is added to every API write.

`Ledger` (pure) turns the pods' watch events, stamped as they arrive, into the figures:
- a gang is **partial** while some member holds a node (bound, not ended: terminating pods
  still hold their GPUs) and not every member of it holds one or has Succeeded;
- **partial GPU-seconds**: the GPUs its holding members hold while it is partial, integrated;
- **longest partial window**: the longest single stretch a gang stays partial;
- **in pieces**: a member not being deleted Succeeded while the gang was partial (it ran
  without the others);
- **restarted**: a member was deleted before it ended (the scenario deletes nothing itself).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GANG_LABEL = "traffic.ganggate.io/gang"
SIZE_LABEL = "traffic.ganggate.io/size"
NAMESPACE = "default"
#: ganggate: the default controller; ganggate-no-nominate: the same without --nominate (the loss
#: of a plan is only detected and repaired); baseline: the same Jobs without the annotations.
MODES = ("ganggate", "ganggate-no-nominate", "baseline")
SETTINGS = {"ganggate": {}, "ganggate-no-nominate": {"nominate": False}}
WRITE_VERBS = ("create", "update", "patch", "delete")


@dataclass(frozen=True)
class TrafficConfig:
    """One run's scenario. The defaults are the benchmark's (#19): 8 x 8 GPUs, about 80% busy."""

    nodes: int = 8
    gpus_per_node: int = 8
    gangs: int = 200
    gang_sizes: tuple[int, ...] = (2, 3, 4, 5, 6)
    gang_interval: float = 1.5  # mean seconds between gang arrivals
    gang_seconds: tuple[float, float] = (4.0, 8.0)  # a gang member's run time, uniform
    ordinary_rate: float = 4.0  # ordinary pods per second
    ordinary_seconds: tuple[float, float] = (6.0, 14.0)  # an ordinary pod's run time, uniform
    grace_seconds: int = 2  # terminationGracePeriodSeconds of every pod (a worker's exit on SIGTERM)
    latency: float = 0.0  # seconds added to every API write (create, update, patch, delete)
    drain_seconds: float = 120.0  # after the last arrival, how long to wait for the gangs to finish
    seed: int = 1
    #: kubesim's scheduler, kubelet and controllers in a process of their own, as in a cluster
    #: (on one event loop with the API server, the webhook and the controller, a 2-core machine
    #: under load creates a Job's pods slower than gangs arrive).
    components_process: bool = True
    #: GPUs as DRA devices (Simulator(dra_product=...)): every pod claims its GPU through the
    #: ResourceClaimTemplate `one-gpu` instead of asking nvidia.com/gpu.
    dra: bool = False
    #: the scheduler stand-in's gates ("A=true,..." and the release whose defaults the others take:
    #: ganggate/sim/componentbase/featuregate.py); 1.35's defaults when empty
    scheduler_gates: str = ""
    scheduler_version: str = "1.35"


# ---- the ledger (pure) --------------------------------------------------------------------------


@dataclass
class _Member:
    bound: bool = False
    ended: bool = False
    succeeded: bool = False
    deleting: bool = False
    gpus: int = 1


@dataclass
class _Gang:
    size: int
    created: float
    members: dict[str, _Member] = field(default_factory=dict)
    partial_since: float | None = None
    last: float = 0.0
    gpu_seconds: float = 0.0
    longest: float = 0.0
    windows: int = 0
    window_lengths: list[float] = field(default_factory=list)
    stranded: bool = False  # a member reported Unschedulable while others held nodes
    pieces: bool = False
    restarted: bool = False
    whole_at: float | None = None  # first time every member held a node or had succeeded

    def holding(self) -> int:
        return sum(1 for m in self.members.values() if m.bound and not m.ended)

    def held_gpus(self) -> int:
        return sum(m.gpus for m in self.members.values() if m.bound and not m.ended)

    def done(self) -> int:
        return sum(1 for m in self.members.values() if m.succeeded)

    def partial(self) -> bool:
        held = self.holding()
        return held > 0 and held + self.done() < self.size


@dataclass(frozen=True)
class Figures:
    """What one run measured."""

    gangs: int
    completed: int
    partial_gpu_seconds: float
    partial_gangs: int  # gangs partial at any moment
    partial_over_2s: int  # gangs with a partial window of 2 s or more
    partial_over_5s: int  # gangs with a partial window of 5 s or more
    median_window: float  # of every partial window
    stranded: int  # gangs with a member reported Unschedulable while others held nodes
    longest_window: float
    in_pieces: int
    restarted: int
    mean_wait: float  # gang created -> every member holding a node (completed gangs)
    busy: float  # fraction of the cluster's GPUs held, over the arrivals' span
    ordinary_pods: int


class Ledger:
    """Pods' watch events in, the figures out. `observe` takes each event with its arrival time."""

    def __init__(self, capacity_gpus: int) -> None:
        self.capacity = capacity_gpus
        self.gangs: dict[str, _Gang] = {}
        self.ordinary = 0
        self._gpu_time = 0.0  # GPU-seconds held by every pod
        self._held = 0
        self._since = 0.0
        self._bound: dict[str, int] = {}  # uid -> GPUs, for every pod holding a node
        self._busy_until: tuple[float, float] | None = None  # (time, GPU-seconds) when `mark` was called

    def mark(self, now: float) -> None:
        """The arrivals are over: `busy` is averaged up to now."""
        self._account(now, "", 0)
        self._busy_until = (now, self._gpu_time)

    def observe(self, now: float, event: str, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        phase = (pod.get("status") or {}).get("phase")
        ended = event == "DELETED" or phase in ("Succeeded", "Failed")
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        gpus = _gpus(pod)
        self._account(now, uid, gpus if bound and not ended else 0)
        labels = meta.get("labels") or {}
        gang_name = labels.get(GANG_LABEL)
        if gang_name is None:
            if event == "ADDED":
                self.ordinary += 1
            return
        gang = self.gangs.setdefault(gang_name, _Gang(size=int(labels.get(SIZE_LABEL, "1")), created=now, last=now))
        self._advance(gang, now)
        member = gang.members.setdefault(uid, _Member(gpus=gpus))
        was_partial = gang.partial()
        if member.ended:
            return
        if meta.get("deletionTimestamp") and not ended and not member.deleting:
            member.deleting = True
            gang.restarted = True
        member.bound = member.bound or bound
        if not bound and was_partial and _unschedulable(pod):
            gang.stranded = True
        if phase == "Succeeded":
            member.succeeded = True
            if was_partial and not member.deleting:  # one being deleted (a restart) is on its way out
                gang.pieces = True
        member.ended = ended
        self._transition(gang, now, was_partial)

    def _account(self, now: float, uid: str, gpus: int) -> None:
        self._gpu_time += self._held * (now - self._since)
        self._since = now
        self._held += gpus - self._bound.pop(uid, 0)
        if gpus:
            self._bound[uid] = gpus

    @staticmethod
    def _advance(gang: _Gang, now: float) -> None:
        if gang.partial_since is not None:
            gang.gpu_seconds += gang.held_gpus() * (now - gang.last)
        gang.last = now

    @staticmethod
    def _transition(gang: _Gang, now: float, was_partial: bool) -> None:
        partial = gang.partial()
        if partial and not was_partial:
            gang.partial_since = now
            gang.windows += 1
        elif was_partial and not partial and gang.partial_since is not None:
            gang.window_lengths.append(now - gang.partial_since)
            gang.longest = max(gang.longest, now - gang.partial_since)
            gang.partial_since = None
        if gang.whole_at is None and gang.holding() + gang.done() >= gang.size:
            gang.whole_at = now

    def figures(self, now: float, span: float) -> Figures:
        """The figures at `now` (a gang still partial counts up to now); `span` is the seconds
        over which `busy` is averaged (the arrivals')."""
        longest = 0.0
        for gang in self.gangs.values():
            self._advance(gang, now)
            if gang.partial_since is not None:
                gang.window_lengths.append(now - gang.partial_since)
                gang.longest = max(gang.longest, now - gang.partial_since)
                gang.partial_since = now
            longest = max(longest, gang.longest)
        self._account(now, "", 0)
        _, gpu_time = self._busy_until or (now, self._gpu_time)
        gangs = list(self.gangs.values())
        lengths = [w for g in gangs for w in g.window_lengths]
        waits = [g.whole_at - g.created for g in gangs if g.whole_at is not None]
        return Figures(
            gangs=len(gangs),
            completed=sum(1 for g in gangs if g.done() >= g.size),
            partial_gpu_seconds=sum(g.gpu_seconds for g in gangs),
            partial_gangs=sum(1 for g in gangs if g.windows),
            partial_over_2s=sum(1 for g in gangs if g.longest >= 2.0),
            partial_over_5s=sum(1 for g in gangs if g.longest >= 5.0),
            median_window=statistics.median(lengths) if lengths else 0.0,
            stranded=sum(1 for g in gangs if g.stranded),
            longest_window=longest,
            in_pieces=sum(1 for g in gangs if g.pieces),
            restarted=sum(1 for g in gangs if g.restarted),
            mean_wait=statistics.fmean(waits) if waits else 0.0,
            busy=gpu_time / (self.capacity * span) if span > 0 else 0.0,
            ordinary_pods=self.ordinary,
        )


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    """The scheduler reported the pod Unschedulable (PodScheduled False)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("reason") == "Unschedulable"
    return False


def _gpus(pod: Mapping[str, Any]) -> int:
    total = len((pod.get("spec") or {}).get("resourceClaims") or [])  # DRA: one GPU per claim (`one-gpu`)
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = ((container.get("resources") or {}).get("limits") or {})
        total += int(limits.get("nvidia.com/gpu", 0) or 0)
    return total


# ---- the objects the driver creates -------------------------------------------------------------


def _container() -> dict[str, Any]:
    return {"name": "main", "image": "trainer:1",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                          "limits": {"nvidia.com/gpu": "1"}}}


ONE_GPU_TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
                    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}}


def as_dra(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec whose GPU is claimed through the `one-gpu` template instead of nvidia.com/gpu."""
    for container in spec["containers"]:
        for part in ("requests", "limits"):
            container["resources"][part].pop("nvidia.com/gpu", None)
        container["resources"]["claims"] = [{"name": "gpu"}]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return spec


def ordinary_pod(index: int, seconds: float, grace: int) -> dict[str, Any]:
    """An ordinary ungated 1-GPU bare pod that runs `seconds`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"ordinary-{index}", "namespace": NAMESPACE,
                         "annotations": {"kubesim.io/run-seconds": f"{seconds:.2f}"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                     "containers": [_container()]}}


def gang_job(index: int, size: int, seconds: float, grace: int, *, gated: bool) -> dict[str, Any]:
    """A Job of `size` 1-GPU pods all at once (parallelism = completions = size), each running
    `seconds`; with the gang annotations when `gated`. backoffLimit is high: a whole-gang restart
    counts its deleted pods as failures (#19 part 3 is another change)."""
    name = f"gang-{index}"
    annotations = {"kubesim.io/run-seconds": f"{seconds:.2f}"}
    if gated:
        annotations.update({"scheduling.k8s.io/group-name": name, "scheduling.k8s.io/group-pod-num": str(size)})
    template = {"metadata": {"labels": {GANG_LABEL: name, SIZE_LABEL: str(size)}, "annotations": annotations},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                         "containers": [_container()]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"parallelism": size, "completions": size, "backoffLimit": 10_000, "template": template}}


@dataclass(frozen=True)
class Arrival:
    at: float
    kind: str  # "ordinary" | "gang"
    index: int
    seconds: float
    size: int = 1


def arrivals(config: TrafficConfig) -> list[Arrival]:
    """The run's arrivals in time order: the same for every mode of one seed. Ordinary pods
    arrive from the start over the gangs' span, so the cluster is busy when the first gang comes."""
    rng = random.Random(config.seed)
    out: list[Arrival] = []
    t = 0.0
    warmup = config.ordinary_seconds[1]
    for i in range(config.gangs):
        t += rng.expovariate(1.0 / config.gang_interval)
        out.append(Arrival(warmup + t, "gang", i, rng.uniform(*config.gang_seconds), rng.choice(config.gang_sizes)))
    end = warmup + t
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(config.ordinary_rate)
        if t > end:
            break
        out.append(Arrival(t, "ordinary", i, rng.uniform(*config.ordinary_seconds)))
        i += 1
    return sorted(out, key=lambda a: (a.at, a.kind, a.index))


# ---- one run ------------------------------------------------------------------------------------


async def run(config: TrafficConfig, mode: str) -> Figures:
    """One run of the scenario in `mode` on a fresh cluster; the figures."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    import aiohttp

    from ganggate.replay.run.stack import Stack, start_gate
    from ganggate.sim.componentbase.featuregate import parse
    from ganggate.sim.simulator import Simulator

    gates = parse(config.scheduler_gates, config.scheduler_version)
    async with Simulator(nodes=config.nodes, gpus_per_node=config.gpus_per_node,
                         components_process=config.components_process, scheduler_feature_gates=gates,
                         dra_product="NVIDIA H100 80GB HBM3" if config.dra else None) as sim:
        stack = Stack(mode="ganggate", sim=sim, settings=dict(SETTINGS.get(mode, {})))
        stack.api = sim.api_client()
        gated = mode in SETTINGS
        try:
            if gated:
                await start_gate(stack)
                await _until_synced(stack.controller)
            ledger = Ledger(config.nodes * config.gpus_per_node)
            async with aiohttp.ClientSession(sim.url) as http:
                watcher = asyncio.create_task(_watch(http, ledger))
                await asyncio.sleep(0.2)  # the watch is open before the first pod
                if config.dra:
                    await _create(http, f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates",
                                  ONE_GPU_TEMPLATE)
                for verb in WRITE_VERBS if config.latency else ():
                    sim.faults.latency(config.latency, verb=verb)
                span = await _drive(http, config, ledger, gated=gated, watcher=watcher)
                figures = ledger.figures(time.monotonic(), span)
                watcher.cancel()
                sim.faults.clear()
            return figures
        finally:
            await stack.close()


async def _until_synced(controller: Any) -> None:
    while not controller.synced:
        await asyncio.sleep(0.05)


async def _drive(http: Any, config: TrafficConfig, ledger: Ledger, *, gated: bool, watcher: asyncio.Task) -> float:
    """Create the arrivals on time, then wait for every gang to finish (or the drain to end);
    returns the arrivals' span in seconds."""
    plan = arrivals(config)
    start = time.monotonic()
    writes: set[asyncio.Task] = set()
    for arrival in plan:
        delay = start + arrival.at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if arrival.kind == "gang":
            path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
            body = gang_job(arrival.index, arrival.size, arrival.seconds, config.grace_seconds, gated=gated)
            if config.dra:
                as_dra(body["spec"]["template"]["spec"])
        else:
            path = f"/api/v1/namespaces/{NAMESPACE}/pods"
            body = ordinary_pod(arrival.index, arrival.seconds, config.grace_seconds)
            if config.dra:
                as_dra(body["spec"])
        task = asyncio.create_task(_create(http, path, body))
        writes.add(task)
        task.add_done_callback(writes.discard)
    span = time.monotonic() - start
    ledger.mark(time.monotonic())
    if writes:
        await asyncio.gather(*writes)
    deadline = time.monotonic() + config.drain_seconds
    while time.monotonic() < deadline:
        if watcher.done():  # the figures would be wrong: say why
            raise RuntimeError(f"the pods' watch ended: {watcher.exception() if not watcher.cancelled() else 'cancelled'}")
        if len(ledger.gangs) >= config.gangs and all(g.done() >= g.size for g in ledger.gangs.values()):
            break
        await asyncio.sleep(0.25)
    return span


async def _create(http: Any, path: str, body: dict[str, Any]) -> None:
    async with http.post(path, json=body) as response:
        if response.status >= 300:
            raise RuntimeError(f"creating {body['metadata']['name']}: {response.status} {await response.text()}")


async def _watch(http: Any, ledger: Ledger) -> None:
    """Every pod event, stamped with the monotonic time it arrived, into the ledger; a watch the
    server ends (its timeout) is resumed from the last resourceVersion seen, as an informer does."""
    import aiohttp

    version: str | None = None
    while True:
        params = {"watch": "1", "timeoutSeconds": "3600"}
        if version is not None:
            params["resourceVersion"] = version
        async with http.get(f"/api/v1/namespaces/{NAMESPACE}/pods", params=params,
                            timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as response:
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    ledger.observe(time.monotonic(), event["type"], event["object"])
                    version = (event["object"].get("metadata") or {}).get("resourceVersion") or version
