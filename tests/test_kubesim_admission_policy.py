"""kubesim serves ValidatingAdmissionPolicies and their bindings and enforces them as kube-apiserver
does: what a client sees when a policy denies, warns or fails, and when the objects are invalid."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.kubesim_support import pod_manifest, status_of

RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}


def policy(name: str, *validations: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [RULE]}, "validations": list(validations), **spec}}
    return body


def binding(name: str, policy_name: str, actions: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": policy_name, "validationActions": actions or ["Deny"], **spec}}


async def install(api: Any, vap: dict[str, Any], actions: list[str] | None = None, **binding_spec: Any) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    await admission.create_validating_admission_policy(vap)
    await admission.create_validating_admission_policy_binding(
        binding(vap["metadata"]["name"], vap["metadata"]["name"], actions, **binding_spec))


async def create_pod(api: Any, body: dict[str, Any]) -> Any:
    return await client.CoreV1Api(api).create_namespaced_pod("default", body)


async def test_a_deny_refuses_with_the_policys_message_reason_and_code(api):
    await install(api, policy("no-latest", {"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
                                            "message": "images must be pinned", "reason": "Forbidden"}))
    bad = pod_manifest("p1")
    bad["spec"]["containers"][0]["image"] = "busybox:latest"
    with pytest.raises(ApiException) as refused:
        await create_pod(api, bad)
    status = status_of(refused.value)
    assert refused.value.status == 403 and status["reason"] == "Forbidden"
    assert status["message"] == ('pods "p1" is forbidden: ValidatingAdmissionPolicy \'no-latest\' with binding '
                                 "'no-latest' denied request: images must be pinned")
    assert (await create_pod(api, pod_manifest("p2"))).metadata.name == "p2"
    listed = await client.CoreV1Api(api).list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["p2"]  # nothing stored for the refused pod


async def test_message_expression_variables_and_the_default_reason(api):
    vap = policy("max-gpus", {"expression": "variables.gpus <= 2", "message": "too many",
                              "messageExpression": "'asks ' + string(variables.gpus) + ' GPUs, at most 2'"},
                 variables=[{"name": "gpus", "expression":
                             "object.spec.containers.map(c, has(c.resources) && has(c.resources.limits) && "
                             "'nvidia.com/gpu' in c.resources.limits ? int(c.resources.limits['nvidia.com/gpu']) : 0)"
                             ".exists(n, n > 2) ? 3 : 0"}])
    await install(api, vap)
    with pytest.raises(ApiException) as refused:
        await create_pod(api, pod_manifest("big", gpus=4))
    assert refused.value.status == 422 and status_of(refused.value)["reason"] == "Invalid"
    assert status_of(refused.value)["message"].endswith("denied request: asks 3 GPUs, at most 2")
    await create_pod(api, pod_manifest("small", gpus=1))


async def test_warn_answers_with_a_warning_header_and_stores_the_object(api, raw):
    await install(api, policy("labelled", {"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                                           "message": "pods should carry a team label"}), actions=["Warn", "Audit"])
    code, body, headers = await raw.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("p"))
    assert code == 201
    assert headers["Warning"] == ('299 - "Validation failed for ValidatingAdmissionPolicy \'labelled\' with binding '
                                  "'labelled': pods should carry a team label\"")


async def test_failure_policy_decides_an_evaluation_error(api):
    broken = {"expression": "object.metadata.labels.team == 'a'"}  # no such key on an unlabelled pod
    await install(api, policy("strict", broken, failurePolicy="Fail"))
    await install(api, policy("lenient", broken, failurePolicy="Ignore"))
    with pytest.raises(ApiException) as refused:
        await create_pod(api, pod_manifest("p"))
    message = status_of(refused.value)["message"]
    assert "ValidatingAdmissionPolicy 'strict'" in message and "resulted in error: no such key: labels" in message
    await client.AdmissionregistrationV1Api(api).delete_validating_admission_policy("strict")
    await create_pod(api, pod_manifest("p"))  # the Ignore policy lets it through


async def test_match_conditions_selectors_and_excluded_resources(api):
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "free", "labels": {"policy": "off"}}})
    deny_all = {"expression": "false", "message": "no"}
    vap = policy("scoped", deny_all, matchConditions=[{"name": "gang", "expression":
                                                        "has(object.metadata.annotations) && 'gang' in object.metadata.annotations"}])
    vap["spec"]["matchConstraints"]["namespaceSelector"] = {"matchExpressions": [
        {"key": "policy", "operator": "NotIn", "values": ["off"]}]}
    await install(api, vap)
    await create_pod(api, pod_manifest("plain"))  # matchCondition false
    await core.create_namespaced_pod("free", pod_manifest("g", annotations={"gang": "x"}))  # namespace excluded
    with pytest.raises(ApiException):
        await create_pod(api, pod_manifest("g", annotations={"gang": "x"}))
    # A binding's own matchResources narrow it further: here to one pod name.
    admission = client.AdmissionregistrationV1Api(api)
    await admission.delete_validating_admission_policy_binding("scoped")
    await admission.create_validating_admission_policy_binding(binding("scoped", "scoped", matchResources={
        "resourceRules": [dict(RULE, resourceNames=["only-me"])]}))
    await create_pod(api, pod_manifest("g", annotations={"gang": "x"}))
    with pytest.raises(ApiException):
        await create_pod(api, pod_manifest("only-me", annotations={"gang": "x"}))


async def test_update_sees_old_object_and_delete_is_matched_too(api):
    await install(api, policy("keep-team", {
        "expression": "request.operation != 'UPDATE' || oldObject.metadata.labels.team == object.metadata.labels.team",
        "messageExpression": "'team is immutable: was ' + oldObject.metadata.labels.team"}))
    await install(api, policy("no-delete", {"expression": "request.operation != 'DELETE' || "
                                            "!('keep' in oldObject.metadata.labels)", "message": "kept"},
                              matchConstraints={"resourceRules": [dict(RULE, operations=["DELETE"])]}))
    core = client.CoreV1Api(api)
    await create_pod(api, pod_manifest("p", labels={"team": "a", "keep": "yes"}))
    with pytest.raises(ApiException) as refused:
        await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"team": "b"}}})
    assert status_of(refused.value)["message"].endswith("denied request: team is immutable: was a")
    with pytest.raises(ApiException) as kept:
        await core.delete_namespaced_pod("p", "default")
    assert status_of(kept.value)["message"].endswith("denied request: kept")
    assert (await core.read_namespaced_pod("p", "default")).metadata.labels["team"] == "a"


async def test_invalid_policies_and_bindings_are_refused_with_field_errors(api):
    admission = client.AdmissionregistrationV1Api(api)
    bad = policy("bad", {"expression": "object.spec.(", "reason": "Teapot"})
    with pytest.raises(ApiException) as refused:
        await admission.create_validating_admission_policy(bad)
    causes = {c["field"]: c["message"] for c in status_of(refused.value)["details"]["causes"]}
    assert causes["spec.validations[0].expression"].startswith('Invalid value: "object.spec.(": compilation failed')
    assert causes["spec.validations[0].reason"].startswith('Unsupported value: "Teapot"')
    params = policy("params", {"expression": "true"}, paramKind={"apiVersion": "v1", "kind": "ConfigMap"})
    with pytest.raises(ApiException) as refused:
        await admission.create_validating_admission_policy(params)
    assert "kubesim does not support policy parameters" in status_of(refused.value)["message"]
    with pytest.raises(ApiException) as refused:
        await admission.create_validating_admission_policy_binding(binding("b", "p", ["Deny", "Warn"]))
    assert "must not contain both Deny and Warn" in status_of(refused.value)["message"]
    assert (await admission.list_validating_admission_policy()).items == []


async def test_a_stored_policy_is_defaulted_and_counts_generations(api):
    admission = client.AdmissionregistrationV1Api(api)
    created = await admission.create_validating_admission_policy(policy("p", {"expression": "true"}))
    assert created.spec.failure_policy == "Fail" and created.metadata.generation == 1
    assert created.spec.match_constraints.match_policy == "Equivalent"
    assert created.spec.match_constraints.resource_rules[0].scope == "*"
    body = copy.deepcopy(policy("p", {"expression": "1 == 1"}))
    body["metadata"]["resourceVersion"] = created.metadata.resource_version
    replaced = await admission.replace_validating_admission_policy("p", body)
    assert replaced.metadata.generation == 2


async def test_expressions_beyond_the_compiled_subset_still_see_the_variables(api):
    """type() is not compiled: cel-python evaluates it, with the variables computed for it."""
    await install(api, policy("typed", {"expression": "type(variables.count) == int", "message": "not an int"},
                              variables=[{"name": "count", "expression": "size(object.spec.containers)"},
                                         {"name": "broken", "expression": "object.metadata.missing"}]))
    await create_pod(api, pod_manifest("p"))


async def test_a_replaced_policy_decides_the_next_request_with_the_namespace_and_request_it_names(api):
    core = client.CoreV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    await core.create_namespace({"metadata": {"name": "team-a", "labels": {"team": "a"}}})
    await install(api, policy("same-team", {
        "expression": "object.metadata.labels.team == namespaceObject.metadata.labels.team",
        "messageExpression": "'team must be ' + namespaceObject.metadata.labels.team"}))
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod("team-a", pod_manifest("b", labels={"team": "b"}))
    assert status_of(refused.value)["message"].endswith("denied request: team must be a")
    await core.create_namespaced_pod("team-a", pod_manifest("a", labels={"team": "a"}))
    body = policy("same-team", {"expression": "request.name != 'c'", "message": "not c"})
    body["metadata"]["resourceVersion"] = (await admission.read_validating_admission_policy("same-team")).metadata.resource_version
    await admission.replace_validating_admission_policy("same-team", body)
    await core.create_namespaced_pod("team-a", pod_manifest("b", labels={"team": "b"}))  # the old check is gone
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod("team-a", pod_manifest("c", labels={"team": "a"}))
    assert status_of(refused.value)["message"].endswith("denied request: not c")
