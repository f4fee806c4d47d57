"""Disruptions injected into a replay (#8, "the cluster fights back"), on the replay's manual clock.

Kinds, each what a cluster does to running gangs:

- `preempt`: a high-priority ordinary pod (PriorityClass `replay-urgent`, value 1,000,000) of
  `gpus` GPUs arrives; the scheduler preempts to place it; it runs `seconds` from when it starts
  (kubesim's kubelet ends it, `kubesim.io/run-seconds`), however long it waited to be placed;
- `drain`: `kubectl drain` of `node`: cordon it, evict each of its pods through the eviction API
  (a refusal, 429 from a disruption budget, is retried every 5 s as kubectl does) for `seconds`,
  then uncordon it (the node comes back from maintenance);
- `node-failure`: `node` goes NotReady (its NoExecute taints evict its pods after their
  tolerationSeconds) and comes back Ready `seconds` later;
- `pod-failure`: one running pod of a trace job exits 1 (status Failed, written as the kubelet
  writes it), chosen by `pick` among the running pods in job and completion-index order.

`schedule` draws a disruption schedule from one `random.Random(seed)`, so a seed gives the same
schedule every time.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Sequence
from typing import Any

from ganggate.core.fit.resources import GPU
from ganggate.replay.run.observe import JOB_LABEL
from ganggate.replay.run.scenario import Disruption, ReplayError
from ganggate.sim.kubelet.status import RUN_SECONDS_ANNOTATION

KINDS = ("preempt", "drain", "node-failure", "pod-failure")
URGENT_CLASS = "replay-urgent"
URGENT_LABEL = "replay.ganggate.io/urgent"
EVICTION_RETRY_SECONDS = 5.0  # kubectl drain retries a refused eviction every 5 s
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def schedule(seed: int, horizon: float, nodes: Sequence[str], *, preempt: int = 0, drain: int = 0,
             node_failure: int = 0, pod_failure: int = 0, gpus: int = 8,
             seconds: float = 600.0) -> list[Disruption]:
    """A deterministic schedule: each kind's count at uniform times in [0, horizon)."""
    rng = random.Random(seed)
    out: list[Disruption] = []
    for kind, count in (("preempt", preempt), ("drain", drain), ("node-failure", node_failure),
                        ("pod-failure", pod_failure)):
        for _ in range(count):
            out.append(Disruption(round(rng.uniform(0, horizon), 1), kind, rng.choice(list(nodes)), seconds, gpus,
                                  rng.randrange(1 << 30)))
    return sorted(out, key=lambda d: (d.time, d.kind, d.node))


def parse(text: str) -> dict[str, int]:
    """`preempt=4,drain=2,node-failure=2,pod-failure=6` -> counts per kind (bad input: ValueError)."""
    counts: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, number = part.partition("=")
        if kind not in KINDS or not number.isdigit():
            raise ValueError(f"--disruptions: {part!r} is not KIND=N with KIND one of {', '.join(KINDS)}")
        counts[kind] = counts.get(kind, 0) + int(number)
    return counts


