"""kubesim's API server over HTTP: discovery, CRUD, metadata, errors, namespaces, lists.

Every test drives a real Simulator on a loopback port with kubernetes-asyncio (or raw HTTP where
the typed client hides what a user would see, such as a Status body or a header).
"""

from __future__ import annotations

import re

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.kubesim_support import pod_manifest, read_watch, status_of


async def test_version_health_and_discovery(raw):
    status, version, _ = await raw.request("GET", "/version")
    assert status == 200 and version["major"] == "1" and version["gitVersion"].startswith("v1.")
    for path in ("/healthz", "/readyz", "/livez"):
        assert (await raw.request("GET", path))[0] == 200
    status, apis, _ = await raw.request("GET", "/api")
    assert apis["kind"] == "APIVersions" and apis["versions"] == ["v1"]
    status, core, _ = await raw.request("GET", "/api/v1")
    assert core["kind"] == "APIResourceList" and core["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["namespaced"] is True
    assert by_name["pods"]["singularName"] == "pod" and "watch" in by_name["pods"]["verbs"]
    assert by_name["nodes"]["shortNames"] == ["no"] and by_name["nodes"]["namespaced"] is False
    assert by_name["namespaces"]["shortNames"] == ["ns"]
    assert by_name["events"]["shortNames"] == ["ev"]
    assert by_name["pods/binding"]["verbs"] == ["create"]
    assert by_name["pods/eviction"]["group"] == "policy" and by_name["pods/eviction"]["kind"] == "Eviction"
    assert set(by_name["pods/status"]["verbs"]) == {"get", "patch", "update"}
    status, groups, _ = await raw.request("GET", "/apis")
    names = {g["name"] for g in groups["groups"]}
    assert {"coordination.k8s.io", "admissionregistration.k8s.io", "events.k8s.io"} <= names
    status, group, _ = await raw.request("GET", "/apis/coordination.k8s.io")
    assert group["kind"] == "APIGroup" and group["preferredVersion"]["groupVersion"] == "coordination.k8s.io/v1"
    status, leases, _ = await raw.request("GET", "/apis/coordination.k8s.io/v1")
    assert [r["name"] for r in leases["resources"]] == ["leases"] and leases["resources"][0]["kind"] == "Lease"
    assert (await raw.request("GET", "/apis/nope.example.com"))[0] == 404
    assert (await raw.request("GET", "/api/v1/widgets"))[0] == 404


async def test_default_namespaces_and_nodes_exist(api, sim):
    core = client.CoreV1Api(api)
    names = {ns.metadata.name for ns in (await core.list_namespace()).items}
    assert names == {"default", "kube-system", "kube-public", "kube-node-lease"}
    ns = await core.read_namespace("default")
    assert ns.status.phase == "Active" and ns.metadata.labels["kubernetes.io/metadata.name"] == "default"
    nodes = (await core.list_node()).items
    assert [n.metadata.name for n in nodes] == ["node-0", "node-1"]
    node = nodes[0]
    assert node.metadata.labels["kubernetes.io/hostname"] == "node-0"
    assert node.metadata.labels["kubernetes.io/os"] == "linux"
    assert node.status.capacity == node.status.allocatable
    assert node.status.allocatable["nvidia.com/gpu"] == "8" and node.status.allocatable["pods"] == "110"
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]


async def test_add_node_without_gpus_omits_the_resource(sim):
    node = await sim.add_node("cpu-only", gpus=0, labels={"pool": "cpu"},
                              taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}], ready=False)
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    assert node["metadata"]["labels"]["pool"] == "cpu"
    assert node["spec"]["taints"][0]["key"] == "dedicated"
    assert node["status"]["conditions"][0]["status"] == "False"


async def test_nodes_can_be_created_through_the_api(api):
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": "gpu-9"}, "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "4"}}}
    created = await core.create_node(body)
    assert created.status.allocatable == {"cpu": "8", "nvidia.com/gpu": "4"}
    assert (await core.read_node("gpu-9")).metadata.uid == created.metadata.uid


