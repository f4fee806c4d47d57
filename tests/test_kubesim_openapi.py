"""kubesim's OpenAPI v3 documents and server-side field validation (fieldValidation)."""

from __future__ import annotations

from ganggate.sim.apiserver import discovery

PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, **extra_spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **extra_spec}}


async def test_every_served_group_version_has_a_document(raw):
    status, root, headers = await raw.request("GET", "/openapi/v3")
    assert status == 200
    expected = {f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}" for r in discovery.RESOURCES
                if discovery.served(r)}  # feature-gated ones only with their gate on
    assert set(root["paths"]) == expected
    for path, entry in root["paths"].items():
        url = entry["serverRelativeURL"]
        assert url.startswith(f"/openapi/v3/{path}?hash=")
        status, doc, headers = await raw.request("GET", url)
        assert status == 200 and doc["openapi"].startswith("3.") and headers["Cache-Control"] == "public, immutable"
        kinds = {(g.get("group", ""), g["version"], g["kind"])
                 for schema in doc["components"]["schemas"].values()
                 for g in schema.get("x-kubernetes-group-version-kind") or []}
        for info in discovery.RESOURCES:
            if (f"apis/{info.group}/{info.version}" if info.group else f"api/{info.version}") == path:
                assert (info.group, info.version, info.kind) in kinds, info


async def test_patch_operations_advertise_field_validation_and_patch_types(raw):
    _, root, _ = await raw.request("GET", "/openapi/v3")
    _, doc, _ = await raw.request("GET", root["paths"]["apis/batch/v1"]["serverRelativeURL"])
    patch = doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "batch", "version": "v1", "kind": "Job"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"] if p["in"] == "query"}
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    containers = doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name" and containers["x-kubernetes-patch-strategy"] == "merge"


async def test_a_stale_hash_redirects_and_unknown_documents_are_404(raw):
    status, _, _ = await raw.request("GET", "/openapi/v3/apis/batch/v1?hash=0")
    assert status == 200  # aiohttp followed the 301 to the current hash
    status, body, _ = await raw.request("GET", "/openapi/v3/apis/apps/v1")
    assert status == 404 and body["reason"] == "NotFound"
    # (/openapi/v2 is served: tests/test_kubesim_openapi_v2.py.)


async def test_strict_field_validation_refuses_unknown_fields_and_stores_nothing(raw, sim):
    bad = pod("strict", nodeSelectr={"a": "b"})
    bad["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    status, body, _ = await raw.request("POST", f"{PODS}?fieldValidation=Strict", bad)
    assert status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                               'unknown field "spec.containers[0].imagePullPolcy", unknown field "spec.nodeSelectr"')
    assert sim.store.get("pods", "default", "strict") is None


async def test_warn_is_the_default_and_sends_warning_headers(raw, sim):
    status, body, headers = await raw.request("POST", PODS, pod("warned", nodeSelectr={"a": "b"}))
    assert status == 201
    assert headers["Warning"] == '299 - "unknown field \\"spec.nodeSelectr\\""'
    status, _, headers = await raw.request("POST", f"{PODS}?fieldValidation=Ignore", pod("ignored", nodeSelectr={}))
    assert status == 201 and "Warning" not in headers


async def test_strict_patch_checks_the_patched_object(raw, sim):
    await raw.request("POST", PODS, pod("target"))
    status, body, _ = await raw.request("PATCH", f"{PODS}/target?fieldValidation=Strict",
                                        {"metadata": {"labelz": {"a": "b"}}}, "application/merge-patch+json")
    assert status == 400 and body["message"] == 'strict decoding error: unknown field "metadata.labelz"'
    assert "labelz" not in sim.store.get("pods", "default", "target")["metadata"]


async def test_an_unknown_directive_is_invalid(raw, sim):
    status, body, _ = await raw.request("POST", f"{PODS}?fieldValidation=Loose", pod("loose"))
    assert status == 422 and 'fieldValidation: Unsupported value: "Loose"' in body["message"]
    assert sim.store.get("pods", "default", "loose") is None
