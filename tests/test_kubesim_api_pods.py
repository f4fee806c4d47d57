"""Pods through kubesim's API: defaulting, scheduling gates (KEP-3521), mutable scheduling
directives of gated pods (KEP-3838), immutability, the binding, eviction and status subresources,
and the three patch types — over HTTP with kubernetes-asyncio.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.kubesim_support import GATE, pod_manifest, status_of

GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


async def _expect_invalid(call) -> dict:
    with pytest.raises(ApiException) as info:
        await call
    assert info.value.status == 422, info.value.body
    status = status_of(info.value)
    assert status["reason"] == "Invalid" and status["kind"] == "Status"
    return status


async def test_pod_defaulting_at_create(api):
    core = client.CoreV1Api(api)
    body = pod_manifest("d", gpus=2, cpu="1")
    body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m"}
    pod = await core.create_namespaced_pod("default", body)
    assert pod.spec.scheduler_name == "default-scheduler"
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.priority == 0
    assert pod.status.phase == "Pending"
    resources = pod.spec.containers[0].resources
    # Requests default to limits only where no request is given (SetDefaults_Pod).
    assert resources.requests == {"cpu": "500m", "nvidia.com/gpu": "2"}
    assert pod.status.conditions is None
    assert pod.metadata.generation == 1


async def test_given_priority_and_scheduler_are_kept(api):
    # The Priority admission plugin resolves spec.priority from the class (plugin/pkg/admission/priority).
    await client.SchedulingV1Api(api).create_priority_class(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "hundred"}, "value": 100})
    core = client.CoreV1Api(api)
    pod = await core.create_namespaced_pod("default", pod_manifest("p", priorityClassName="hundred", schedulerName="volcano"))
    assert pod.spec.priority == 100 and pod.spec.scheduler_name == "volcano"


async def test_gated_pod_reads_scheduling_gated(api):
    core = client.CoreV1Api(api)
    pod = await core.create_namespaced_pod("default", pod_manifest("g", gates=[GATE]))
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
    [condition] = pod.status.conditions
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "PodScheduled", "False", "SchedulingGated", GATED_MESSAGE)


async def test_gate_names_must_be_qualified_and_unique(api):
    core = client.CoreV1Api(api)
    status = await _expect_invalid(core.create_namespaced_pod("default", pod_manifest("u", gates=[GATE, GATE])))
    assert {"field": "spec.schedulingGates[1].name", "reason": "FieldValueDuplicate",
            "message": f'Duplicate value: "{GATE}"'} in status["details"]["causes"]
    status = await _expect_invalid(core.create_namespaced_pod("default", pod_manifest("q", gates=["bad gate!"])))
    assert status["details"]["causes"][0]["field"] == "spec.schedulingGates[0].name"


async def test_created_with_node_name_and_gates_is_forbidden(api):
    core = client.CoreV1Api(api)
    status = await _expect_invalid(
        core.create_namespaced_pod("default", pod_manifest("n", gates=[GATE], node_name="node-0")))
    assert status["message"] == ('Pod "n" is invalid: spec.nodeName: Forbidden: cannot be set until all '
                                 "schedulingGates have been cleared")


async def test_gates_may_be_removed_but_never_added(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("r", gates=[GATE, "example.com/other"]))
    status = await _expect_invalid(core.patch_namespaced_pod(
        "r", "default", [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "example.com/new"}}]))
    assert status["message"] == ('Pod "r" is invalid: spec.schedulingGates[2].name: Forbidden: only deletion is '
                                 "allowed, but found new scheduling gate 'example.com/new'")
    pod = await core.patch_namespaced_pod(
        "r", "default", [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert [g.name for g in pod.spec.scheduling_gates] == ["example.com/other"]
    assert pod.metadata.generation == 2
    pod = await core.patch_namespaced_pod("r", "default", {"spec": {"schedulingGates": None}})
    assert pod.spec.scheduling_gates is None
    # Removing the gates does not change status: the scheduler moves the condition on.
    assert pod.status.conditions[0].reason == "SchedulingGated"
    status = await _expect_invalid(core.patch_namespaced_pod(
        "r", "default", {"spec": {"schedulingGates": [{"name": GATE}]}}))
    assert "only deletion is allowed, but found new scheduling gate" in status["message"]


async def test_gated_pod_may_gain_node_selector_entries_only(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("s", gates=[GATE], nodeSelector={"pool": "a"}))
    pod = await core.patch_namespaced_pod("s", "default", {"spec": {"nodeSelector": {"kubernetes.io/hostname": "node-1"}}})
    assert pod.spec.node_selector == {"pool": "a", "kubernetes.io/hostname": "node-1"}
    status = await _expect_invalid(core.patch_namespaced_pod("s", "default", {"spec": {"nodeSelector": {"pool": "b"}}}))
    assert status["details"]["causes"][0]["field"] == "spec.nodeSelector"
    assert "only additions to spec.nodeSelector are allowed (no mutations or deletions)" in status["message"]
    await _expect_invalid(core.patch_namespaced_pod("s", "default", {"spec": {"nodeSelector": {"pool": None}}}))


async def test_ungated_pod_node_selector_is_immutable(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("i"))
    status = await _expect_invalid(core.patch_namespaced_pod("i", "default", {"spec": {"nodeSelector": {"x": "y"}}}))
    assert status["message"].startswith('Pod "i" is invalid: spec: Forbidden: pod updates may not change fields other than '
                                        "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                                        "`spec.tolerations` (only additions to existing tolerations),"
                                        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")


def _affinity(*expressions: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}


async def test_gated_pod_required_affinity_may_only_be_narrowed(api):
    core = client.CoreV1Api(api)
    zone = {"key": "zone", "operator": "In", "values": ["a", "b"]}
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]}
    # No required affinity yet: any may be added.
    await core.create_namespaced_pod("default", pod_manifest("free", gates=[GATE]))
    pod = await core.patch_namespaced_pod("free", "default", {"spec": {"affinity": _affinity(zone)}})
    assert pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution is not None
    # Existing terms keep their expressions; new expressions may be ANDed in.
    await core.create_namespaced_pod("default", pod_manifest("narrow", gates=[GATE], affinity=_affinity(zone)))
    pod = await core.replace_namespaced_pod("narrow", "default", _with_affinity(api,
        await core.read_namespaced_pod("narrow", "default"), _affinity(zone, host)))
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert len(terms[0].match_expressions) == 2
    # Dropping or changing an existing expression widens the choice: refused.
    status = await _expect_invalid(core.replace_namespaced_pod("narrow", "default", _with_affinity(api,
        await core.read_namespaced_pod("narrow", "default"), _affinity(host))))
    assert "only additions are allowed (no mutations or deletions)" in status["message"]
    # Adding a whole term (ORed) widens it too.
    two_terms = _affinity(zone, host)
    two_terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].append(
        {"matchExpressions": [host]})
    status = await _expect_invalid(core.replace_namespaced_pod("narrow", "default", _with_affinity(api,
        await core.read_namespaced_pod("narrow", "default"), two_terms)))
    assert "no additions/deletions to non-empty NodeSelectorTerms list are allowed" in status["message"]


def _with_affinity(api, pod, affinity: dict):
    body = api.sanitize_for_serialization(pod)
    body["spec"]["affinity"] = affinity
    return body


async def test_ungated_pod_affinity_is_immutable(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("fixed"))
    await _expect_invalid(core.patch_namespaced_pod(
        "fixed", "default", {"spec": {"affinity": _affinity({"key": "z", "operator": "Exists"})}}))


async def test_tolerations_may_be_added_not_changed(api):
    core = client.CoreV1Api(api)
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    await core.create_namespaced_pod("default", pod_manifest("t", tolerations=[toleration]))
    current = (await core.read_namespaced_pod("t", "default")).spec.tolerations
    body = [api.sanitize_for_serialization(t) for t in current]
    added = body + [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    pod = await core.patch_namespaced_pod("t", "default", {"spec": {"tolerations": added}})
    assert {t.key for t in pod.spec.tolerations} >= {"gpu", "spot"}
    status = await _expect_invalid(core.patch_namespaced_pod(
        "t", "default", {"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}}))
    assert status["message"].endswith(
        "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds")


async def test_image_and_active_deadline_are_mutable(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("m", activeDeadlineSeconds=100))
    pod = await core.patch_namespaced_pod("m", "default", {"spec": {
        "containers": [{"name": "main", "image": "busybox:1.37"}], "activeDeadlineSeconds": 50}})
    assert pod.spec.containers[0].image == "busybox:1.37" and pod.spec.active_deadline_seconds == 50
    status = await _expect_invalid(core.patch_namespaced_pod("m", "default", {"spec": {"activeDeadlineSeconds": 60}}))
    assert "must be less than or equal to previous value" in status["message"]
    status = await _expect_invalid(core.patch_namespaced_pod("m", "default", {"spec": {
        "containers": [{"name": "main", "resources": {"limits": {"cpu": "2"}}}]}}))
    assert "pod updates may not change fields other than" in status["message"]
    status = await _expect_invalid(core.patch_namespaced_pod("m", "default", {"spec": {
        "containers": [{"name": "sidecar", "image": "x"}]}}))
    assert "spec.containers: Forbidden: pod updates may not add or remove containers" in status["message"]


async def test_main_resource_update_ignores_status(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("st"))
    pod = await core.patch_namespaced_pod("st", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}})
    assert pod.status.phase == "Pending" and pod.metadata.labels == {"a": "b"}


async def test_status_subresource_changes_only_status(api, raw):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("ss"))
    pod = await core.patch_namespaced_pod_status("ss", "default", {
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {"nodeSelector": {"ignored": "yes"}}})
    assert pod.status.phase == "Running" and pod.spec.node_selector is None
    assert [(c.type, c.status) for c in pod.status.conditions] == [("Ready", "True")]
    # Conditions merge by type (patchMergeKey "type").
    pod = await core.patch_namespaced_pod_status("ss", "default", {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}})
    assert sorted(c.type for c in pod.status.conditions) == ["PodScheduled", "Ready"]
    current = await core.read_namespaced_pod_status("ss", "default")
    current.status.phase = "Succeeded"
    replaced = await core.replace_namespaced_pod_status("ss", "default", current)
    assert replaced.status.phase == "Succeeded"
    status, body, _ = await raw.request("PATCH", "/api/v1/namespaces/default/pods/ss/status",
                                        {"status": {"phase": "Bogus"}}, "application/merge-patch+json")
    assert status == 422


async def test_binding_sets_node_name_and_pod_scheduled(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("b"))
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"kind": "Node", "name": "node-1"}}
    await core.create_namespaced_pod_binding("b", "default", body, _preload_content=False)
    pod = await core.read_namespaced_pod("b", "default")
    assert pod.spec.node_name == "node-1"
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]
    assert [p["metadata"]["name"] for p in sim.store.pods_on_node("node-1")] == ["b"]
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod_binding("b", "default", dict(body, target={"kind": "Node", "name": "node-0"}))
    assert info.value.status == 409
    assert status_of(info.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "b": pod b is already assigned to node "node-1"')


async def test_binding_through_the_bindings_resource(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("old-style"))
    await core.create_namespaced_binding(
        "default", {"metadata": {"name": "old-style"}, "target": {"kind": "Node", "name": "node-0"}}, _preload_content=False)
    assert (await core.read_namespaced_pod("old-style", "default")).spec.node_name == "node-0"


async def test_binding_a_gated_pod_is_refused(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("gb", gates=[GATE]))
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod_binding(
            "gb", "default", {"metadata": {"name": "gb"}, "target": {"kind": "Node", "name": "node-0"}})
    assert info.value.status == 409
    assert status_of(info.value)["message"].endswith("pod gb has non-empty .spec.schedulingGates")


async def test_binding_to_an_unknown_node_is_allowed_as_in_the_real_server(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("nn"))
    await core.create_namespaced_pod_binding(
        "nn", "default", {"metadata": {"name": "nn"}, "target": {"kind": "Node", "name": "ghost"}}, _preload_content=False)
    assert (await core.read_namespaced_pod("nn", "default")).spec.node_name == "ghost"


async def test_binding_missing_pod_and_bad_target(api):
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod_binding("none", "default", {"metadata": {"name": "none"}, "target": {"name": "node-0"}})
    assert info.value.status == 404
    await core.create_namespaced_pod("default", pod_manifest("bt"))
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod_binding("bt", "default", {"metadata": {"name": "bt"}, "target": {"kind": "Pod", "name": "x"}})
    assert info.value.status == 422


async def test_eviction_deletes_the_pod(api, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("ev"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev", "namespace": "default"}}
    await core.create_namespaced_pod_eviction("ev", "default", eviction, _preload_content=False)
    assert sim.store.get("pods", "default", "ev") is None
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod_eviction("ev", "default", eviction)
    assert info.value.status == 404


async def test_json_patch(api):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("jp", labels={"a": "1"}))
    pod = await core.patch_namespaced_pod("jp", "default", [
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
        {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
    ])
    assert pod.metadata.labels == {"a": "2"} and pod.metadata.annotations == {"x": "y"}
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod("jp", "default", [{"op": "test", "path": "/metadata/labels/a", "value": "9"}])
    assert info.value.status == 422
    assert status_of(info.value)["message"] == "the server rejected our request due to an error in our request"
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod("jp", "default", [{"op": "remove", "path": "/metadata/finalizers/0"}])
    assert info.value.status == 422


async def test_merge_patch_replaces_lists(raw):
    await raw.request("POST", "/api/v1/namespaces/default/pods",
                      pod_manifest("mp", gates=[GATE, "example.com/b"]))
    status, body, _ = await raw.request("PATCH", "/api/v1/namespaces/default/pods/mp",
                                        {"spec": {"schedulingGates": [{"name": "example.com/b"}]}},
                                        "application/merge-patch+json")
    assert status == 200 and body["spec"]["schedulingGates"] == [{"name": "example.com/b"}]


async def test_strategic_merge_patch_merges_by_patch_merge_key(raw):
    manifest = pod_manifest("smp", gates=[GATE, "example.com/b"])
    manifest["spec"]["containers"].append({"name": "side", "image": "side:1"})
    await raw.request("POST", "/api/v1/namespaces/default/pods", manifest)
    smp = "application/strategic-merge-patch+json"
    # Containers merge by name: only the named container's image changes.
    status, body, _ = await raw.request("PATCH", "/api/v1/namespaces/default/pods/smp",
                                        {"spec": {"containers": [{"name": "side", "image": "side:2"}]}}, smp)
    assert status == 200
    assert [(c["name"], c["image"]) for c in body["spec"]["containers"]] == [("main", "busybox:1.36"), ("side", "side:2")]
    # A gate is removed with $patch: delete (merge key "name").
    status, body, _ = await raw.request("PATCH", "/api/v1/namespaces/default/pods/smp",
                                        {"spec": {"schedulingGates": [{"name": GATE, "$patch": "delete"}]}}, smp)
    assert status == 200 and body["spec"]["schedulingGates"] == [{"name": "example.com/b"}]
    # kubectl's $setElementOrder directives are accepted.
    status, body, _ = await raw.request("PATCH", "/api/v1/namespaces/default/pods/smp", {
        "metadata": {"labels": {"x": "1"}},
        "spec": {"$setElementOrder/containers": [{"name": "main"}, {"name": "side"}]}}, smp)
    assert status == 200 and body["metadata"]["labels"] == {"x": "1"}


async def test_strategic_merge_patch_replaces_taints_and_merges_node_conditions(api):
    core = client.CoreV1Api(api)
    await core.patch_node("node-0", {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}})
    node = await core.patch_node("node-0", {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}})
    assert [t.key for t in node.spec.taints] == ["b"]
    node = await core.patch_node_status("node-0", {"status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"}]}})
    assert sorted(c.type for c in node.status.conditions) == ["MemoryPressure", "Ready"]
    node = await core.patch_node_status("node-0", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "False"
    cordoned = await core.patch_node("node-0", {"spec": {"unschedulable": True}})
    assert cordoned.spec.unschedulable is True


async def test_node_update_ignores_status_and_node_validation(api):
    core = client.CoreV1Api(api)
    node = await core.patch_node("node-1", {"status": {"allocatable": {"nvidia.com/gpu": "1"}}})
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    with pytest.raises(ApiException) as info:
        await core.patch_node("node-1", {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    assert info.value.status == 422


async def test_apply_patch_is_unsupported_media_type(raw):
    await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("ap"))
    status, body, _ = await raw.request("PATCH", "/api/v1/namespaces/default/pods/ap", "metadata: {}",
                                        "application/apply-patch+yaml")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


async def test_container_validation(api):
    core = client.CoreV1Api(api)
    body = pod_manifest("cv")
    body["spec"]["containers"] = [{"name": "a", "image": "x"}, {"name": "a", "image": ""}]
    status = await _expect_invalid(core.create_namespaced_pod("default", body))
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"spec.containers[1].name", "spec.containers[1].image"} <= fields
    body = pod_manifest("cv2")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    status = await _expect_invalid(core.create_namespaced_pod("default", body))
    assert "must be less than or equal to cpu limit of 1" in status["message"]
    body = pod_manifest("cv3")
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    await _expect_invalid(core.create_namespaced_pod("default", body))
    body = pod_manifest("cv4")
    body["spec"]["containers"] = []
    await _expect_invalid(core.create_namespaced_pod("default", body))
