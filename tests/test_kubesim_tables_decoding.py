"""kubesim's API server as kube-apiserver on two points kubectl users meet: Table rows carry what
`includeObject` asks (handlers/response.go asTable), and a non-string value in a map of strings is
refused by the decoder with the real message (sigs.k8s.io/json UnmarshalTypeError, transformDecodeError)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from tests.kubesim_support import Raw

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
async def raw() -> AsyncIterator[Raw]:
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False) as sim, \
            aiohttp.ClientSession() as session:
        yield Raw(sim.url, session)


def pod(name: str, labels: Any = None, limits: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}
    if labels is not None:
        body["metadata"]["labels"] = labels
    if limits is not None:
        body["spec"]["containers"][0]["resources"] = {"limits": limits}
    return body


async def table(raw: Raw, path: str) -> tuple[int, Any]:
    async with raw.session.get(raw.base_url + path, headers={"Accept": TABLE}) as response:
        return response.status, json.loads(await response.text())


async def test_table_rows_carry_the_object_metadata_or_nothing_as_include_object_asks(raw):
    status, created, _ = await raw.request("POST", PODS, pod("p", {"app": "a"}))
    assert status == 201, created
    _, whole = await table(raw, PODS + "?includeObject=Object")
    (row,) = whole["rows"]
    assert row["object"]["kind"] == "Pod" and row["object"]["apiVersion"] == "v1"
    assert row["object"]["spec"]["containers"][0]["image"] == "busybox:1.36"  # what --sort-by reads
    assert row["object"]["metadata"]["labels"] == {"app": "a"}
    _, default = await table(raw, PODS)
    assert default["rows"][0]["object"]["kind"] == "PartialObjectMetadata" and "spec" not in default["rows"][0]["object"]
    _, none = await table(raw, PODS + "?includeObject=None")
    assert none["rows"][0]["object"] is None
    _, one = await table(raw, PODS + "/p?includeObject=Object")
    assert one["rows"][0]["object"]["spec"]["containers"][0]["name"] == "main"
    status, refused = await table(raw, PODS + "?includeObject=Everything")
    assert status == 400 and refused["message"] == 'unrecognized includeObject value: "Everything"'


async def test_a_watch_of_tables_carries_the_objects_too(raw):
    await raw.request("POST", PODS, pod("w"))
    url = raw.base_url + PODS + "?watch=true&includeObject=Object&timeoutSeconds=1"
    async with raw.session.get(url, headers={"Accept": TABLE}) as response:
        first = json.loads(await response.content.readline())
    assert first["type"] == "ADDED" and first["object"]["kind"] == "Table"
    assert first["object"]["rows"][0]["object"]["spec"]["containers"][0]["name"] == "main"


async def test_a_number_or_bool_in_a_string_map_is_refused_at_decode_with_the_real_message(raw):
    status, body, _ = await raw.request("POST", PODS, pod("n", {"replicas": 6}))
    assert status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == ('Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number into Go '
                               "struct field ObjectMeta.metadata.labels of type string")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {
        "metadata": {"annotations": {"scheduling.k8s.io/group-pod-num": 6}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}}}
    status, body, _ = await raw.request("POST", "/apis/batch/v1/namespaces/default/jobs", job)
    assert status == 400 and body["message"] == (
        'Job in version "v1" cannot be handled as a Job: json: cannot unmarshal number into Go struct field '
        "ObjectMeta.spec.template.metadata.annotations of type string")
    # Nothing was stored; quoted, the same pod is taken; a Quantity may be a number (its own decoder).
    status, _, _ = await raw.request("GET", PODS + "/n")
    assert status == 404
    status, _, _ = await raw.request("POST", PODS, pod("n", {"replicas": "6"}, limits={"cpu": 2}))
    assert status == 201
    # An update and a patch are refused the same way.
    status, body, _ = await raw.request("PATCH", PODS + "/n", {"metadata": {"annotations": {"on": True}}},
                                        "application/merge-patch+json")
    assert status == 400 and body["message"] == (
        "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.annotations of type string")
    status, current, _ = await raw.request("GET", PODS + "/n")
    current["metadata"]["labels"]["replicas"] = 7
    status, body, _ = await raw.request("PUT", PODS + "/n", current)
    assert status == 400 and body["message"].startswith('Pod in version "v1" cannot be handled as a Pod: json: '
                                                        "cannot unmarshal number")


def test_the_error_names_the_innermost_struct_and_the_path_through_lists():
    from ganggate.sim.apiserver.decoding import decode_error

    term = {"labelSelector": {"matchLabels": {"app": 1}}}
    body = {"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}}
    assert decode_error("", "v1", "Pod", body) == (
        "json: cannot unmarshal number into Go struct field LabelSelector.spec.affinity.podAntiAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution.labelSelector.matchLabels of type string")
    assert decode_error("", "v1", "Pod", {"spec": {"nodeSelector": {"gpu": ["a"]}}}) == (
        "json: cannot unmarshal array into Go struct field PodSpec.spec.nodeSelector of type string")
    assert decode_error("", "v1", "Pod", {"metadata": {"labels": {"a": None}}}) is None  # null decodes to ""
