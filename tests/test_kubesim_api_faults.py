"""Fault injection in kubesim, in-process (sim.faults) and over HTTP (/kubesim/faults)."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.kubesim_support import pod_manifest, read_watch, status_of


async def test_fail_a_verb_a_number_of_times(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("f"))
    sim.faults.fail(verb="patch", resource="pods", status=500, count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as info:
            await core.patch_namespaced_pod("f", "default", {"metadata": {"labels": {"a": "b"}}})
        status = status_of(info.value)
        assert info.value.status == 500 and status["reason"] == "InternalError" and status["kind"] == "Status"
    # Other verbs are untouched, and the third patch goes through.
    assert (await core.read_namespaced_pod("f", "default")).metadata.labels is None
    assert (await core.patch_namespaced_pod("f", "default", {"metadata": {"labels": {"a": "b"}}})).metadata.labels == {"a": "b"}


async def test_too_many_requests_carries_retry_after(raw, sim):
    sim.faults.fail(verb="list", resource="pods", status=429, count=1, retry_after=2)
    status, body, headers = await raw.request("GET", "/api/v1/namespaces/default/pods")
    assert status == 429 and body["reason"] == "TooManyRequests"
    assert headers["Retry-After"] == "2" and body["details"]["retryAfterSeconds"] == 2
    assert (await raw.request("GET", "/api/v1/namespaces/default/pods"))[0] == 200


async def test_conflict_fault(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("c"))
    sim.faults.fail(verb="update", resource="pods", status=409)
    pod = await core.read_namespaced_pod("c", "default")
    with pytest.raises(ApiException) as info:
        await core.replace_namespaced_pod("c", "default", pod)
    assert info.value.status == 409 and status_of(info.value)["reason"] == "Conflict"
    await core.replace_namespaced_pod("c", "default", pod)


async def test_faults_match_subresource_and_namespace(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "other"}})
    sim.faults.fail(verb="create", resource="pods", subresource="binding", status=500)
    sim.faults.fail(verb="create", resource="pods", namespace="other", status=500)
    await core.create_namespaced_pod("default", pod_manifest("b"))  # not a binding: passes
    with pytest.raises(ApiException):
        await core.create_namespaced_pod_binding("b", "default", {"metadata": {"name": "b"}, "target": {"name": "node-0"}})
    with pytest.raises(ApiException):
        await core.create_namespaced_pod("other", pod_manifest("o"))
    await core.create_namespaced_pod("other", pod_manifest("o"))


async def test_watch_faults(raw, sim):
    sim.faults.fail(verb="watch", resource="nodes", status=500)
    status, body, _ = await raw.request("GET", "/api/v1/nodes?watch=true")
    assert status == 500
    events = await read_watch(raw, "/api/v1/nodes?watch=true&timeoutSeconds=1", 2)
    assert len(events) == 2


async def test_latency_delays_matching_requests_only(api, sim):
    core = client.CoreV1Api(api)
    sim.faults.latency(0.05, verb="get", resource="nodes")
    assert (await core.read_node("node-0")).metadata.name == "node-0"  # delayed, then answered
    sim.faults.latency(30, verb="list", resource="nodes")
    slow = asyncio.create_task(core.list_node())
    await asyncio.sleep(0)
    await core.create_namespaced_pod("default", pod_manifest("quick"))
    await core.list_namespaced_pod("default")
    assert not slow.done()  # the delayed list is still waiting when the others are answered
    slow.cancel()
    sim.faults.clear()
    assert sim.faults.describe()["latency"] == []


async def test_bad_rules_are_refused(sim):
    with pytest.raises(ValueError):
        sim.faults.fail(verb="frobnicate")
    with pytest.raises(ValueError):
        sim.faults.fail(status=200)
    with pytest.raises(ValueError):
        sim.faults.latency(-1)


async def test_faults_over_http(raw, api):
    status, rule, _ = await raw.request("POST", "/kubesim/faults", {"verb": "get", "resource": "nodes", "status": 503, "count": 1})
    assert status == 201 and rule["status"] == 503
    status, listed, _ = await raw.request("GET", "/kubesim/faults")
    assert listed["fail"][0]["verb"] == "get"
    status, body, _ = await raw.request("GET", "/api/v1/nodes/node-0")
    assert status == 503 and body["reason"] == "ServiceUnavailable"
    await raw.request("POST", "/kubesim/faults", {"verb": "list", "resource": "pods", "status": 429, "count": 5, "retryAfter": 3})
    status, _, _ = await raw.request("DELETE", "/kubesim/faults")
    assert status == 200
    assert (await raw.request("GET", "/api/v1/namespaces/default/pods"))[0] == 200
    status, body, _ = await raw.request("POST", "/kubesim/faults", {"verb": "nope"})
    assert status == 400
    status, body, _ = await raw.request("POST", "/kubesim/faults", {"latency": 0.01, "verb": "get"})
    assert status == 201


async def test_cut_watches_and_compact_over_http(raw, api):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("a"))
    since = created.metadata.resource_version
    watching = asyncio.create_task(read_watch(raw, f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={since}", 10))
    for _ in range(100):
        status, body, _ = await raw.request("POST", "/kubesim/faults/cut-watches")
        if body["cut"]:
            break
        await asyncio.sleep(0.02)
    assert body["cut"] == 1
    assert await asyncio.wait_for(watching, 5) == []  # the stream ended
    await core.create_namespaced_pod("default", pod_manifest("b"))
    status, body, _ = await raw.request("POST", "/kubesim/faults/compact")
    assert status == 200 and int(body["compactedResourceVersion"]) > int(created.metadata.resource_version)
    events = await read_watch(raw, f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={created.metadata.resource_version}", 1)
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