class Disruptor:
    """Applies a schedule to a running replay engine (its sim, session and clock)."""

    def __init__(self, engine: Any, disruptions: Sequence[Disruption]) -> None:
        self.engine = engine
        self._heap: list[tuple[float, int, str, Any]] = []
        self._order = itertools.count()
        self.counts: dict[str, int] = {}
        self.refused_evictions = 0
        for d in disruptions:
            self._push(d.time, "start", d)

    def _push(self, when: float, action: str, payload: Any) -> None:
        heapq.heappush(self._heap, (when, next(self._order), action, payload))

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    async def start(self) -> None:
        if any(p.kind == "preempt" for _, _, a, p in self._heap if a == "start"):
            await self._call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": URGENT_CLASS},
                "value": 1000000, "description": "replay: a high-priority ordinary pod"})

    async def apply_due(self, now: float) -> list[str]:
        """Apply everything due by `now`; what happened, for the step's events."""
        events: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            _, _, action, payload = heapq.heappop(self._heap)
            events.extend(await getattr(self, "_" + action.replace("-", "_"))(now, payload))
        return events

    # ---- the actions -------------------------------------------------------------------

    async def _start(self, now: float, d: Disruption) -> list[str]:
        self.counts[d.kind] = self.counts.get(d.kind, 0) + 1
        if d.kind == "preempt":
            name = f"urgent-{self.counts['preempt']}"
            await self._call("POST", f"/api/v1/namespaces/{self.engine.namespace}/pods",
                             urgent_pod(name, d.gpus, d.seconds))
        elif d.kind == "drain":
            await self._cordon(d.node, True)
            await self._evict(now, (d.node, now + d.seconds))
            self._push(now + d.seconds, "uncordon", d.node)
        elif d.kind == "node-failure":
            await self.engine.sim.set_node_ready(d.node, "False")
            self._push(now + d.seconds, "recover", d.node)
        else:
            running = sorted((s.obj for _, s in self.engine.sim.store.iter("pods", self.engine.namespace)
                              if (s.obj["metadata"].get("labels") or {}).get(JOB_LABEL)
                              and (s.obj.get("status") or {}).get("phase") == "Running"
                              and not s.obj["metadata"].get("deletionTimestamp")),
                             key=_job_order)
            if not running:
                return ["pod failure: no pod running"]
            pod = running[d.pick % len(running)]
            await self._status(pod, failed_status(pod))
            return [f"pod {pod['metadata']['name']} failed"]
        return [d.describe()]

    async def _evict(self, now: float, target: tuple[str, float]) -> list[str]:
        node, until = target
        refused = 0
        for pod in self.engine.sim.store.pods_on_node(node):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod["metadata"].get(
                    "deletionTimestamp"):
                continue
            meta = pod["metadata"]
            status = await self._call("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction",
                                      {"apiVersion": "policy/v1", "kind": "Eviction",
                                       "metadata": {"name": meta["name"], "namespace": meta["namespace"]}},
                                      ok=(200, 201, 404, 429))
            refused += status == 429
        self.refused_evictions += refused
        if refused and now + EVICTION_RETRY_SECONDS < until:
            self._push(now + EVICTION_RETRY_SECONDS, "evict", target)
        return [f"drain of {node}: {refused} eviction(s) refused by a disruption budget"] if refused else []

    async def _uncordon(self, now: float, node: str) -> list[str]:
        await self._cordon(node, False)
        return [f"{node} uncordoned"]

    async def _recover(self, now: float, node: str) -> list[str]:
        await self.engine.sim.set_node_ready(node, "True")
        return [f"{node} Ready again"]

    # ---- HTTP --------------------------------------------------------------------------

    async def _cordon(self, node: str, on: bool) -> None:
        await self._call("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": on or None}},
                         content_type=MERGE_PATCH)

    async def _status(self, pod: dict, patch: dict) -> None:
        meta = pod["metadata"]
        await self._call("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", patch,
                         content_type=STRATEGIC_MERGE_PATCH, ok=(200, 404))

    async def _call(self, method: str, path: str, body: Any, *, content_type: str = "application/json",
                    ok: tuple[int, ...] = (200, 201)) -> int:
        async with self.engine.session.request(method, self.engine.sim.url + path, json=body,
                                               headers={"Content-Type": content_type}) as response:
            text = await response.read()
            if response.status not in ok:
                raise ReplayError(f"{method} {path}: HTTP {response.status}: {text[:300].decode(errors='replace')}")
            return int(response.status)


def _job_order(pod: dict) -> tuple[str, int, str]:
    """Job, then completion index: the same order every run (a Job's pod names end in random letters)."""
    meta = pod["metadata"]
    index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", "0")
    return (meta["labels"][JOB_LABEL], int(index) if index.isdigit() else 0, meta["name"])


def urgent_pod(name: str, gpus: int, seconds: float) -> dict:
    """A high-priority ordinary pod (no gang): what arrives and preempts, and runs `seconds` once started.

    Its run is timed by the kubelet from the pod's start (`kubesim.io/run-seconds`), not from its
    creation: a pod still Pending when `seconds` had passed since it arrived (waiting for a node
    to be uncordoned or to come back, or for its victims to go) used to miss its end and then run
    for ever, holding its GPUs, and the trace jobs that needed them never finished.
    """
    resources = {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {URGENT_LABEL: "true"},
                         "annotations": {RUN_SECONDS_ANNOTATION: f"{seconds:g}"}},
            "spec": {"priorityClassName": URGENT_CLASS, "terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "urgent",
                                     "resources": {"requests": resources, "limits": {GPU: str(gpus)}}}]}}


def failed_status(pod: dict) -> dict:
    """The status patch of a pod whose container exited 1 (phase Failed), as the kubelet writes it."""
    from ganggate.sim.kubelet.kubelet import now_rfc3339

    when = now_rfc3339()
    started = (pod.get("status") or {}).get("startTime") or when
    return {"status": {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed", "lastProbeTime": None,
                        "lastTransitionTime": when}],
        "containerStatuses": [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": False,
                               "started": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started,
                                                        "finishedAt": when}}}
                              for c in (pod.get("spec") or {}).get("containers") or []]}}