async def test_create_fills_metadata_and_resource_versions_increase(api):
    core = client.CoreV1Api(api)
    first = await core.create_namespaced_pod("default", pod_manifest("a"))
    second = await core.create_namespaced_pod("default", pod_manifest("b"))
    assert re.fullmatch(r"[0-9a-f-]{36}", first.metadata.uid)
    assert first.metadata.uid != second.metadata.uid
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    listed = await core.list_namespaced_pod("default")
    assert int(listed.metadata.resource_version) >= int(second.metadata.resource_version)
    assert first.metadata.creation_timestamp is not None and first.metadata.namespace == "default"


async def test_creation_timestamp_is_rfc3339_utc(raw):
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("ts"))
    assert status == 201
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["metadata"]["creationTimestamp"])
    assert body["metadata"]["resourceVersion"].isdigit()


async def test_generate_name(api):
    core = client.CoreV1Api(api)
    body = pod_manifest("")
    body["metadata"] = {"generateName": "worker-"}
    created = await core.create_namespaced_pod("default", body)
    assert re.fullmatch(r"worker-[a-z0-9]{5}", created.metadata.name)
    assert created.metadata.generate_name == "worker-"


async def test_already_exists_and_not_found_are_status_objects(raw):
    await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("dup"))
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("dup"))
    assert status == 409
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["reason"] == "AlreadyExists"
    assert body["message"] == 'pods "dup" already exists'
    assert body["details"] == {"name": "dup", "kind": "pods"}
    status, body, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/ghost")
    assert status == 404 and body["reason"] == "NotFound" and body["message"] == 'pods "ghost" not found'
    status, body, _ = await raw.request("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/ghost")
    assert body["message"] == 'leases.coordination.k8s.io "ghost" not found'
    assert body["details"]["group"] == "coordination.k8s.io"


async def test_missing_namespace_is_not_found(api):
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("nowhere", pod_manifest("x"))
    assert info.value.status == 404
    assert status_of(info.value)["message"] == 'namespaces "nowhere" not found'


async def test_namespace_mismatch_is_bad_request(raw):
    body = pod_manifest("x", namespace="kube-system")
    status, answer, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", body)
    assert status == 400 and answer["reason"] == "BadRequest"
    assert "does not match the namespace" in answer["message"]


async def test_malformed_json_is_bad_request(raw):
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", b"{not json")
    assert status == 400 and body["reason"] == "BadRequest"


async def test_method_not_allowed(raw):
    status, body, _ = await raw.request("PUT", "/api/v1/namespaces/default/pods", {})
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    status, body, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/x/binding")
    assert status == 405


async def test_update_with_stale_resource_version_conflicts(api):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("c"))
    created.metadata.labels = {"step": "1"}
    updated = await core.replace_namespaced_pod("c", "default", created)
    assert updated.metadata.labels == {"step": "1"}
    created.metadata.labels = {"step": "2"}  # still carries the first resourceVersion
    with pytest.raises(ApiException) as info:
        await core.replace_namespaced_pod("c", "default", created)
    assert info.value.status == 409
    assert status_of(info.value)["message"] == (
        'Operation cannot be fulfilled on pods "c": the object has been modified; please apply your '
        "changes to the latest version and try again")
    assert status_of(info.value)["reason"] == "Conflict"


async def test_patch_carrying_a_stale_resource_version_conflicts(api):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("p"))
    await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "1"}}})
    stale = {"metadata": {"labels": {"a": "2"}, "resourceVersion": created.metadata.resource_version}}
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod("p", "default", stale)
    assert info.value.status == 409 and "Conflict" in info.value.body


async def test_noop_update_keeps_the_resource_version(api):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("same", labels={"a": "1"}))
    again = await core.patch_namespaced_pod("same", "default", {"metadata": {"labels": {"a": "1"}}})
    assert again.metadata.resource_version == created.metadata.resource_version


async def test_resource_version_is_global_across_resources(api):
    core = client.CoreV1Api(api)
    coordination = client.CoordinationV1Api(api)
    pod = await core.create_namespaced_pod("default", pod_manifest("g"))
    lease = await coordination.create_namespaced_lease("default", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}})
    assert int(lease.metadata.resource_version) == int(pod.metadata.resource_version) + 1


