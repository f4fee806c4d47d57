"""Watches through kubesim's API: initial state, resume from a resourceVersion, bookmarks,
timeouts, 410 Expired, selectors (an object leaving a selector is DELETED for that watcher),
cut streams, and kubernetes-asyncio's Watch with its resourceVersion tracking.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from ganggate.sim import Simulator
from ganggate.sim.apiserver.watch import Event, Stored, WatchHub
from tests.kubesim_support import GATE, Raw, eventually, pod_manifest, read_watch

PODS = "/api/v1/namespaces/default/pods"


async def test_watch_without_resource_version_starts_with_the_current_state(api, raw):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("a"))
    await core.create_namespaced_pod("default", pod_manifest("b"))
    reader = asyncio.create_task(read_watch(raw, f"{PODS}?watch=true", 3))
    await asyncio.sleep(0.1)
    await core.create_namespaced_pod("default", pod_manifest("c"))
    events = await reader
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    for rv in ("0",):
        again = await read_watch(raw, f"{PODS}?watch=1&resourceVersion={rv}", 3)
        assert [e["object"]["metadata"]["name"] for e in again] == ["a", "b", "c"]


async def test_watch_resumes_after_a_resource_version(api, raw):
    core = client.CoreV1Api(api)
    first = await core.create_namespaced_pod("default", pod_manifest("a"))
    await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    await core.create_namespaced_pod("default", pod_manifest("b"))
    await core.delete_namespaced_pod("a", "default")
    events = await read_watch(raw, f"{PODS}?watch=true&resourceVersion={first.metadata.resource_version}", 4)
    # An unbound pod is deleted with grace 0, but through the graceful path: the deletionTimestamp
    # is written first (MODIFIED), then the pod goes (registry/generic/registry/store.go Delete).
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert events[2]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(first.metadata.resource_version)
    # DELETED carries the last state of the object.
    assert events[3]["object"]["metadata"]["labels"] == {"x": "1"}


async def test_watch_of_other_resources_and_namespaces_is_separate(api, raw):
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "other"}})
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    await core.create_namespaced_pod("other", pod_manifest("elsewhere"))
    await core.patch_node("node-0", {"metadata": {"labels": {"x": "y"}}})
    await core.create_namespaced_pod("default", pod_manifest("here"))
    events = await read_watch(raw, f"{PODS}?watch=true&resourceVersion={start}", 1)
    assert events[0]["object"]["metadata"]["name"] == "here"
    everywhere = await read_watch(raw, f"/api/v1/pods?watch=true&resourceVersion={start}", 2)
    assert [e["object"]["metadata"]["name"] for e in everywhere] == ["elsewhere", "here"]
    nodes = await read_watch(raw, f"/api/v1/nodes?watch=true&resourceVersion={start}", 1)
    assert nodes[0]["type"] == "MODIFIED" and nodes[0]["object"]["metadata"]["name"] == "node-0"


async def test_bookmarks_carry_only_the_resource_version(api, raw, sim):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("a"))
    events = await read_watch(raw, f"{PODS}?watch=true&allowWatchBookmarks=true&resourceVersion={created.metadata.resource_version}", 1)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["kind"] == "Pod"
    assert events[0]["object"]["metadata"] == {"resourceVersion": str(sim.store.resource_version)}


async def test_no_bookmarks_unless_asked(api, raw):
    events = await read_watch(raw, f"{PODS}?watch=true&timeoutSeconds=1&resourceVersion=1", 10)
    assert events == []  # the stream ended at the timeout without any event


async def test_timeout_seconds_ends_the_stream(raw):
    events = await read_watch(raw, "/api/v1/nodes?watch=true&timeoutSeconds=1", 100)
    assert [e["type"] for e in events] == ["ADDED", "ADDED"]


async def test_compacted_resource_version_is_410_expired(api, raw, sim):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("a"))
    await core.create_namespaced_pod("default", pod_manifest("b"))
    sim.faults.compact()
    events = await read_watch(raw, f"{PODS}?watch=true&resourceVersion={created.metadata.resource_version}", 5)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {created.metadata.resource_version} (")


async def test_history_window_is_bounded():
    async with Simulator(nodes=0, scheduler=False, kubelet=False, watch_history=3) as small:
        async with small.api_client() as api:
            core = client.CoreV1Api(api)
            first = await core.create_namespaced_pod("default", pod_manifest("p0"))
            for index in range(1, 6):
                await core.create_namespaced_pod("default", pod_manifest(f"p{index}"))
            import aiohttp

            async with aiohttp.ClientSession() as session:
                raw = Raw(small.url, session)
                old = await read_watch(raw, f"{PODS}?watch=true&resourceVersion={first.metadata.resource_version}", 2)
                assert old[0]["type"] == "ERROR" and old[0]["object"]["code"] == 410
                recent = int(first.metadata.resource_version) + 2  # p3, p4, p5 are still in the window
                events = await read_watch(raw, f"{PODS}?watch=true&resourceVersion={recent}", 3)
                assert [e["object"]["metadata"]["name"] for e in events] == ["p3", "p4", "p5"]


async def test_label_selector_watch_adds_and_deletes_as_objects_move(api, raw):
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    await core.create_namespaced_pod("default", pod_manifest("a", labels={"gang": "g1"}))
    await core.create_namespaced_pod("default", pod_manifest("b", labels={"gang": "g2"}))
    await core.patch_namespaced_pod("b", "default", {"metadata": {"labels": {"gang": "g1"}}})
    await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"gang": "g3"}}})
    events = await read_watch(raw, f"{PODS}?watch=true&labelSelector=gang%3Dg1&resourceVersion={start}", 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    # The DELETED object is the last state that matched, at the resourceVersion of the change.
    assert events[2]["object"]["metadata"]["labels"] == {"gang": "g1"}
    assert events[2]["object"]["metadata"]["resourceVersion"] == (await core.read_namespaced_pod("a", "default")).metadata.resource_version


async def test_field_selector_watch_on_node_name(api, raw):
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    await core.create_namespaced_pod("default", pod_manifest("x"))
    await core.create_namespaced_pod_binding("x", "default", {"metadata": {"name": "x"}, "target": {"name": "node-1"}},
                                             _preload_content=False)
    events = await read_watch(raw, f"/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-1&resourceVersion={start}", 1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["spec"]["nodeName"] == "node-1"
    status, body, _ = await raw.request("GET", f"{PODS}?watch=true&fieldSelector=spec.image%3Dx")
    assert status == 400


async def test_kubernetes_asyncio_watch_tracks_resource_versions_across_cut_streams(api, sim):
    core = client.CoreV1Api(api)
    seen: list[tuple[str, str]] = []
    watcher = watch.Watch()

    async def consume() -> None:
        async for event in watcher.stream(core.list_namespaced_pod, "default"):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 5:
                watcher.stop()
                return

    task = asyncio.create_task(consume())
    await core.create_namespaced_pod("default", pod_manifest("w1"))
    await eventually(lambda: len(seen) == 1)
    assert sim.faults.cut_watches() == 1
    await core.create_namespaced_pod("default", pod_manifest("w2"))
    await core.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"a": "b"}}})
    await core.delete_namespaced_pod("w2", "default")
    await asyncio.wait_for(task, 10)
    # Reconnected from the last resourceVersion it saw: nothing lost, nothing repeated. (The delete
    # writes the deletionTimestamp first: MODIFIED, then DELETED.)
    assert seen == [("ADDED", "w1"), ("ADDED", "w2"), ("MODIFIED", "w1"), ("MODIFIED", "w2"), ("DELETED", "w2")]
    await watcher.close()


async def test_kubernetes_asyncio_watch_raises_410_for_an_expired_version(api, sim):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("old"))
    await core.create_namespaced_pod("default", pod_manifest("new"))
    sim.faults.compact()
    watcher = watch.Watch()
    with pytest.raises(ApiException) as info:
        async for _ in watcher.stream(core.list_namespaced_pod, "default",
                                      resource_version=created.metadata.resource_version, timeout_seconds=5):
            pass
    assert info.value.status == 410
    await watcher.close()


async def test_kubernetes_asyncio_watch_of_leases_and_bookmarks(api):
    leases = client.CoordinationV1Api(api)
    watcher = watch.Watch()
    got: list[str] = []

    async def consume() -> None:
        async for event in watcher.stream(leases.list_namespaced_lease, "kube-system", allow_watch_bookmarks=True):
            got.append(event["type"])
            if "BOOKMARK" in got and "ADDED" in got:
                watcher.stop()
                return

    task = asyncio.create_task(consume())
    await leases.create_namespaced_lease("kube-system", {"metadata": {"name": "l"}, "spec": {}})
    await asyncio.wait_for(task, 10)
    assert "ADDED" in got and "BOOKMARK" in got
    await watcher.close()


def test_a_slow_watcher_is_closed_rather_than_blocking_the_store():
    hub = WatchHub(history=100, max_buffer=3)

    async def run() -> None:
        slow = hub.subscribe("pods", None, None, since_rv=0)
        fast = hub.subscribe("pods", None, None, since_rv=0)
        for rv in range(1, 6):
            hub.publish(Event(rv, "ADDED", "pods", "default", Stored({"metadata": {"name": f"p{rv}"}}), None))
            fast.drain()
        assert slow.closed and not fast.closed
        assert slow not in hub.watchers and fast in hub.watchers

    asyncio.run(run())


async def test_table_watch_for_kubectl_get_watch(api, raw):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("t1", gates=[GATE]))
    await core.create_namespaced_pod("default", pod_manifest("t2"))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    events = []
    async with raw.session.get(raw.base_url + f"{PODS}?watch=true", headers={"Accept": accept}) as response:
        while len(events) < 2:
            events.append(__import__("json").loads(await response.content.readline()))
    first, second = (e["object"] for e in events)
    assert first["kind"] == "Table" and [c["name"] for c in first["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
    assert first["rows"][0]["cells"][:3] == ["t1", "0/1", "SchedulingGated"]
    assert first["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert second["columnDefinitions"] == [] and second["rows"][0]["cells"][2] == "Pending"
    status, table, _ = await raw.request("GET", "/api/v1/nodes")
    assert table["kind"] == "NodeList"


async def test_watch_one_object_by_name(api, raw):
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    await core.create_namespaced_pod("default", pod_manifest("other"))
    await core.create_namespaced_pod("default", pod_manifest("mine"))
    by_path = await read_watch(raw, f"{PODS}/mine?watch=true&resourceVersion={start}", 1)
    by_field = await read_watch(raw, f"{PODS}?watch=true&fieldSelector=metadata.name%3Dmine&resourceVersion={start}", 1)
    assert by_path == by_field and by_path[0]["object"]["metadata"]["name"] == "mine"


async def test_many_concurrent_clients(api, sim):
    """200 pods created and patched concurrently: nothing lost or mixed up, one revision per write."""
    core = client.CoreV1Api(api)
    start = sim.store.resource_version
    names = [f"c{i:03d}" for i in range(200)]
    await asyncio.gather(*(core.create_namespaced_pod("default", pod_manifest(n)) for n in names))
    await asyncio.gather(*(core.patch_namespaced_pod(n, "default", {"metadata": {"labels": {"n": n}}}) for n in names))
    pods = sim.store.list("pods", "default")
    assert sorted(p["metadata"]["name"] for p in pods) == names
    assert all(p["metadata"]["labels"] == {"n": p["metadata"]["name"]} for p in pods)
    assert sim.store.resource_version == start + 400
    versions = {p["metadata"]["resourceVersion"] for p in pods}
    assert len(versions) == 200  # every write got its own revision


async def test_a_resource_version_from_the_future_is_too_large(api, raw, sim):
    """A client that outlived a restarted simulator must not wait silently: 504 Too large."""
    ahead = sim.store.resource_version + 1000
    for path in (f"{PODS}?watch=true&resourceVersion={ahead}", f"{PODS}?resourceVersion={ahead}",
                 f"/api/v1/nodes/node-0?resourceVersion={ahead}"):
        status, body, headers = await raw.request("GET", path)
        assert status == 504 and body["reason"] == "Timeout", path
        assert body["message"] == f"Too large resource version: {ahead}, current: {sim.store.resource_version}"
        assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge" and headers["Retry-After"] == "1"
    status, body, _ = await raw.request("GET", f"{PODS}?resourceVersion=abc")
    assert status == 400
