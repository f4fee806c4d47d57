"""What current clients send kubesim, as kube-apiserver takes it: a typed client's protobuf body
(kubectl 1.36's `create namespace`) and a watch-list stream (client-go's reflector with
sendInitialEvents=true, as `kubectl delete` and `kubectl wait` watch)."""

from __future__ import annotations

import asyncio
import json

from kubernetes_asyncio import client

from ganggate.sim.apiserver import protobuf_body
from tests.kubesim_support import pod_manifest

PODS = "/api/v1/namespaces/default/pods"
# `kubectl create namespace zz` (kubectl 1.36.4, -v=9): the k8s prefix, runtime.Unknown{v1, Namespace},
# then the Namespace with every empty field gogo writes.
KUBECTL_CREATE_NAMESPACE = bytes.fromhex(
    "6b3873000a0f0a02763112094e616d657370616365121a0a120a027a7a12001a0022002a0032003800420012001a020a001a002200")
# The same with metadata {name: xx, labels: {team: ab}}, written by hand.
WITH_LABELS = bytes.fromhex("6b3873000a0f0a02763112094e616d65737061636512140a100a0278785a0a0a047465616d120261621a00")


def test_the_protobuf_namespace_kubectl_sends_decodes_as_its_json() -> None:
    assert protobuf_body.decode(KUBECTL_CREATE_NAMESPACE) == {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "zz"}}
    assert protobuf_body.decode(WITH_LABELS)["metadata"] == {"name": "xx", "labels": {"team": "ab"}}


async def test_a_protobuf_namespace_is_created_and_another_kind_is_refused_with_415(api, raw) -> None:
    status, body, _ = await raw.request("POST", "/api/v1/namespaces", KUBECTL_CREATE_NAMESPACE,
                                        content_type=protobuf_body.PROTOBUF)
    assert status == 201, body
    assert (await client.CoreV1Api(api).read_namespace("zz")).metadata.name == "zz"
    pod = KUBECTL_CREATE_NAMESPACE.replace(b"\x0a\x0f\x0a\x02v1\x12\x09Namespace", b"\x0a\x09\x0a\x02v1\x12\x03Pod")
    status, body, _ = await raw.request("POST", PODS, pod, content_type=protobuf_body.PROTOBUF)
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


async def test_a_watch_list_stream_ends_its_initial_events_with_a_bookmark(api, raw) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("a"))
    await core.create_namespaced_pod("default", pod_manifest("b"))
    query = "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    async with raw.session.get(f"{raw.base_url}{PODS}?{query}&resourceVersion=1") as stream:
        events = [json.loads(await asyncio.wait_for(stream.content.readline(), 30)) for _ in range(3)]
        created = await core.create_namespaced_pod("default", pod_manifest("c"))  # after the bookmark
        events.append(json.loads(await asyncio.wait_for(stream.content.readline(), 30)))
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK", "ADDED"]
    assert [events[i]["object"]["metadata"]["name"] for i in (0, 1, 3)] == ["a", "b", "c"]
    mark = events[2]["object"]["metadata"]
    assert mark["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(mark["resourceVersion"]) < int(created.metadata.resource_version)


async def test_a_watch_list_without_its_required_options_is_invalid(raw) -> None:
    status, body, _ = await raw.request("GET", f"{PODS}?watch=true&sendInitialEvents=true")
    assert status == 422
    assert "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in body["message"]
    assert "sendInitialEvents requires setting allowWatchBookmarks to true" in body["message"]