async def test_leases_crud_with_optimistic_concurrency(api):
    leases = client.CoordinationV1Api(api)
    body = {"metadata": {"name": "ganggate"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = await leases.create_namespaced_lease("kube-system", body)
    assert created.spec.holder_identity == "a"
    created.spec.holder_identity = "b"
    taken = await leases.replace_namespaced_lease("ganggate", "kube-system", created)
    assert taken.spec.holder_identity == "b"
    created.spec.holder_identity = "c"
    with pytest.raises(ApiException) as info:
        await leases.replace_namespaced_lease("ganggate", "kube-system", created)
    assert info.value.status == 409
    assert [lease.metadata.name for lease in (await leases.list_namespaced_lease("kube-system")).items] == ["ganggate"]
    await leases.delete_namespaced_lease("ganggate", "kube-system")
    with pytest.raises(ApiException) as info:
        await leases.read_namespaced_lease("ganggate", "kube-system")
    assert info.value.status == 404


async def test_mutating_webhook_configurations_are_stored(api):
    admission = client.AdmissionregistrationV1Api(api)
    body = {
        "metadata": {"name": "ganggate"},
        "webhooks": [{
            "name": "gate.ganggate.io",
            "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Ignore",
        }],
    }
    created = await admission.create_mutating_webhook_configuration(body)
    assert created.metadata.generation == 1
    listed = await admission.list_mutating_webhook_configuration()
    assert [c.metadata.name for c in listed.items] == ["ganggate"]
    bad = {"metadata": {"name": "bad"}, "webhooks": [{"name": "nodots", "clientConfig": {}}]}
    with pytest.raises(ApiException) as info:
        await admission.create_mutating_webhook_configuration(bad)
    assert info.value.status == 422


async def test_events_core_and_events_k8s_io(api):
    core = client.CoreV1Api(api)
    event = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "GangReleased", "message": "released", "type": "Normal",
    }
    await core.create_namespaced_event("default", event)
    found = await core.list_namespaced_event("default", field_selector="reason=GangReleased")
    assert [e.metadata.name for e in found.items] == ["e1"]
    events = client.EventsV1Api(api)
    await events.create_namespaced_event("default", {
        "metadata": {"name": "e2"}, "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "ganggate", "reportingInstance": "x", "action": "Release", "reason": "R", "type": "Normal",
    })
    assert [e.metadata.name for e in (await events.list_namespaced_event("default")).items] == ["e2"]


async def test_list_all_namespaces_and_one(api):
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "team-a"}})
    await core.create_namespaced_pod("team-a", pod_manifest("a1"))
    await core.create_namespaced_pod("default", pod_manifest("d1"))
    everywhere = await core.list_pod_for_all_namespaces()
    assert sorted((p.metadata.namespace, p.metadata.name) for p in everywhere.items) == [("default", "d1"), ("team-a", "a1")]
    assert [p.metadata.name for p in (await core.list_namespaced_pod("team-a")).items] == ["a1"]


async def test_label_selectors_equality_and_sets(api):
    core = client.CoreV1Api(api)
    for name, labels in [("a", {"app": "x", "tier": "1"}), ("b", {"app": "y"}), ("c", {"app": "x", "tier": "2"}), ("d", {})]:
        await core.create_namespaced_pod("default", pod_manifest(name, labels=labels))

    async def names(selector: str) -> list[str]:
        return sorted(p.metadata.name for p in (await core.list_namespaced_pod("default", label_selector=selector)).items)

    assert await names("app=x") == ["a", "c"]
    assert await names("app==x,tier=2") == ["c"]
    assert await names("app!=x") == ["b", "d"]
    assert await names("app in (x, y)") == ["a", "b", "c"]
    assert await names("tier notin (1)") == ["b", "c", "d"]
    assert await names("tier") == ["a", "c"]
    assert await names("!tier") == ["b", "d"]


async def test_field_selectors(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("bound", node_name="node-1"))
    await core.create_namespaced_pod("default", pod_manifest("free"))

    async def names(selector: str, namespace: str | None = "default") -> list[str]:
        if namespace is None:
            items = (await core.list_pod_for_all_namespaces(field_selector=selector)).items
        else:
            items = (await core.list_namespaced_pod(namespace, field_selector=selector)).items
        return sorted(p.metadata.name for p in items)

    assert await names("spec.nodeName=node-1") == ["bound"]
    assert await names("spec.nodeName==") == ["free"]
    assert await names("spec.nodeName!=") == ["bound"]
    assert await names("metadata.name=free") == ["free"]
    assert await names("metadata.namespace=default,status.phase=Pending", None) == ["bound", "free"]
    assert await names("status.phase!=Pending") == []
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert info.value.status == 400 and "field label not supported: spec.bogus" in info.value.body


