"""Events through kubesim's API: repeats of a reason on a pod aggregate into one Event whose count grows,
also across a controller restart; the rate limit drops what does not fit in the queue."""

from __future__ import annotations

from kubernetes_asyncio import client

from ganggate.controller.reporting.events import EventRecorder
from ganggate.controller.reporting.metrics import Metrics
from ganggate.sim import Simulator
from tests.controller_support import create_pods, gang_pod, list_events


async def test_repeats_aggregate_into_one_event_also_after_a_restart():
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        async with sim.api_client() as api:
            core = client.CoreV1Api(api)
            (pod,) = await create_pods(core, [gang_pod("w-0", "g", 2)])
            first = EventRecorder(core)
            await first.send(first_ref(pod), "GangWaiting", "1 of 2 pods exist")
            await first.send(first_ref(pod), "GangWaiting", "1 of 2 pods exist")
            await first.send(first_ref(pod), "GangUnschedulable", "needs 2 pods of 1 GPU")
            restarted = EventRecorder(core)  # knows nothing of the Events already sent
            await restarted.send(first_ref(pod), "GangWaiting", "still 1 of 2 pods exist")
            events = {e["reason"]: e for e in await list_events(core)}
            assert set(events) == {"GangWaiting", "GangUnschedulable"}
            waiting = events["GangWaiting"]
            assert waiting["count"] == 3 and waiting["message"] == "still 1 of 2 pods exist"
            assert waiting["involvedObject"]["name"] == "w-0" and waiting["involvedObject"]["uid"] == pod["metadata"]["uid"]
            assert waiting["type"] == "Normal" and events["GangUnschedulable"]["type"] == "Warning"
            assert waiting["source"]["component"] == "ganggate-controller"


def first_ref(pod):
    from ganggate.controller.reporting.events import PodRef

    return PodRef.from_pod(pod)


async def test_a_full_queue_drops_events_and_counts_them():
    metrics = Metrics()
    recorder = EventRecorder(core_api=None, queue_size=2, metrics=metrics)
    pod = {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}}
    for i in range(5):
        recorder.emit(pod, "GangReleased", f"message {i}")
    assert recorder.queue.qsize() == 2
    assert "ganggate_events_dropped_total 3.0" in metrics.render().decode()
