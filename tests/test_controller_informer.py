"""The informer against kubesim over HTTP: paged lists, watch from the list's resourceVersion,
resuming after a cut watch, relisting after a 410."""

from __future__ import annotations

from kubernetes_asyncio import client

from ganggate.controller.round.informer import Informer
from ganggate.sim import Simulator
from tests.async_support import running
from tests.controller_support import create_pods, gang_pod, wait_for


async def _true(value):
    return value


async def test_pages_then_watches_then_resumes_and_relists():
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        async with sim.api_client() as api:
            core = client.CoreV1Api(api)
            await create_pods(core, [gang_pod(f"p-{i}", None, None, gpus=0) for i in range(7)])
            lists, events, pages = [], [], []

            async def list_pods(**kwargs):
                if not kwargs.get("watch"):
                    pages.append(kwargs.get("_continue"))
                return await core.list_pod_for_all_namespaces(**kwargs)

            informer = Informer(list_pods, "pods", page_size=2,
                                on_list=lambda items: lists.append(len(items)),
                                on_event=lambda kind, pod: events.append((kind, pod["metadata"]["name"])),
                                backoff_base=0.01)
            async with running(informer.run()):
                await wait_for(lambda: _true(informer.synced), what="synced")
                assert lists == [7] and len(informer.store) == 7
                assert len(pages) == 4 and pages[0] is None and all(pages[1:])  # four pages of at most 2

                await core.delete_namespaced_pod("p-0", "default", grace_period_seconds=0)
                await create_pods(core, [gang_pod("p-7", None, None, gpus=0)])
                await wait_for(lambda: _true("default/p-7" in informer.store and "default/p-0" not in informer.store),
                               what="watch events")
                assert ("DELETED", "p-0") in events and ("ADDED", "p-7") in events

                sim.faults.cut_watches()  # resumes from the last resourceVersion: no relist
                await create_pods(core, [gang_pod("p-8", None, None, gpus=0)])
                await wait_for(lambda: _true("default/p-8" in informer.store), what="event after the cut")
                assert lists == [7]

                # Slow reconnect while history is compacted: the watch gets 410 and lists again.
                sim.faults.latency(0.5, verb="watch", resource="pods")
                sim.faults.cut_watches()
                await create_pods(core, [gang_pod("p-9", None, None, gpus=0)])
                sim.faults.compact()
                sim.faults.clear()
                await wait_for(lambda: _true(len(lists) == 2), what="relist after 410")
                assert lists[-1] == 9 and "default/p-9" in informer.store


async def test_without_a_store_each_page_is_converted_as_it_comes():
    """keep_store=False with convert (the controller's node and pod informers): on_list gets the
    converted objects of every page, nothing is kept, and watch events still arrive."""
    async with Simulator(nodes=1, scheduler=False, kubelet=False) as sim:
        async with sim.api_client() as api:
            core = client.CoreV1Api(api)
            await create_pods(core, [gang_pod(f"p-{i}", None, None, gpus=0) for i in range(5)])
            lists, events = [], []
            informer = Informer(core.list_pod_for_all_namespaces, "pods", page_size=2,
                                on_list=lists.append,
                                on_event=lambda kind, pod: events.append((kind, pod["metadata"]["name"])),
                                convert=lambda pod: ("seen", pod["metadata"]["name"]), keep_store=False,
                                backoff_base=0.01)
            async with running(informer.run()):
                await wait_for(lambda: _true(informer.synced), what="synced")
                assert sorted(lists[0]) == [("seen", f"p-{i}") for i in range(5)]
                await create_pods(core, [gang_pod("p-5", None, None, gpus=0)])
                await wait_for(lambda: _true(("ADDED", "p-5") in events), what="a watch event")
                assert informer.store == {}


class _Stream:
    """A raw watch response whose body arrives in the given chunks."""

    status, reason = 200, "OK"

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.content = self

    async def iter_any(self):
        for chunk in self.chunks:
            yield chunk

    def release(self) -> None:
        pass


async def test_watch_events_split_anyhow_across_chunks_arrive_whole_and_in_order(monkeypatch):
    """A burst of events in chunks cut mid-line and mid-event, the loop given a turn after each
    event: every event once, in order, and the resourceVersion of the last; a list page,
    converted with a turn of the loop after each object, whole and in order."""
    import json

    from ganggate.controller.round import informer as informer_module

    monkeypatch.setattr(informer_module, "SLICE_SECONDS", 0.0)
    count = 257
    stream = b"".join(json.dumps({"type": "MODIFIED", "object": {"metadata": {
        "name": f"p-{i}", "namespace": "default", "resourceVersion": str(i + 1)}}}).encode() + b"\n"
        for i in range(count))
    chunks = [stream[i:i + 997] for i in range(0, len(stream), 997)]
    events = []

    async def watch_pods(**_):
        return _Stream(chunks)

    informer = Informer(watch_pods, "pods", on_list=lambda items: None,
                        on_event=lambda kind, pod: events.append(pod["metadata"]["name"]))
    informer.resource_version = "0"
    await informer.watch()
    assert events == [f"p-{i}" for i in range(count)]
    assert informer.resource_version == str(count)

    class _Page:
        status, headers = 200, {}

        async def read(self):
            items = [{"metadata": {"name": f"q-{i}", "namespace": "default"}} for i in range(count)]
            return json.dumps({"metadata": {"resourceVersion": "9"}, "items": items}).encode()

        def release(self):
            pass

    async def list_pods(**_):
        return _Page()

    lists = []
    informer = Informer(list_pods, "pods", on_list=lists.append, on_event=lambda kind, pod: None,
                        convert=lambda pod: pod["metadata"]["name"], keep_store=False)
    await informer.list()
    assert lists == [[f"q-{i}" for i in range(count)]]