async def test_limit_and_continue_page_through_everything(api):
    core = client.CoreV1Api(api)
    for index in range(7):
        await core.create_namespaced_pod("default", pod_manifest(f"p{index}"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await core.list_namespaced_pod("default", limit=3, _continue=token)
        pages += 1
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3 and seen == [f"p{i}" for i in range(7)]


async def test_continue_token_after_compaction_is_expired(api, sim):
    core = client.CoreV1Api(api)
    for index in range(3):
        await core.create_namespaced_pod("default", pod_manifest(f"q{index}"))
    page = await core.list_namespaced_pod("default", limit=1)
    await core.create_namespaced_pod("default", pod_manifest("later"))
    sim.faults.compact()
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod("default", limit=1, _continue=page.metadata._continue)
    assert info.value.status == 410 and "Expired" in info.value.body


async def test_resource_version_on_get_and_list_is_accepted(api, raw):
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod_manifest("rv"))
    status, got, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/rv?resourceVersion=0")
    assert status == 200 and got["metadata"]["uid"] == created.metadata.uid
    listed = await core.list_namespaced_pod("default", resource_version=created.metadata.resource_version)
    assert [p.metadata.name for p in listed.items] == ["rv"]


async def test_dry_run_validates_and_stores_nothing(api, sim):
    core = client.CoreV1Api(api)
    before = sim.store.resource_version
    answer = await core.create_namespaced_pod("default", pod_manifest("dry"), dry_run="All")
    assert answer.metadata.name == "dry" and answer.status.phase == "Pending"
    assert sim.store.get("pods", "default", "dry") is None and sim.store.resource_version == before
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod_manifest("Bad_Name"), dry_run="All")
    assert info.value.status == 422
    await core.create_namespaced_pod("default", pod_manifest("real"))
    before = sim.store.resource_version
    patched = await core.patch_namespaced_pod("real", "default", {"metadata": {"labels": {"x": "y"}}}, dry_run="All")
    assert patched.metadata.labels == {"x": "y"}
    await core.delete_namespaced_pod("real", "default", dry_run="All")
    stored = sim.store.get("pods", "default", "real")
    assert stored is not None and not stored["metadata"].get("labels")
    assert sim.store.resource_version == before


async def test_delete_is_immediate_and_returns_the_object(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("gone"))
    deleted = await core.delete_namespaced_pod("gone", "default", _preload_content=False)
    body = await deleted.json()
    assert body["metadata"]["name"] == "gone"
    assert sim.store.get("pods", "default", "gone") is None
    with pytest.raises(ApiException) as info:
        await core.delete_namespaced_pod("gone", "default")
    assert info.value.status == 404


async def test_delete_with_a_uid_precondition(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("pre"))
    with pytest.raises(ApiException) as info:
        await core.delete_namespaced_pod("pre", "default", body={"preconditions": {"uid": "not-the-uid"}})
    assert info.value.status == 409 and "Precondition failed" in info.value.body


async def test_delete_collection_by_label(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("k1", labels={"gang": "a"}))
    await core.create_namespaced_pod("default", pod_manifest("k2", labels={"gang": "b"}))
    await core.delete_collection_namespaced_pod("default", label_selector="gang=a")
    assert [p["metadata"]["name"] for p in sim.store.list("pods", "default")] == ["k2"]


async def test_namespace_deletion_removes_its_objects_and_protects_system_ones(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "scratch"}})
    await core.create_namespaced_pod("scratch", pod_manifest("s"))
    await core.delete_namespace("scratch")
    assert sim.store.get("namespaces", None, "scratch") is None
    assert sim.store.list("pods", "scratch") == []
    with pytest.raises(ApiException) as info:
        await core.delete_namespace("default")
    assert info.value.status == 403


async def test_invalid_names_are_rejected_with_field_causes(raw):
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("Not_Valid"))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('Pod "Not_Valid" is invalid: metadata.name: Invalid value: "Not_Valid"')
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    status, body, _ = await raw.request("POST", "/api/v1/namespaces", {"metadata": {"name": "a.b"}})
    assert status == 422  # namespaces are DNS-1123 labels


