"""kubesim's MutatingAdmissionPolicy (admissionregistration.k8s.io/v1beta1, behind the 1.35 feature gate
MutatingAdmissionPolicy): served only with the gate, validated as the real registry validates, JSONPatch and
ApplyConfiguration mutations, failurePolicy, bindings, and its order and reinvocation against webhooks."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from ganggate.sim import Simulator
from ganggate.sim.apiserver.admission.chain import AdmissionChain
from ganggate.sim.apiserver.admission.mutating_policy import MutatingPolicyChain
from ganggate.sim.apiserver.registry.mutatingadmissionpolicy import BINDING_KEY, POLICY_KEY
from tests.kubesim_support import Raw
from tests.test_kubesim_admission import NAMESPACES, add_label, admit, configuration, gang_pod, hook

GROUP = "/apis/admissionregistration.k8s.io/v1beta1"
RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}


def policy(name: str, *mutations: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [RULE]}, "reinvocationPolicy": "Never",
                     "mutations": list(mutations), **spec}}


def binding(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": {"policyName": name, **spec}}


def json_patch(expression: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def apply_configuration(expression: str) -> dict[str, Any]:
    return {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}


def a_pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}}


@pytest.fixture
async def raw() -> AsyncIterator[Raw]:
    """The API alone, with the MutatingAdmissionPolicy gate on."""
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False,
                         feature_gates="MutatingAdmissionPolicy=true") as sim:
        async with aiohttp.ClientSession() as session:
            yield Raw(sim.url, session)


async def install(raw: Raw, body: dict[str, Any], **binding_spec: Any) -> None:
    code, answer, _ = await raw.request("POST", f"{GROUP}/mutatingadmissionpolicies", body)
    assert code == 201, answer
    code, answer, _ = await raw.request("POST", f"{GROUP}/mutatingadmissionpolicybindings",
                                        binding(body["metadata"]["name"], **binding_spec))
    assert code == 201, answer


async def create(raw: Raw, body: dict[str, Any], namespace: str = "default") -> tuple[int, dict[str, Any]]:
    code, answer, _ = await raw.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    return code, answer


# --- the API ----------------------------------------------------------------------------------------

async def test_the_api_is_served_only_with_its_feature_gate():
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False) as sim:
        async with aiohttp.ClientSession() as session:
            code, _, _ = await Raw(sim.url, session).request("GET", f"{GROUP}/mutatingadmissionpolicies")
    assert code == 404  # 1.35's default: the beta gate is off


async def test_invalid_policies_are_refused_with_the_registry_s_field_errors(raw):
    code, answer, _ = await raw.request("POST", f"{GROUP}/mutatingadmissionpolicies",
                                        {"metadata": {"name": "empty"}, "spec": {}})
    assert code == 422
    fields = {cause["field"]: cause["message"] for cause in answer["details"]["causes"]}
    assert fields == {"spec.matchConstraints": "Required value",
                      "spec.mutations": "Required value: mutations must contain at least one item",
                      "spec.reinvocationPolicy": "Required value"}
    bad = policy("bad", {"patchType": "JSONPatch", "applyConfiguration": {"expression": "Object{}"}},
                 apply_configuration("Object{spec: Object.spec{"), matchConstraints={"resourceRules": [
                     {**RULE, "operations": ["DELETE"]}]})
    code, answer, _ = await raw.request("POST", f"{GROUP}/mutatingadmissionpolicies", bad)
    assert code == 422
    fields = {cause["field"]: cause["message"] for cause in answer["details"]["causes"]}
    assert fields["spec.mutations[0].jsonPatch"] == "Required value: must be specified when patchType is JSONPatch"
    assert fields["spec.mutations[0].applyConfiguration"].endswith("must not be specified when patchType is JSONPatch")
    assert "compilation failed" in fields["spec.mutations[1].applyConfiguration.expression"]
    assert fields["spec.matchConstraints.resourceRules.operations"].startswith('Unsupported value: "DELETE"')


# --- mutations --------------------------------------------------------------------------------------

async def test_mutations_apply_in_order_and_keep_what_they_do_not_name(raw):
    await install(raw, policy(
        "gate",
        apply_configuration("Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: 'x/gate'}]}}"),
        json_patch("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'gates': string(size(object.spec.schedulingGates))}}]"),
    ))
    code, created = await create(raw, a_pod("p", schedulingGates=[{"name": "other"}]))
    assert code == 201, created
    assert created["spec"]["schedulingGates"] == [{"name": "other"}, {"name": "x/gate"}]
    assert created["metadata"]["labels"] == {"gates": "2"}  # the second mutation saw the first's result
    code, again = await create(raw, a_pod("q", schedulingGates=[{"name": "x/gate"}]))
    assert again["spec"]["schedulingGates"] == [{"name": "x/gate"}]  # merged by name: no second gate


async def test_a_failed_json_patch_test_leaves_the_pod_as_it_was(raw):
    await install(raw, policy("tested", json_patch(
        "[JSONPatch{op: 'test', path: '/spec/priority', value: 7}, "
        "JSONPatch{op: 'add', path: '/metadata/labels', value: {'tested': 'yes'}}]")))
    code, created = await create(raw, a_pod("p"))
    assert code == 201 and not created["metadata"].get("labels")


async def test_match_conditions_and_binding_match_resources_choose_the_pods(raw):
    code, _, _ = await raw.request("POST", "/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    assert code == 201
    await install(raw, policy(
        "labelled", json_patch("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'seen': 'yes'}}]"),
        matchConditions=[{"name": "named-w", "expression": "object.metadata.name.startsWith('w')"}]),
        matchResources={"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}})
    assert (await create(raw, a_pod("w-0"), "team-a"))[1]["metadata"]["labels"] == {"seen": "yes"}
    assert not (await create(raw, a_pod("x-0"), "team-a"))[1]["metadata"].get("labels")  # condition false
    assert not (await create(raw, a_pod("w-1")))[1]["metadata"].get("labels")  # namespace not bound


async def test_a_failing_mutation_refuses_the_pod_under_fail_and_is_skipped_under_ignore(raw):
    await install(raw, policy("atomic", apply_configuration(
        "Object{spec: Object.spec{tolerations: [Object.spec.tolerations{key: 'k'}]}}")))
    code, answer = await create(raw, a_pod("p"))
    assert (code, answer["reason"]) == (403, "Invalid")
    assert answer["message"] == ("policy 'atomic' with binding 'atomic' denied request: invalid ApplyConfiguration: "
                                 "may not mutate atomic arrays, maps or structs: .spec.tolerations")
    assert (await raw.request("GET", "/api/v1/namespaces/default/pods/p"))[0] == 404
    await raw.request("DELETE", f"{GROUP}/mutatingadmissionpolicybindings/atomic")
    await install(raw, policy("ignored", json_patch("[JSONPatch{op: 'remove', path: '/spec/nope'}]"),
                              failurePolicy="Ignore"))
    code, created = await create(raw, a_pod("q"))
    assert code == 201 and created["metadata"]["name"] == "q"


async def test_a_json_patch_that_does_not_apply_refuses_the_pod_with_its_error(raw):
    # patch/json_patch.go: any failure but a failed `test` is "JSON Patch: <error>" (the error in the
    # words of kubesim's RFC 6902 applier, shared with PATCH requests and webhooks' patches).
    await install(raw, policy("missing", json_patch("[JSONPatch{op: 'remove', path: '/spec/nope'}]")))
    code, answer = await create(raw, a_pod("p"))
    assert (code, answer["reason"]) == (403, "Invalid")
    assert answer["message"] == ("policy 'missing' with binding 'missing' denied request: "
                                 "JSON Patch: can't remove a non-existent object 'nope'")
    assert (await raw.request("GET", "/api/v1/namespaces/default/pods/p"))[0] == 404


async def test_object_type_names_must_follow_the_field_path(raw):
    await install(raw, policy("typo", apply_configuration(
        "Object{spec: Object.spec{schedulingGates: [Object.spec.gates{name: 'x/gate'}]}}")))
    code, answer = await create(raw, a_pod("p"))
    assert code == 403
    assert answer["message"].endswith('type mismatch: unexpected type name "Object.spec.gates", expected '
                                      '"Object.spec.schedulingGates", which matches field name path from root Object type')


# --- order and reinvocation against webhooks ------------------------------------------------------------

def chain_with(policies: list[dict[str, Any]], *configurations: dict[str, Any]) -> AdmissionChain:
    from ganggate.sim.apiserver.registry.mutatingadmissionpolicy import default_policy

    stored: dict[str, list[dict[str, Any]]] = {POLICY_KEY: [], BINDING_KEY: []}
    for body in policies:
        body = copy.deepcopy(body)
        default_policy(body)
        stored[POLICY_KEY].append(body)
        stored[BINDING_KEY].append(binding(body["metadata"]["name"]))
    mutating = MutatingPolicyChain(lambda key: stored.get(key, []), lambda key: len(stored.get(key, [])),
                                   NAMESPACES.get, default=AdmissionChain._default)
    return AdmissionChain(lambda: [copy.deepcopy(c) for c in configurations], NAMESPACES.get, policies=mutating)


COPY_HOOK_LABEL = json_patch(
    "has(object.metadata.labels) && 'hook' in object.metadata.labels ? "
    "[JSONPatch{op: 'add', path: '/metadata/annotations/copied', value: object.metadata.labels['hook']}] : []")


async def test_policies_run_before_the_webhooks_and_an_if_needed_one_runs_again_after_them(webhook):
    ca = webhook.ca_bundle
    chain = chain_with(
        [policy("a-copy", COPY_HOOK_LABEL, reinvocationPolicy="IfNeeded"),
         policy("b-never", json_patch("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'policy': 'b'}}]"))],
        configuration("hooks", hook("label.example.com", webhook.on("label", add_label("hook", "1")), ca,
                                    reinvocationPolicy="IfNeeded")))
    admitted = await admit(chain, gang_pod())
    # The webhook saw the policies' change on its first call (MutatingAdmissionPolicy runs first).
    first = webhook.calls_to("label")[0]
    assert first.request["object"]["metadata"]["labels"] == {"policy": "b"}
    # a-copy (IfNeeded) ran again in the reinvocation round and saw the webhook's label; the webhook was
    # called again because the policy changed the pod after it.
    assert admitted["metadata"]["annotations"]["copied"] == "1"
    assert admitted["metadata"]["labels"] == {"policy": "b", "hook": "1"}
    assert len(webhook.calls_to("label")) == 2


async def test_a_never_policy_does_not_see_what_the_webhooks_did(webhook):
    chain = chain_with([policy("copy", COPY_HOOK_LABEL)],
                       configuration("hooks", hook("label.example.com", webhook.on("label", add_label("hook", "1")),
                                                   webhook.ca_bundle)))
    admitted = await admit(chain, gang_pod())
    assert admitted["metadata"]["labels"] == {"hook": "1"} and "copied" not in admitted["metadata"]["annotations"]
    assert len(webhook.calls_to("label")) == 1


async def test_without_webhooks_the_policies_alone_admit(webhook):
    chain = chain_with([policy("gate", apply_configuration(
        "Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: 'x/gate'}]}}"))])
    assert (await admit(chain, gang_pod()))["spec"]["schedulingGates"] == [{"name": "x/gate"}]
    assert webhook.calls == []


async def test_discovery_lists_the_beta_version_only_with_the_gate(raw):
    code, group, _ = await raw.request("GET", "/apis/admissionregistration.k8s.io")
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    code, resources, _ = await raw.request("GET", GROUP)
    assert {r["name"] for r in resources["resources"]} == {"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"}
    async with Simulator(nodes=1, scheduler=False, kubelet=False, controllers=False) as sim:
        async with aiohttp.ClientSession() as session:
            off = Raw(sim.url, session)
            code, group, _ = await off.request("GET", "/apis/admissionregistration.k8s.io")
            assert [v["version"] for v in group["versions"]] == ["v1"]
            code, groups, _ = await off.request("GET", "/apis")
            (registration,) = [g for g in groups["groups"] if g["name"] == "admissionregistration.k8s.io"]
            assert [v["version"] for v in registration["versions"]] == ["v1"]
            assert (await off.request("GET", GROUP))[0] == 404


# --- CEL of the mutating environment ------------------------------------------------------------------

def test_json_patch_literals_escape_keys_and_unknown_types_do_not_compile():
    from ganggate.sim.apiserver.admission.cel_mutation import compile_mutation, evaluate_mutation

    patch = evaluate_mutation("[JSONPatch{op: 'add', path: '/metadata/annotations/' + "
                              "jsonpatch.escapeKey('example.com/a~b'), value: 'x'}]", {"object": {}})
    assert patch == [{"op": "add", "path": "/metadata/annotations/example.com~1a~0b", "value": "x"}]
    assert compile_mutation("Pod{spec: 1}").error == "compilation error: undeclared reference to 'Pod'"
    assert compile_mutation("JSONPatch{op: 'add', where: '/x'}").error == "compilation error: undefined field 'where'"


def test_matches_is_anchored_as_re2_anchors_it():
    """RE2's `$` is the end of the text: a trailing newline does not pass a DNS-label check, and the
    policies refuse what the webhook refuses."""
    from ganggate.sim.apiserver.admission.cel import evaluate_value

    assert evaluate_value("'ddp\\n'.matches('^[a-z]+$')", {}) is False
    assert evaluate_value("'ddp'.matches('^[a-z]+$')", {}) is True
    assert evaluate_value("'a$'.matches('a[$]$')", {}) is True
