"""GET /openapi/v2: the Swagger 2.0 document kubectl reads, in JSON and in gnostic's protobuf, and what
kubectl does with it on `ganggate sim up` (a `kind: List` applied with validation on, `kubectl explain`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ganggate.sim.apiserver import discovery, openapi_v2

ROOT = Path(__file__).resolve().parents[1]
PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def fields(data: bytes) -> list[tuple[int, Any]]:
    """A protobuf message's (field number, value) pairs; length-delimited values stay bytes."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.append((number, value))
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, i


def named(message: bytes, field: int) -> dict[str, bytes]:
    """A repeated Named* field (name = 1, value = 2) as a dict."""
    out = {}
    for number, entry in fields(message):
        if number == field:
            parts = dict(fields(entry))
            out[parts[1].decode()] = parts.get(2, b"")
    return out


def test_the_json_document_covers_every_served_kind_and_its_refs_resolve():
    doc = openapi_v2.document()
    assert doc["swagger"] == "2.0"
    definitions = doc["definitions"]
    text = json.dumps(doc)
    assert "#/components/" not in text
    for ref in set(re.findall(r'"\$ref": "#/definitions/([^"]+)"', text)):
        assert ref in definitions, ref
    kinds = {(g.get("group", ""), g["version"], g["kind"]) for d in definitions.values()
             for g in d.get("x-kubernetes-group-version-kind", [])}
    for info in discovery.RESOURCES:
        assert (info.group, info.version, info.kind) in kinds, info.kind
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    body = patch["parameters"][0]
    assert body["in"] == "body" and body["schema"] == {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}
    # A reference with a description is written beside it, as kube-openapi's v2 builder does.
    assert definitions["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"] == "#/definitions/io.k8s.api.core.v1.PodSpec"


async def test_content_negotiation_as_kubectl_and_kube_openapi_do(raw):
    status, body, headers = await raw.request("GET", "/openapi/v2")
    assert status == 200 and headers["Content-Type"].startswith("application/json") and body["swagger"] == "2.0"
    async with raw.session.get(raw.base_url + "/openapi/v2", headers={"Accept": PROTOBUF}) as response:
        assert response.status == 200
        # Answered in the dotted form: Go's mime parser refuses the `@` of the form client-go asks for.
        assert response.headers["Content-Type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        data = await response.read()
        etag = response.headers["Etag"]
    document = fields(data)
    assert document[0] == (1, b"2.0")
    definitions = named(dict(document)[9], 1)
    pod = dict(fields(definitions["io.k8s.api.core.v1.Pod"]))
    assert b"x-kubernetes-group-version-kind" in pod[31]
    async with raw.session.get(raw.base_url + "/openapi/v2", headers={"Accept": PROTOBUF, "If-None-Match": etag}) as response:
        assert response.status == 304
    async with raw.session.get(raw.base_url + "/openapi/v2", headers={"Accept": "text/html"}) as response:
        assert response.status == 406


# --- kubectl on `ganggate sim up` ----------------------------------------------------------------------

def readme_examples() -> dict[str, Any]:
    """A `kind: List` of the README's Job and the examples a user applies (the invalid one left out)."""
    text = (ROOT / "README.md").read_text()
    items = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    for name in ("pytorch-ddp-job.yaml", "mpi-gang-pods.yaml", "pytorch-elastic-job.yaml", "volcano-pod.yaml"):
        items += [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]
    unique = {(i["kind"], i["metadata"]["name"]): i for i in reversed(items)}  # the README's Job is the example's
    return {"apiVersion": "v1", "kind": "List", "items": list(reversed(unique.values()))}


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    from tests.test_sim_up import start_up

    running = start_up(tmp_path_factory.mktemp("sim-up-openapi-v2"), "--nodes", "2")
    yield running
    running.stop()


def test_kubectl_applies_a_list_of_the_readme_examples_with_validation_on(up, tmp_path):
    listed = readme_examples()
    manifest = tmp_path / "examples-list.yaml"
    manifest.write_text(yaml.safe_dump(listed))
    applied = up.kubectl("apply", "--validate=strict", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    created = {line.split()[0] for line in applied.stdout.splitlines()}
    assert "job.batch/ddp-train" in created and "pod/mpi-launcher" in created
    # Validation is on: an unknown field in an item is refused by kubectl before anything is sent.
    listed["items"] = [dict(listed["items"][0], metadata={"name": "typo"}, spec=dict(listed["items"][0]["spec"], paralelism=2))]
    manifest.write_text(yaml.safe_dump(listed))
    refused = up.kubectl("apply", "-f", str(manifest))
    assert refused.returncode != 0 and 'unknown field "paralelism"' in refused.stderr
    assert up.kubectl("get", "job", "typo").returncode != 0


def test_kubectl_explain_reads_both_documents(up):
    explained = up.kubectl("explain", "pods.spec.schedulingGates")
    assert explained.returncode == 0 and "SchedulingGates is an opaque list of values" in explained.stdout
    legacy = up.kubectl("explain", "pods.spec", "--output=plaintext-openapiv2")
    assert legacy.returncode == 0, legacy.stderr
    assert "RESOURCE: spec <Object>" in legacy.stdout and "schedulingGates" in legacy.stdout
