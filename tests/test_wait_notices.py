"""A waiting gang is logged and evented when its wait changes in kind, not when a count in it
moves; repeats fold into one Event (client-go's aggregation); a client that hangs up mid-request
is one DEBUG line in kubesim."""

from __future__ import annotations

import asyncio
import logging

from kubernetes_asyncio import client

from ganggate.controller.config import ControllerConfig
from ganggate.controller.reporting.events import COMBINED, EventRecorder, PodRef, WaitNotifier
from ganggate.controller.round.loop import Controller
from ganggate.core.state.outcome import Waiting
from ganggate.core.state.pods import PodInfo
from ganggate.core.state.snapshot import make_node, make_pod
from ganggate.sim import Simulator
from tests.controller_support import create_pods, gang_pod, list_events

FLIPS = ["needs 3 pods of 8 GPUs each; the free GPUs have room for 1",
         "needs 3 pods of 8 GPUs each; the free GPUs have room for 2",
         "needs 8 nvidia.com/gpu on one node; the largest free is 3"]


def _pods(n: int) -> list[PodInfo]:
    return [PodInfo.from_pod(make_pod(f"p{i}", uid=f"u{i}", created=f"2026-01-01T00:00:0{i}Z")) for i in range(n)]


def test_a_count_that_moves_is_no_change_and_repeats_fold_into_the_first_pods_event() -> None:
    notifier = WaitNotifier(repeat_seconds=300, aggregate_seconds=30)
    key, pods = ("ml", "job"), _pods(3)
    first = notifier.tell(key, "GangUnschedulable", FLIPS[0], pods, 0, "room")
    assert first.changed and len(first.pods) == 3
    told = [notifier.tell(key, "GangUnschedulable", FLIPS[t % 3], pods, t, "room") for t in range(1, 100)]
    assert not any(n.changed for n in told)  # never logged again at INFO/WARNING
    sent = [t for t, n in enumerate(told, 1) if n.pods]  # folded: every 30 s at most, on the first pod only
    assert len(sent) == 3 and all(later - earlier >= 30 for earlier, later in zip([0, *sent], sent, strict=False))
    assert all([p.name for p in n.pods] == ["p0"] for n in told if n.pods)
    other = notifier.tell(key, "GangUnschedulable", "0/2 nodes are available: 2 node(s) were not ready", pods, 100,
                          "nodes")
    assert other.changed and [p.name for p in other.pods] == ["p0"]
    never = notifier.tell(key, "GangCannotFit", "needs 3 pods ...", pods, 101, "never:cluster-size")
    assert never.changed and len(never.pods) == 3


def test_the_controller_logs_a_flipping_wait_once(caplog) -> None:
    async def main() -> list[str]:
        async with client.ApiClient() as api:
            controller = Controller(api, ControllerConfig(leader_election=False))
            controller.state.reset([make_node("n0"), make_node("n1")],
                                   [make_pod(f"job-{i}", namespace="ml", gang="job", pod_num=3, gpus=8) for i in range(3)])
            with caplog.at_level(logging.DEBUG, logger="ganggate.controller"):
                for t in range(200):
                    controller._report_waiting([Waiting(("ml", "job"), "GangUnschedulable", FLIPS[t % 3], "room")], t)
                controller._report_waiting([Waiting(("ml", "job"), "GangCannotFit", "needs more",
                                                    "never:cluster-size")], 200)
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]

    lines = asyncio.run(main())
    assert lines == [f"GangUnschedulable ml/job: {FLIPS[0]}", "GangCannotFit ml/job: needs more"]


async def test_an_event_whose_message_keeps_moving_says_it_combines_similar_ones() -> None:
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        async with sim.api_client() as api:
            core = client.CoreV1Api(api)
            (pod,) = await create_pods(core, [gang_pod("w-0", "g", 2)])
            recorder = EventRecorder(core)
            for i in range(12):
                await recorder.send(PodRef.from_pod(pod), "GangUnschedulable", f"room for {i}")
            (event,) = [e for e in await list_events(core) if e["reason"] == "GangUnschedulable"]
            assert event["count"] == 12
            assert event["message"] == f"{COMBINED}room for 11"


async def test_a_client_that_hangs_up_mid_request_is_one_debug_line(caplog) -> None:
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        host, port = sim.url.removeprefix("http://").split(":")
        with caplog.at_level(logging.DEBUG):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"kind\":")
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()
            for _ in range(100):  # until the server has seen the hang-up
                if any("hung up" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.02)
        hung = [r for r in caplog.records if "hung up" in r.getMessage()]
        assert len(hung) == 1 and hung[0].levelno == logging.DEBUG
        assert "POST /api/v1/namespaces/default/pods" in hung[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