async def test_bad_labels_and_oversized_annotations_are_invalid(raw):
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods",
                                        pod_manifest("l", labels={"bad key!": "v"}))
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.labels"
    big = {"big": "x" * (256 * 1024)}
    status, body, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("an", annotations=big))
    assert status == 422
    assert any(c["field"] == "metadata.annotations" and "Too long" in c["message"] for c in body["details"]["causes"])


async def test_resource_version_on_create_is_refused(raw):
    body = pod_manifest("withrv")
    body["metadata"]["resourceVersion"] = "5"
    status, answer, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", body)
    assert status == 500 and "resourceVersion should not be set on objects to be created" in answer["message"]


async def test_store_read_access_returns_copies(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("copy"))
    stored = sim.store.get("pods", "default", "copy")
    stored["metadata"]["name"] = "mutated"
    assert sim.store.get("pods", "default", "copy")["metadata"]["name"] == "copy"
    assert [p["metadata"]["name"] for p in sim.store.list("pods")] == ["copy"]


async def test_the_kubeconfig_works_with_kubernetes_asyncio(sim):
    from kubernetes_asyncio import config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=sim.kubeconfig, client_configuration=configuration)
    assert configuration.host == sim.url
    async with client.ApiClient(configuration) as api:
        assert len((await client.CoreV1Api(api).list_node()).items) == 2


async def test_the_harness_runs_the_scheduler_and_kubelet(tmp_path):
    from ganggate.sim import Simulator
    from tests.kubesim_support import eventually

    async with Simulator(nodes=1, gpus_per_node=2, kubeconfig_path=str(tmp_path / "kc")) as full:
        assert (tmp_path / "kc").exists() and full.kubeconfig == str(tmp_path / "kc")
        async with full.api_client() as api:
            await client.CoreV1Api(api).create_namespaced_pod("default", pod_manifest("run", gpus=1))

            def running():
                pod = full.store.get("pods", "default", "run")
                return pod["spec"].get("nodeName") == "node-0" and pod["status"].get("phase") == "Running"

            await eventually(running)


async def test_list_items_have_no_type_meta_but_gets_and_watch_events_do(raw):
    await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("tm"))
    _, listed, _ = await raw.request("GET", "/api/v1/namespaces/default/pods")
    assert listed["kind"] == "PodList" and listed["apiVersion"] == "v1"
    assert "kind" not in listed["items"][0] and "apiVersion" not in listed["items"][0]  # kubernetes#3030
    _, got, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/tm")
    assert (got["apiVersion"], got["kind"]) == ("v1", "Pod")
    events = await read_watch(raw, "/api/v1/namespaces/default/pods?watch=true", 1)
    assert events[0]["object"]["kind"] == "Pod"


async def test_a_port_in_use_fails_cleanly(sim):
    from ganggate.sim import Simulator

    with pytest.raises(OSError):
        async with Simulator(nodes=0, scheduler=False, kubelet=False, port=sim.port):
            pass


async def test_list_by_node_name_pages_through_the_node_index(api):
    core = client.CoreV1Api(api)
    for index in range(5):
        await core.create_namespaced_pod("default", pod_manifest(f"n{index}", node_name="node-1" if index % 2 == 0 else "node-0"))
    seen, token = [], None
    while True:
        page = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1,status.phase=Pending",
                                                      limit=2, _continue=token)
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == ["n0", "n2", "n4"]
    other = await core.list_namespaced_pod("default", field_selector="spec.nodeName==node-0")
    assert [p.metadata.name for p in other.items] == ["n1", "n3"]


async def test_event_validation(api):
    core = client.CoreV1Api(api)
    wrong = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "kube-system"},
             "reason": "R", "message": "m"}
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_event("default", wrong)
    assert info.value.status == 422
    assert "involvedObject.namespace: Invalid value: \"kube-system\": does not match event.namespace" in status_of(info.value)["message"]
    events = client.EventsV1Api(api)
    with pytest.raises(ApiException) as info:
        await events.create_namespaced_event("default", {"metadata": {"name": "e2"}, "reason": "R"})
    assert info.value.status == 422
    fields = {c["field"] for c in status_of(info.value)["details"]["causes"]}
    assert {"eventTime", "reportingController", "reportingInstance", "action"} <= fields
