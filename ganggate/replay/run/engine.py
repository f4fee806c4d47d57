"""Run a job trace on kubesim over simulated time, through the real webhook and controller.

Time moves only when the engine says so (`ManualClock`, shared with kubesim's kubelet and API
server, and the gate controller's clock through ganggate.replay.run.stack.SimulatedClock): at each
step it finishes the jobs due, applies cluster events (a node added), submits the jobs due,
waits until the cluster has settled, records a sample, then jumps to the next event (a controller deadline is
one: its bind timeouts, gang timeouts and
starvation hold-back fire in simulated time). The run
stops when nothing can happen any more: nothing running and nothing left to arrive; jobs that
never completed by then are deadlocked.

A distributed job computes only once every rank has joined (torch.distributed rendezvous,
MPI_Init): a job's run time starts when its last pod is Running. kubesim's kubelet would start
each pod's `kubesim.io/run-seconds` on its own, so the engine finishes a job's pods itself, by
writing the Succeeded status the kubelet writes (ganggate.sim.kubelet.kubelet.succeeded_status) through the
pods/status subresource. What a replay runs and returns (Scenario, RunResult...) is in
ganggate.replay.run.scenario.

Why this module is long: it is the replay's one loop, and the steps of an instant (act, hold the
deciders, settle, observe) share its state; each step is a method of a few lines.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from ganggate.replay.results.metrics import JobRecord, Sample, split_gpus, summarise
from ganggate.replay.run.disruptions import Disruptor
from ganggate.replay.run.observe import (
    JOB_LABEL,
    PodView,
    allocated_devices,
    background_pod,
    event_rows,
    gpu_claim_template,
    job_nodes,
    pod_manifest,
    progress,
)
from ganggate.replay.run.owners import as_rv, create_job, job_controller_busy
from ganggate.replay.run.podtable import PodTable
from ganggate.replay.run.scenario import (  # the types also re-exported here, where callers found them first
    Background as Background,
)
from ganggate.replay.run.scenario import (
    NodeEvent as NodeEvent,
)
from ganggate.replay.run.scenario import (
    NodeSpec as NodeSpec,
)
from ganggate.replay.run.scenario import (
    ReplayError,
    RunResult,
    Scenario,
    StepView,
    check_fits,
)
from ganggate.replay.run.scenario import (
    uniform_nodes as uniform_nodes,
)
from ganggate.replay.run.stack import MODES, SimulatedClock, Stack, start_gate
from ganggate.replay.traces.format import Job

NAMESPACE = "default"
#: kubesim's store keys of the DRA kinds a --dra replay waits on (resource.k8s.io/v1).
CLAIMS = "resourceclaims.resource.k8s.io"
SLICES = "resourceslices.resource.k8s.io"
DRA_KEYS = (CLAIMS, SLICES, "deviceclasses.resource.k8s.io", "resourceclaimtemplates.resource.k8s.io")
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

class _Engine:
    def __init__(self, scenario: Scenario, mode: str, on_step: Callable[[StepView], Any] | None,
                 settle_timeout: float, exact_webhook: bool = True, controller_settings: dict | None = None,
                 gang_timeout_seconds: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.scenario = scenario
        self.mode = mode
        self.on_step = on_step
        self.settle_timeout = settle_timeout
        self.jobs = {j.job_id: j for j in scenario.jobs}
        self.records: dict[str, JobRecord] = {}
        self.samples: list[Sample] = []
        self.finishes: list[tuple[float, str, int]] = []  # (when, job, run number)
        self.runs: dict[str, int] = {}  # job -> how many times it started
        self.active: dict[str, frozenset[str]] = {}  # jobs computing now -> the pods they started with
        self.interruptions = 0
        self.namespace = NAMESPACE
        self.owners = bool(scenario.owners or scenario.disruptions)
        self.disruptor = Disruptor(self, scenario.disruptions)
        self.steps = 0
        self.exact_webhook = exact_webhook
        self.controller_settings = dict(controller_settings or {})
        self.gang_timeout_seconds = gang_timeout_seconds
        self._table: PodTable = None  # type: ignore[assignment]  # made with the simulator, in run()
        self._starting = 0
        self.autoscaler: Any = None  # kubesim's cluster-autoscaler, with the scenario's node groups
        self.provisioned: list[tuple[float, int]] = []  # (time, GPUs of all nodes) from then on
        self._last_progress = 0.0
        self.dra = scenario.dra_product is not None  # GPUs as DRA devices, claimed through templates
        self._templates: set[int] = set()  # GPU counts whose ResourceClaimTemplate exists
        self._dra_revision = -1  # the store revision _dra_rv has read the change log up to
        self._dra_rv_seen: dict[str, int] = dict.fromkeys(DRA_KEYS, 0)  # store key -> its last change's rv

    # ---- the loop ----------------------------------------------------------------------

    async def run(self) -> RunResult:
        from ganggate.sim import Simulator
        from ganggate.sim.clock import ManualClock
        from ganggate.sim.kubelet.kubelet import Kubelet
        from ganggate.sim.scheduler.scheduler import Scheduler

        started = time.monotonic()
        first = min([j.submit_time for j in self.scenario.jobs] + [0.0])
        clock = ManualClock(start=first)
        # With DRA the GPU driver stand-in publishes each node's ResourceSlice and the DeviceClass, and
        # kube-controller-manager's resourceclaim controller makes each pod's claim from its template.
        sim = Simulator(nodes=0, scheduler=False, kubelet=False, clock=clock, dra_product=self.scenario.dra_product)
        await sim.start()
        self._table = PodTable(sim.store)
        stack = Stack(mode=self.mode, sim=sim, topology_levels=tuple(self.scenario.topology_levels),
                      clock=SimulatedClock(clock), settings=self.controller_settings)
        tasks: list[asyncio.Task] = []
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                        timeout=aiohttp.ClientTimeout(total=60))
        try:
            for node in self.scenario.nodes:
                await sim.add_node(node.name, cpu=node.cpu, memory=node.memory, gpus=node.gpus, labels=dict(node.labels),
                                   dra_product=sim.dra_product)
            await self._await_slices(sim)
            # Backoff and the unschedulable flush are wall-clock waits in kube-scheduler
            # (pkg/scheduler/backend/queue/scheduling_queue.go): seconds that simulated time
            # compresses away. Without them a retry follows the cluster event that allows it.
            self.scheduler = Scheduler(sim.url, pod_initial_backoff_seconds=0.0, pod_max_backoff_seconds=0.0,
                                       unschedulable_flush_seconds=1e9, feature_gates=sim.scheduler_feature_gates)
            self.kubelet = Kubelet(sim.url, clock=clock)
            tasks = [asyncio.create_task(self.scheduler.run(), name="replay-scheduler"),
                     asyncio.create_task(self.kubelet.run(), name="replay-kubelet")]
            if self.scenario.node_groups:
                tasks.append(await self._start_autoscaler(sim, clock))
            if self.mode != "none":
                stack.api = sim.api_client()
                await start_gate(stack, debounce=0.005, match_conditions=self.exact_webhook)
            self.sim, self.stack, self.session, self.tasks = sim, stack, session, tasks
            for pod in self.scenario.background:
                await self._create(background_pod(pod, NAMESPACE))
            await self.disruptor.start()
            await self._settle()  # what runs before the trace starts is in place first
            arrivals = sorted(self.scenario.jobs, key=lambda j: j.submit_time)
            node_events = sorted(self.scenario.node_events, key=lambda e: e.time)
            a = n = 0
            # Every step consumes an arrival, a node event or a job end (two per job at most),
            # or wakes a clock sleeper; the bound only guards against a component that would
            # keep sleeping on the clock for ever.
            max_steps = 4 * (len(arrivals) + len(node_events)) + 1000 + self._autoscaler_steps(arrivals)
            while True:
                if self.steps > max_steps:
                    raise ReplayError(f"the replay did not end within {max_steps} steps")
                now = clock.now()
                events: list[str] = []
                await self._pause()
                while self.finishes and self.finishes[0][0] <= now:
                    _, job_id, run = heapq.heappop(self.finishes)
                    if run == self.runs.get(job_id) and job_id in self.active:
                        await self._finish(job_id)
                        events.append(f"{job_id} finished")
                while n < len(node_events) and node_events[n].time <= now:
                    node = node_events[n].node
                    await sim.add_node(node.name, cpu=node.cpu, memory=node.memory, gpus=node.gpus,
                                       labels=dict(node.labels), dra_product=sim.dra_product)
                    await self._await_slices(sim)
                    events.append(f"node {node.name} added ({node.gpus} GPUs)")
                    n += 1
                events.extend(await self.disruptor.apply_due(now))
                due = []
                while a < len(arrivals) and arrivals[a].submit_time <= now:
                    due.append(arrivals[a])
                    a += 1
                for job in due:
                    await self._submit(job)
                    events.append(f"{job.job_id} submitted ({job.pods} pod{'s' * (job.pods != 1)} x "
                                  f"{job.gpus_per_pod} GPU{'s' * (job.gpus_per_pod != 1)})")
                await self._resume()
                await self._settle()
                self._observe(now, events)
                if self.autoscaler is not None and self._autoscaled_run_is_over(now, events, a < len(arrivals)):
                    break
                candidates = [t for t in (
                    arrivals[a].submit_time if a < len(arrivals) else None,
                    node_events[n].time if n < len(node_events) else None,
                    self.finishes[0][0] if self.finishes else None,
                    clock.next_wakeup(),
                    self.disruptor.next_time(),
                ) if t is not None]
                if not candidates:
                    break
                clock.advance_to(max(min(candidates), now))
            end = clock.now()
            epoch_offset = clock.epoch() - end
            recorded = await self._events()
        finally:
            await session.close()
            await stack.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await sim.stop()
        records = [self.records.get(j.job_id) or JobRecord(j.job_id, j.submit_time, j.gpus)
                   for j in self.scenario.jobs]
        capacity = self.scenario.capacity + sum(e.node.gpus for e in self.scenario.node_events)
        summary = summarise(self.mode, self.samples, records, self.scenario.capacity, end)
        return RunResult(self.mode, self.samples, records, summary, end, capacity, self.steps,
                         time.monotonic() - started, self.interruptions,
                         {**self.disruptor.counts, "refused evictions": self.disruptor.refused_evictions}, recorded,
                         self.provisioned, epoch_offset)

    # ---- an autoscaled cluster (replay/results/autoscaling.py) -----------------------------------

    async def _start_autoscaler(self, sim: Any, clock: Any) -> asyncio.Task:
        """kubesim's cluster-autoscaler on the replay's clock, the groups' minimum nodes in place."""
        from ganggate.sim.autoscaler.autoscaler import Autoscaler

        for group in self.scenario.node_groups:
            for index in range(group.min_size):
                node = group.node(group.node_name(index))
                await sim.add_node(node["metadata"]["name"], cpu=group.cpu, memory=group.memory, gpus=group.gpus,
                                   labels=node["metadata"]["labels"], taints=list(group.taints))
        self.autoscaler = Autoscaler(sim.url, node_groups=list(self.scenario.node_groups), clock=clock,
                                     **self.scenario.autoscaler)
        task = asyncio.create_task(self.autoscaler.run(), name="replay-autoscaler")
        await self.autoscaler.ready.wait()
        return task

    def _autoscaler_steps(self, arrivals: list[Job]) -> int:
        """Steps the autoscaler's scans add: one per scan over the trace and a quiet tail after it."""
        if self.autoscaler is None or not arrivals:
            return 0
        span = arrivals[-1].submit_time - arrivals[0].submit_time + sum(j.run_time for j in arrivals)
        return int(span / self.autoscaler.scan_seconds) + 10 * len(arrivals)

    def _autoscaled_run_is_over(self, now: float, events: list[str], arrivals_left: bool) -> bool:
        """With an autoscaler the clock never runs out of wake-ups (its scans): the run is over once
        every job has arrived, none computes, and nothing has happened for longer than a node takes to
        come and go, so a gang nobody will ever make room for does not keep it going for ever."""
        gpus = sum(int(((s.obj.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu") or 0)
                   for _, s in self.sim.store.iter("nodes"))
        if not self.provisioned or self.provisioned[-1][1] != gpus:
            self.provisioned.append((now, gpus))
            self._last_progress = now
        if events:
            self._last_progress = now
        if arrivals_left or self.active or self.finishes:
            return False
        groups = self.scenario.node_groups
        quiet = self.autoscaler.unneeded_seconds + max(g.delay_seconds for g in groups) + 3 * self.autoscaler.scan_seconds
        return bool(now - self._last_progress > quiet)

    # ---- acting on the cluster ---------------------------------------------------------

    async def _create(self, pod: dict) -> None:
        url = f"{self.sim.url}/api/v1/namespaces/{NAMESPACE}/pods"
        async with self.session.post(url, json=pod) as response:
            body = await response.read()
            if response.status >= 300:
                raise ReplayError(f"creating pod {pod['metadata']['name']}: HTTP {response.status}: "
                                  f"{body[:300].decode(errors='replace')}")

    async def _submit(self, job: Job) -> None:
        self.records[job.job_id] = JobRecord(job.job_id, job.submit_time, job.gpus)
        if self.dra and job.gpus_per_pod and job.gpus_per_pod not in self._templates:
            await self._post(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates",
                             gpu_claim_template(job.gpus_per_pod, NAMESPACE))
            self._templates.add(job.gpus_per_pod)
        if self.owners:
            return await create_job(self.session, self.sim.url, job, NAMESPACE, dra=self.dra)
        await _gather_bounded([self._create(pod_manifest(job, i, NAMESPACE, timeout_seconds=self.gang_timeout_seconds,
                                                         dra=self.dra))
                               for i in range(job.pods)])

    async def _post(self, path: str, body: dict) -> None:
        async with self.session.post(self.sim.url + path, json=body) as response:
            text = await response.read()
            if response.status >= 300:
                raise ReplayError(f"creating {body['kind']} {body['metadata']['name']}: HTTP {response.status}: "
                                  f"{text[:300].decode(errors='replace')}")

    async def _await_slices(self, sim: Any) -> None:
        """With DRA: wait (bounded) until the GPU driver stand-in has published the DeviceClass and
        a ResourceSlice for every node with GPUs, so that no pod is judged before its node's devices exist."""
        if not self.dra:
            return
        deadline = time.monotonic() + self.settle_timeout
        while time.monotonic() < deadline:
            published = {(s.obj.get("spec") or {}).get("nodeName") for _, s in sim.store.iter(SLICES)}
            wanted = {s.obj["metadata"]["name"] for _, s in sim.store.iter("nodes")
                      if int((s.obj["metadata"].get("labels") or {}).get("nvidia.com/gpu.count") or 0) > 0}
            if wanted <= published and any(True for _ in sim.store.iter("deviceclasses.resource.k8s.io")):
                return
            await asyncio.sleep(0.005)
        raise ReplayError("the GPU DRA driver did not publish every node's ResourceSlice in time")

    async def _finish(self, job_id: str) -> None:
        """The job's processes exit 0: write Succeeded as the kubelet would."""
        from ganggate.sim.kubelet.kubelet import now_rfc3339, succeeded_status

        pods = [s.obj for _, s in self.sim.store.iter("pods", NAMESPACE)
                if (s.obj["metadata"].get("labels") or {}).get(JOB_LABEL) == job_id
                and (s.obj.get("status") or {}).get("phase") == "Running"]

        async def finish(pod: dict) -> None:
            name = pod["metadata"]["name"]
            url = f"{self.sim.url}/api/v1/namespaces/{NAMESPACE}/pods/{name}/status"
            async with self.session.patch(url, json=succeeded_status(pod, now_rfc3339(self.kubelet.clock.epoch())),
                                          headers={"Content-Type": STRATEGIC_MERGE_PATCH}) as response:
                body = await response.read()
                if response.status >= 300:
                    raise ReplayError(f"finishing pod {name}: HTTP {response.status}: {body[:300]!r}")

        await _gather_bounded([finish(p) for p in pods])

    async def _events(self) -> list[tuple[str, str, str, int]]:
        """The cluster's Events once the controller has sent those it queued (bounded wait):
        queue.join() also waits for the last one taken off the queue and still being sent."""
        controller = self.stack.controller
        if controller is not None:
            try:
                async with asyncio.timeout(self.settle_timeout):
                    await controller.events.queue.join()
            except TimeoutError:
                pass
        return event_rows(s.obj for _, s in self.sim.store.iter("events", NAMESPACE))

    # ---- one instant at a time ---------------------------------------------------------
    # Changes at one simulated instant are simultaneous, but they reach the API server one
    # request at a time. So that the scheduler and the controller decide on all of them
    # together (and a replay is the same every time), their decisions are held while the
    # engine applies an instant's changes, and resumed once both have seen every change.

    async def _pause(self) -> None:
        self.scheduler.hold()
        if self.stack.controller is not None:
            self.stack.controller.hold()

    async def _resume(self) -> None:
        deadline = time.monotonic() + self.settle_timeout
        while time.monotonic() < deadline:
            views, max_rv, _ = self._pods()
            # With DRA a finished pod's devices are free once kube-controller-manager has released its
            # claims: part of the instant's changes, so the deciders see them too before they resume.
            if self._observed(max_rv, self._node_rv()) and not (self.dra and self._dra_busy(views)):
                break
            await asyncio.sleep(0.002)
        else:
            raise ReplayError("the scheduler and controller did not see this step's changes in time")
        self.scheduler.resume()
        if self.stack.controller is not None:
            self.stack.controller.resume()

    def _observed(self, max_rv: int, node_rv: int) -> bool:
        """True when the scheduler and the controller have seen every pod and node change."""
        sched = self.scheduler
        if not sched.synced or sched.pods_resource_version < max_rv:
            return False
        names = [s.obj["metadata"]["name"] for _, s in self.sim.store.iter("nodes")]
        if any(name not in sched.cache.index for name in names):
            return False
        controller = self.stack.controller
        if controller is not None:
            if not controller.synced:
                return False
            if as_rv(controller.pods.resource_version) < max_rv or as_rv(controller.nodes.resource_version) < node_rv:
                return False
        return True

    # ---- watching it settle ------------------------------------------------------------

    def _pods(self) -> tuple[list[PodView], int, int]:
        """The replay's pods in key order, the highest pod resourceVersion and the pod count
        (ganggate.replay.run.podtable: kept from the store's change log, not read whole each time)."""
        table = self._table
        table.sync()
        self._starting = table.starting
        return table.listed(), table.max_rv, table.count

    def _node_rv(self) -> int:
        return max((int(s.obj["metadata"]["resourceVersion"]) for _, s in self.sim.store.iter("nodes")), default=0)

    def _busy_components(self, views: list[PodView], max_rv: int, node_rv: int) -> str | None:
        """Which component still has work at this instant, or None when all are idle."""
        for task in self.tasks:
            if task.done():
                failure = None if task.cancelled() else task.exception()
                raise ReplayError(f"{task.get_name()} stopped: {failure!r}")
        if self._starting:  # bound pods the kubelet has not started yet (counted by _pods)
            return "kubelet"
        sched = self.scheduler
        if not sched.synced:
            return "scheduler (syncing)"
        if sched.pods_resource_version < max_rv:
            return "scheduler (watch)"
        if sched.busy:
            return "scheduler"
        if self.kubelet.pods_resource_version < self._table.max_bound_rv:  # (it watches bound pods only)
            return "kubelet (watch)"
        if self.owners and (busy := job_controller_busy(self.sim, max_rv)):
            return busy
        if self.autoscaler is not None and not self.autoscaler.idle:
            return "autoscaler"
        controller = self.stack.controller
        if controller is not None:
            failed = self.stack.controller_failed()
            if failed is not None:
                raise ReplayError(f"the gate controller stopped: {failed!r}")
            if not controller.synced:
                return "controller (syncing)"
            if as_rv(controller.pods.resource_version) < max_rv or as_rv(controller.nodes.resource_version) < node_rv:
                return "controller (watch)"
            if not controller.idle:
                return "controller"
        if self.dra and (busy := self._dra_busy(views)):
            return busy
        return None

    async def _settle(self) -> None:
        """Wait until no component has anything left to do at this instant (two checks agree)."""
        deadline = time.monotonic() + self.settle_timeout
        last: tuple[int, int, int] | None = None
        reason: str | None = "not checked"
        while time.monotonic() < deadline:
            await asyncio.sleep(0.002)
            views, max_rv, count = self._pods()
            reason = self._busy_components(views, max_rv, self._node_rv())
            signature = (count, max_rv, self._dra_rv() if self.dra else 0)
            if reason is None and signature == last:
                return
            last = signature if reason is None else None
        raise ReplayError(f"the cluster did not settle within {self.settle_timeout:g}s (waiting for {reason})")

    # ---- DRA: claims made, allocated and released ------------------------------------------

    def _dra_rv(self, key: str | None = None) -> int:
        """The resourceVersion of the last change (deletions too) to a DRA object of store key `key`
        (None: of any DRA kind), from the store's change log (its live objects when the log no
        longer reaches back)."""
        store = self.sim.store
        revision = store.resource_version
        seen = self._dra_rv_seen
        if revision != self._dra_revision:
            hub = store.hub
            if self._dra_revision < 0 or hub.floor > self._dra_revision:
                for kind in DRA_KEYS:
                    for _, stored in store.iter(kind):
                        seen[kind] = max(seen[kind], int(stored.obj["metadata"]["resourceVersion"]))
            else:
                for event in reversed(hub.history):
                    if event.rv <= self._dra_revision:
                        break
                    if event.key in seen:
                        seen[event.key] = max(seen[event.key], event.rv)
            self._dra_revision = revision
        return max(seen.values()) if key is None else seen[key]

    def _dra_busy(self, views: list[PodView]) -> str | None:
        """What kubesim's resourceclaim controller or the scheduler's DRA plugin still has to do with
        claims at this instant: a claim to make for a pod, a done pod's claim to release, a claim
        change the scheduler has not seen."""
        if any(v.awaiting_claims for v in views):
            return "resourceclaim controller (claims to make)"
        finished = {v.name for v in views if v.finished}
        claims = {f"{ns}/{name}": s.obj for (ns, name), s in self.sim.store.iter(CLAIMS)}
        for claim in claims.values():
            status = claim.get("status") or {}
            if any(r.get("name") in finished for r in status.get("reservedFor") or []):
                return "resourceclaim controller (claims to release)"
            if not status.get("reservedFor") and any(o.get("kind") == "Pod" and o.get("name") in finished
                                                     for o in claim["metadata"].get("ownerReferences") or []):
                return "resourceclaim controller (claims to delete)"
        plugin = self.scheduler.dra
        if plugin is not None:
            seen = {k: c["metadata"]["resourceVersion"] for k, c in plugin.claims.items()}
            if seen != {k: c["metadata"]["resourceVersion"] for k, c in claims.items()}:
                return "scheduler (DRA claims watch)"
        controller = self.stack.controller
        if controller is not None and any(as_rv(i.resource_version) < self._dra_rv(f"{i.kind}.resource.k8s.io")
                                          for i in controller.dra.informers):
            return "controller (DRA watch)"
        return None

    def _observe(self, now: float, events: list[str]) -> None:
        views, _, _ = self._pods()
        submitted = {k: v for k, v in self.jobs.items() if k in self.records}
        # With DRA a pod's GPUs are the devices allocated to its claims (not its nvidia.com/gpu request).
        devices = allocated_devices(s.obj for _, s in self.sim.store.iter(CLAIMS)) if self.dra else None
        current = progress(submitted, views, devices)
        finished_counts: dict[str, int] = {}
        running_pods: dict[str, set[str]] = {}
        for p in views:
            if p.running:
                running_pods.setdefault(p.job_id, set()).add(p.name)
            if p.phase == "Succeeded":
                finished_counts[p.job_id] = finished_counts.get(p.job_id, 0) + 1
        running = waiting = finished = 0
        for job_id, record in self.records.items():
            job = self.jobs[job_id]
            state = current.get(job_id)
            if (job_id not in self.active and record.finished_at is None and state is not None
                    and state.all_running):
                if record.started_at is None:  # the queueing delay runs to the first start
                    record = self.records[job_id] = replace(record, started_at=now, nodes=job_nodes(views, job_id))
                self.active[job_id] = frozenset(running_pods.get(job_id, ()))
                self.runs[job_id] = run = self.runs.get(job_id, 0) + 1
                heapq.heappush(self.finishes, (now + job.run_time, job_id, run))
            if record.finished_at is None and finished_counts.get(job_id, 0) >= job.pods:
                record = self.records[job_id] = replace(record, finished_at=now)
                self.active.pop(job_id, None)
            if job_id in self.active and self.active[job_id] != running_pods.get(job_id, set()):
                # A pod lost mid-run (even if replaced within the instant): the run is lost; it restarts when whole.
                del self.active[job_id]
                self.interruptions += 1
                if state is not None and state.all_running:
                    self.active[job_id] = frozenset(running_pods[job_id])
                    self.runs[job_id] += 1
                    heapq.heappush(self.finishes, (now + job.run_time, job_id, self.runs[job_id]))
            if record.finished_at is not None:
                finished += 1
            elif job_id in self.active:
                running += 1
            else:
                waiting += 1
        busy, held = split_gpus(current.values())
        sample = Sample(now, busy, held, running, waiting, finished)
        self.samples.append(sample)
        self.steps += 1
        if self.on_step is not None:
            self.on_step(StepView(self.mode, now, sample, current, dict(self.records), self.scenario.capacity,
                                  events))


async def _gather_bounded(coros: list[Awaitable[Any]], limit: int = 32) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[Any]) -> Any:
        async with semaphore:
            return await coro

    await asyncio.gather(*(one(c) for c in coros))


async def run_scenario(scenario: Scenario, mode: str, *, on_step: Callable[[StepView], Any] | None = None,
                       settle_timeout: float = 60.0, exact_webhook: bool = True,
                       controller_settings: dict | None = None, gang_timeout_seconds: int | None = None) -> RunResult:
    """Replay the scenario in one admission mode (`none`, `count` or `ganggate`).

    controller_settings override the gate controller's ControllerConfig (say starvation_seconds);
    gang_timeout_seconds gives every gang that group-timeout-seconds.

    `exact_webhook=False` registers the webhook without deploy/'s matchConditions. Every pod
    of a trace carries the gang annotations, so the conditions always hold and the same
    requests reach the webhook; only kubesim's (interpreted, slow) CEL evaluation is saved.
    """
    check_fits(scenario)
    return await _Engine(scenario, mode, on_step, settle_timeout, exact_webhook, controller_settings,
                         gang_timeout_seconds).run()


async def run_modes(scenario: Scenario, modes: Sequence[str], **kwargs: Any) -> dict[str, RunResult]:
    """Replay the scenario in each mode in turn, each on a fresh cluster."""
    return {mode: await run_scenario(scenario, mode, **kwargs) for mode in modes}
