"""kubesim's mutating admission chain against a real HTTPS webhook server.

Each test starts a small aiohttp webhook over TLS (a CA and serving certificate made with
ganggate.certs.authority), registers MutatingWebhookConfigurations the way the API server stores them,
and calls `AdmissionChain.admit` as the API server does; the webhook records every review it
receives and answers as the test configures it.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.certs.authority import build_ca, cert_pem, key_pem, new_key
from ganggate.sim.apiserver.admission.chain import AdmissionChain, AdmissionDenied, semantically_equal
from tests.admission_webhook_support import Behaviour, Tls, serve

POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}
GANG_CONDITION = "has(object.metadata.annotations) && 'scheduling.k8s.io/group-name' in object.metadata.annotations"
GATE_PATCH = [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "scheduling.k8s.io/group-gate"}]}]

DEPLOYED_CONFIGURATION = Path(__file__).resolve().parents[1] / "deploy" / "base" / "mutatingwebhookconfiguration.yaml"

NAMESPACES = {
    name: {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}
    for name in ("default", "kube-system", "team-a")
}


def allow(patch: list | None = None, **extra: Any) -> Behaviour:
    def answer(request: dict) -> dict:
        response = {"uid": request["uid"], "allowed": True, **extra}
        if patch is not None:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return response

    return answer


def deny(status: dict | None) -> Behaviour:
    def answer(request: dict) -> dict:
        response = {"uid": request["uid"], "allowed": False}
        if status is not None:
            response["status"] = status
        return response

    return answer


def add_label(key: str, value: str) -> Behaviour:
    """Adds a label unless it is already there (a well-behaved, idempotent mutation)."""

    def answer(request: dict) -> dict:
        labels = (request["object"].get("metadata") or {}).get("labels")
        if labels is None:
            return allow([{"op": "add", "path": "/metadata/labels", "value": {key: value}}])(request)
        if labels.get(key) == value:
            return allow()(request)
        return allow([{"op": "add", "path": "/metadata/labels/" + key.replace("/", "~1"), "value": value}])(request)

    return answer


# --- configurations and requests ----------------------------------------------------------


def hook(name: str, url: str, ca_bundle: str, **fields: Any) -> dict:
    spec: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }
    spec.update(fields)
    return spec


def configuration(name: str, *webhooks: dict) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(webhooks),
    }


def pod(name: str = "worker-0", *, labels: dict | None = None, annotations: dict | None = None) -> dict:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "main", "image": "busybox"}]},
    }


def gang_pod(name: str = "worker-0") -> dict:
    return pod(name, annotations={"scheduling.k8s.io/group-name": "train", "scheduling.k8s.io/group-pod-num": "2"})


def chain_of(*configurations: dict) -> AdmissionChain:
    return AdmissionChain(lambda: [copy.deepcopy(c) for c in configurations], NAMESPACES.get)


async def admit(chain: AdmissionChain, obj: dict, *, operation: str = "CREATE", old_obj: dict | None = None,
                namespace: str = "default", sub_resource: str | None = None, dry_run: bool = False) -> dict:
    try:
        return await chain.admit(
            operation=operation, kind=POD_KIND, resource=POD_RESOURCE, sub_resource=sub_resource,
            namespace=namespace, name=obj["metadata"]["name"], obj=obj, old_obj=old_obj, dry_run=dry_run,
            user_info={"username": "alice", "uid": "u-1", "groups": ["system:authenticated"]},
        )
    finally:
        await chain.close()


# --- calling and patching -----------------------------------------------------------------


async def test_patch_is_applied_and_the_review_carries_the_request(webhook):
    url = webhook.on("gate", allow(GATE_PATCH))
    chain = chain_of(configuration("ganggate", hook("gate.ganggate.io", url, webhook.ca_bundle)))
    original = gang_pod()
    snapshot = copy.deepcopy(original)

    admitted = await admit(chain, original)

    assert admitted["spec"]["schedulingGates"] == [{"name": "scheduling.k8s.io/group-gate"}]
    assert original == snapshot, "the argument must not be mutated"
    (call,) = webhook.calls_to("gate")
    assert call.review["apiVersion"] == "admission.k8s.io/v1" and call.review["kind"] == "AdmissionReview"
    request = call.request
    assert request["kind"] == POD_KIND and request["requestKind"] == POD_KIND
    assert request["resource"] == POD_RESOURCE and request["requestResource"] == POD_RESOURCE
    assert "subResource" not in request
    assert (request["operation"], request["namespace"], request["name"]) == ("CREATE", "default", "worker-0")
    assert request["userInfo"]["username"] == "alice" and request["userInfo"]["groups"] == ["system:authenticated"]
    assert request["object"] == snapshot and request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert call.query == {"timeout": "10s"}


async def test_every_review_has_a_fresh_uid_and_update_sends_the_old_object(webhook):
    url = webhook.on("gate", allow())
    chain = chain_of(configuration("ganggate", hook("gate", url, webhook.ca_bundle)))
    old = pod(labels={"v": "1"})
    new = pod(labels={"v": "2"})
    await admit(chain, new, operation="UPDATE", old_obj=old)
    await admit(chain, new, operation="UPDATE", old_obj=old)

    first, second = webhook.calls_to("gate")
    assert first.request["uid"] != second.request["uid"]
    assert first.request["oldObject"] == old and first.request["object"] == new
    assert first.request["options"]["kind"] == "UpdateOptions"


async def test_configurations_run_in_name_order_and_each_webhook_sees_earlier_patches(webhook):
    seen: list[tuple[str, dict]] = []

    def recorder(path: str) -> Behaviour:
        def answer(request: dict) -> dict:
            seen.append((path, dict(request["object"]["metadata"].get("labels") or {})))
            return add_label(path, "done")(request)

        return answer

    ca = webhook.ca_bundle
    chain = chain_of(
        configuration("zeta", hook("z1", webhook.on("z1", recorder("z1")), ca)),
        configuration("alpha", hook("a1", webhook.on("a1", recorder("a1")), ca), hook("a2", webhook.on("a2", recorder("a2")), ca)),
    )
    admitted = await admit(chain, pod())

    assert [path for path, _ in seen] == ["a1", "a2", "z1"]
    assert seen[1][1] == {"a1": "done"} and seen[2][1] == {"a1": "done", "a2": "done"}
    assert admitted["metadata"]["labels"] == {"a1": "done", "a2": "done", "z1": "done"}


async def test_a_patched_pod_is_defaulted_before_the_next_webhook_sees_it(webhook):
    sidecar = [{"op": "add", "path": "/spec/containers/-", "value": {"name": "proxy", "image": "envoy"}}]
    ca = webhook.ca_bundle
    chain = chain_of(configuration("c", hook("injector", webhook.on("inject", allow(sidecar)), ca),
                                   hook("observer", webhook.on("observe", allow()), ca)))
    original = pod()
    admitted = await admit(chain, original)
    (seen,) = webhook.calls_to("observe")
    proxy = seen.request["object"]["spec"]["containers"][1]
    assert (proxy["name"], proxy["imagePullPolicy"], proxy["terminationMessagePolicy"]) == ("proxy", "Always", "File")
    assert admitted["spec"]["containers"][1] == proxy
    assert original == pod(), "the patching and the defaulting change a copy, never the argument"


async def test_a_patch_that_leaves_no_decodable_pod_is_an_internal_error(webhook):
    nonsense = [{"op": "replace", "path": "/spec", "value": "not a spec"}]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow(nonsense)), webhook.ca_bundle, failurePolicy="Ignore")))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 500 and denied.value.message.startswith("Internal error occurred: ")


async def test_no_configuration_returns_the_object_unchanged():
    # Nothing to call, so nothing is copied: every write of the API server passes the chain.
    chain = chain_of()
    original = pod()
    expected = copy.deepcopy(original)
    admitted = await admit(chain, original)
    assert admitted == expected


# --- matching -----------------------------------------------------------------------------


async def test_rules_select_operations(webhook):
    ca = webhook.ca_bundle
    create_only = hook("create-only", webhook.on("create", allow()), ca, rules=[
        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}])
    everything = hook("all-ops", webhook.on("all", allow()), ca, rules=[
        {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}])
    chain = chain_of(configuration("c", create_only, everything))

    await admit(chain, pod(), operation="UPDATE", old_obj=pod())

    assert webhook.calls_to("create") == []
    assert len(webhook.calls_to("all")) == 1


@pytest.mark.parametrize(
    ("resources", "sub_resource", "called"),
    [
        (["pods"], None, True),
        (["pods"], "status", False),
        (["pods/status"], "status", True),
        (["pods/status"], None, False),
        (["pods/*"], "status", True),
        (["*"], "status", False),
        (["*/*"], "status", True),
        (["nodes"], None, False),
    ],
)
async def test_rules_match_resources_and_subresources(webhook, resources, sub_resource, called):
    rule = {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources}
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, rules=[rule])))
    await admit(chain, pod(), operation="UPDATE", old_obj=pod(), sub_resource=sub_resource)
    calls = webhook.calls_to("h")
    assert len(calls) == (1 if called else 0)
    if called and sub_resource:
        assert calls[0].request["subResource"] == sub_resource


async def test_cluster_scoped_rule_does_not_match_a_namespaced_pod(webhook):
    rule = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Cluster"}
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, rules=[rule])))
    await admit(chain, pod())
    assert webhook.calls_to("h") == []


async def test_namespace_selector_excludes_kube_system(webhook):
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow(GATE_PATCH)), webhook.ca_bundle, namespaceSelector=selector)))

    in_default = await admit(chain, gang_pod(), namespace="default")
    in_kube_system = await admit(chain, gang_pod(), namespace="kube-system")

    assert [c.request["namespace"] for c in webhook.calls_to("h")] == ["default"]
    assert "schedulingGates" in in_default["spec"]
    assert "schedulingGates" not in in_kube_system["spec"]


async def test_namespace_selector_on_a_missing_namespace_is_404(webhook):
    selector = {"matchLabels": {"team": "a"}}
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, namespaceSelector=selector)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod(), namespace="nowhere")
    assert denied.value.code == 404 and denied.value.reason == "NotFound"
    assert denied.value.message == 'namespaces "nowhere" not found'


async def test_object_selector_matches_new_or_old_labels(webhook):
    selector = {"matchLabels": {"gang": "yes"}}
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, objectSelector=selector)))

    await admit(chain, pod("plain"))
    await admit(chain, pod("labelled", labels={"gang": "yes"}))
    await admit(chain, pod("unlabelled-now", labels={}), operation="UPDATE", old_obj=pod("unlabelled-now", labels={"gang": "yes"}))

    assert [c.request["name"] for c in webhook.calls_to("h")] == ["labelled", "unlabelled-now"]


async def test_match_conditions_send_only_gang_pods(webhook):
    conditions = [{"name": "gang-pods-only", "expression": GANG_CONDITION}]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow(GATE_PATCH)), webhook.ca_bundle, matchConditions=conditions)))

    plain = await admit(chain, pod("plain"))
    other_annotation = await admit(chain, pod("other", annotations={"team": "a"}))
    gang = await admit(chain, gang_pod("member"))

    assert [c.request["name"] for c in webhook.calls_to("h")] == ["member"]
    assert "schedulingGates" not in plain["spec"] and "schedulingGates" not in other_annotation["spec"]
    assert gang["spec"]["schedulingGates"] == [{"name": "scheduling.k8s.io/group-gate"}]


async def test_the_shipped_configuration_sends_only_gang_pods_outside_kube_system(webhook):
    """deploy/base's webhook (rules, namespaceSelector, matchConditions) with a URL for the recorder."""
    shipped = yaml.safe_load(DEPLOYED_CONFIGURATION.read_text())
    spec = shipped["webhooks"][0]
    spec["clientConfig"] = {"url": webhook.on("mutate", allow(GATE_PATCH)), "caBundle": webhook.ca_bundle}
    chain = chain_of(shipped)

    plain = await admit(chain, pod("plain"))
    member = await admit(chain, gang_pod("member"))
    await admit(chain, gang_pod("system"), namespace="kube-system")
    await admit(chain, pod("plain"), operation="UPDATE", old_obj=pod("plain"))
    stripped = pod("stripped", annotations={})
    await admit(chain, stripped, operation="UPDATE", old_obj=gang_pod("stripped"))

    # CREATE only: updates, even one that strips the gang annotations, are the policies' to refuse.
    assert [(c.request["operation"], c.request["name"]) for c in webhook.calls_to("mutate")] == [("CREATE", "member")]
    assert "schedulingGates" not in plain["spec"]
    assert member["spec"]["schedulingGates"] == [{"name": "scheduling.k8s.io/group-gate"}]


async def test_match_conditions_compare_across_types_as_cel_go_does(webhook):
    """Heterogeneous equality: `oldObject != null` on an object, numbers compared by value."""
    conditions = [
        {"name": "updates-only", "expression": "oldObject != null"},
        {"name": "numbers", "expression": "1 == 1.0 && 1 != 'one'"},
    ]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, matchConditions=conditions)))
    await admit(chain, pod("created"))
    await admit(chain, pod("updated"), operation="UPDATE", old_obj=pod("updated"))
    assert [c.request["name"] for c in webhook.calls_to("h")] == ["updated"]


async def test_match_conditions_see_request_and_old_object(webhook):
    conditions = [
        {"name": "create", "expression": "request.operation == 'CREATE' && oldObject == null"},
        {"name": "user", "expression": "request.userInfo.username == 'alice'"},
    ]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, matchConditions=conditions)))
    await admit(chain, pod("created"))
    await admit(chain, pod("updated"), operation="UPDATE", old_obj=pod("updated"))
    assert [c.request["name"] for c in webhook.calls_to("h")] == ["created"]


async def test_match_condition_error_fails_closed_with_forbidden(webhook):
    conditions = [{"name": "broken", "expression": "object.metadata.annotations['x'] == 'y'"}]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, matchConditions=conditions)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod("no-annotations"))
    assert denied.value.code == 403 and denied.value.reason == "Forbidden"
    assert denied.value.message.startswith('pods "no-annotations" is forbidden: expression ')
    assert "resulted in error" in denied.value.message
    assert webhook.calls_to("h") == []


async def test_match_condition_error_with_ignore_skips_the_webhook(webhook):
    conditions = [{"name": "broken", "expression": "object.metadata.annotations['x'] == 'y'"}]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow(GATE_PATCH)), webhook.ca_bundle,
                                             matchConditions=conditions, failurePolicy="Ignore")))
    admitted = await admit(chain, pod())
    assert "schedulingGates" not in admitted["spec"] and webhook.calls_to("h") == []


async def test_a_false_condition_wins_over_an_erroring_one(webhook):
    conditions = [
        {"name": "broken", "expression": "object.metadata.annotations['x'] == 'y'"},
        {"name": "never", "expression": "false"},
    ]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, matchConditions=conditions)))
    await admit(chain, pod())
    assert webhook.calls_to("h") == []


# --- denial -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "reason", "message"),
    [
        ({"code": 422, "reason": "Invalid", "message": "group-pod-num must be a positive integer"}, 422, "Invalid",
         'admission webhook "gate.ganggate.io" denied the request: group-pod-num must be a positive integer'),
        ({"message": "no code given"}, 400, "",
         'admission webhook "gate.ganggate.io" denied the request: no code given'),
        ({"code": 200, "reason": "NotAllowed"}, 400, "NotAllowed",
         'admission webhook "gate.ganggate.io" denied the request: NotAllowed'),
        (None, 400, "", 'admission webhook "gate.ganggate.io" denied the request without explanation'),
    ],
)
async def test_denial_carries_the_webhook_status(webhook, status, code, reason, message):
    chain = chain_of(configuration("c", hook("gate.ganggate.io", webhook.on("deny", deny(status)), webhook.ca_bundle)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, gang_pod())
    assert (denied.value.code, denied.value.reason, denied.value.message) == (code, reason, message)
    status_body = denied.value.status()
    assert (status_body["kind"], status_body["status"], status_body["code"]) == ("Status", "Failure", code)


async def test_denial_stops_the_chain_even_with_ignore(webhook):
    ca = webhook.ca_bundle
    chain = chain_of(configuration("c", hook("no", webhook.on("no", deny({"message": "nope"})), ca, failurePolicy="Ignore"),
                                   hook("later", webhook.on("later", allow()), ca)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert "nope" in denied.value.message and webhook.calls_to("later") == []


# --- failures and failurePolicy -----------------------------------------------------------


async def test_wrong_ca_bundle_fails_closed_with_500(webhook, tls_pair):
    _, other = tls_pair
    chain = chain_of(configuration("c", hook("gate.ganggate.io", webhook.on("h", allow()), other.ca_bundle)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 500 and denied.value.reason == "InternalError"
    assert denied.value.message.startswith(
        'Internal error occurred: failed calling webhook "gate.ganggate.io": failed to call webhook: Post "https://127.0.0.1:')
    assert "tls: failed to verify certificate" in denied.value.message
    assert webhook.calls_to("h") == []


async def test_wrong_ca_bundle_with_ignore_skips_only_that_webhook(webhook, tls_pair):
    _, other = tls_pair
    chain = chain_of(configuration("c",
                                   hook("untrusted", webhook.on("a", allow(GATE_PATCH)), other.ca_bundle, failurePolicy="Ignore"),
                                   hook("trusted", webhook.on("b", add_label("seen", "yes")), webhook.ca_bundle)))
    admitted = await admit(chain, pod())
    assert "schedulingGates" not in admitted["spec"]
    assert admitted["metadata"]["labels"] == {"seen": "yes"}


async def test_connection_refused_fails_closed(webhook):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    chain = chain_of(configuration("c", hook("gone", f"https://127.0.0.1:{port}/mutate", webhook.ca_bundle)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 500
    assert f"dial tcp 127.0.0.1:{port}: connect: connection refused" in denied.value.message


async def test_timeout_fails_closed_or_is_ignored(webhook):
    async def hang(request: dict) -> dict:
        await webhook.release.wait()
        return allow()(request)

    url = webhook.on("slow", hang)
    failing = chain_of(configuration("c", hook("slow", url, webhook.ca_bundle, timeoutSeconds=1)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(failing, pod())
    assert denied.value.code == 500 and "context deadline exceeded" in denied.value.message
    assert webhook.calls_to("slow")[0].query == {"timeout": "1s"}

    ignoring = chain_of(configuration("c", hook("slow", url, webhook.ca_bundle, timeoutSeconds=1, failurePolicy="Ignore"),
                                      hook("next", webhook.on("next", add_label("after", "timeout")), webhook.ca_bundle)))
    admitted = await admit(ignoring, pod())
    assert admitted["metadata"]["labels"] == {"after": "timeout"}


async def test_response_uid_must_match(webhook):
    def wrong_uid(request):
        return {"uid": "not-" + request["uid"], "allowed": True}
    chain = chain_of(configuration("c", hook("liar", webhook.on("liar", wrong_uid), webhook.ca_bundle)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 500
    assert 'failed calling webhook "liar": received invalid webhook response: expected response.uid="' in denied.value.message


PATCH_B64 = base64.b64encode(json.dumps(GATE_PATCH).encode()).decode()


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "webhook response was absent"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"allowed": True}},
         "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"allowed": True, "patch": PATCH_B64}},
         "webhook returned response.patch but not response.patchType"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "response": {"allowed": True, "patch": PATCH_B64, "patchType": "MergePatch"}}, 'unsupported patch type "MergePatch"'),
    ],
)
async def test_malformed_reviews_are_call_failures(webhook, answer, complaint):
    def respond(request: dict) -> web.Response:
        body = copy.deepcopy(answer)
        if "response" in body:
            body["response"]["uid"] = request["uid"]
        return web.json_response(body)

    chain = chain_of(configuration("c", hook("sloppy", webhook.on("sloppy", respond), webhook.ca_bundle)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 500 and complaint in denied.value.message
    assert denied.value.message.startswith('Internal error occurred: failed calling webhook "sloppy": ')


async def test_bad_json_and_http_errors_are_call_failures(webhook):
    ca = webhook.ca_bundle
    def not_json(request):
        return web.Response(text="<html>oops</html>", content_type="text/html")
    def server_error(request):
        return web.Response(status=500, text="boom")
    for path, behaviour in (("html", not_json), ("500", server_error)):
        chain = chain_of(configuration("c", hook(path, webhook.on(path, behaviour), ca)))
        with pytest.raises(AdmissionDenied) as denied:
            await admit(chain, pod())
        assert denied.value.code == 500 and f'failed calling webhook "{path}"' in denied.value.message
        ignoring = chain_of(configuration("c", hook(path, webhook.on(path, behaviour), ca, failurePolicy="Ignore")))
        assert await admit(ignoring, pod()) == pod()


async def test_patch_that_does_not_apply_is_an_internal_error_whatever_the_policy(webhook):
    bad = [{"op": "remove", "path": "/spec/doesNotExist"}]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow(bad)), webhook.ca_bundle, failurePolicy="Ignore")))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 500
    assert denied.value.message == "Internal error occurred: can't remove a non-existent object 'doesNotExist'"


async def test_undecodable_patch_follows_the_failure_policy(webhook):
    def garbage(request: dict) -> dict:
        return {"uid": request["uid"], "allowed": True, "patchType": "JSONPatch",
                "patch": base64.b64encode(b"{not a patch").decode()}

    url = webhook.on("garbage", garbage)
    failing = chain_of(configuration("c", hook("garbage", url, webhook.ca_bundle)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(failing, pod())
    assert "received undecodable patch in webhook response" in denied.value.message
    ignoring = chain_of(configuration("c", hook("garbage", url, webhook.ca_bundle, failurePolicy="Ignore")))
    assert await admit(ignoring, pod()) == pod()


async def test_service_reference_needs_the_url_form(webhook):
    service_hook = hook("in-cluster", "unused", webhook.ca_bundle)
    service_hook["clientConfig"] = {"service": {"namespace": "ganggate-system", "name": "ganggate-webhook", "path": "/mutate"},
                                    "caBundle": webhook.ca_bundle}
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain_of(configuration("c", service_hook)), pod())
    assert denied.value.code == 500 and "clientConfig.url" in denied.value.message
    assert "ganggate-system/ganggate-webhook" in denied.value.message

    service_hook["failurePolicy"] = "Ignore"
    assert await admit(chain_of(configuration("c", service_hook)), pod()) == pod()


# --- reinvocation -------------------------------------------------------------------------


async def test_if_needed_webhook_is_reinvoked_once_after_a_later_change(webhook):
    ca = webhook.ca_bundle
    chain = chain_of(configuration(
        "c",
        hook("first", webhook.on("first", add_label("first", "1")), ca, reinvocationPolicy="IfNeeded"),
        hook("never", webhook.on("never", allow()), ca, reinvocationPolicy="Never"),
        hook("second", webhook.on("second", add_label("second", "2")), ca),
    ))
    admitted = await admit(chain, pod())

    first_calls = webhook.calls_to("first")
    assert len(first_calls) == 2
    assert first_calls[1].request["object"]["metadata"]["labels"] == {"first": "1", "second": "2"}
    assert len(webhook.calls_to("never")) == 1 and len(webhook.calls_to("second")) == 1
    assert admitted["metadata"]["labels"] == {"first": "1", "second": "2"}


async def test_a_webhook_is_not_reinvoked_for_its_own_change(webhook):
    ca = webhook.ca_bundle
    chain = chain_of(configuration(
        "c",
        hook("only", webhook.on("only", add_label("only", "1")), ca, reinvocationPolicy="IfNeeded"),
        hook("quiet", webhook.on("quiet", allow()), ca),
    ))
    await admit(chain, pod())
    assert len(webhook.calls_to("only")) == 1


async def test_an_empty_map_where_there_was_none_is_no_change(webhook):
    """Semantic equality: nil and empty maps are equal, so this patch triggers no reinvocation."""
    ca = webhook.ca_bundle
    chain = chain_of(configuration(
        "c",
        hook("first", webhook.on("first", allow()), ca, reinvocationPolicy="IfNeeded"),
        hook("empty", webhook.on("empty", allow([{"op": "add", "path": "/metadata/labels", "value": {}}])), ca),
    ))
    admitted = await admit(chain, pod())
    assert len(webhook.calls_to("first")) == 1
    assert admitted["metadata"]["labels"] == {}


def _pruned(value: Any) -> Any:
    """Semantic.DeepEqual's view spelled out: null fields and empty lists and maps dropped from maps."""
    if isinstance(value, dict):
        kept = {key: _pruned(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item is not None and item != {} and item != []}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


_JSON = st.recursive(
    st.none() | st.booleans() | st.sampled_from([0, 1, 1.0, "", "a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    max_leaves=10)


@settings(max_examples=500, deadline=None)
@given(_JSON, _JSON)
def test_changed_means_different_once_nulls_and_empties_are_dropped(a, b):
    """What decides a reinvocation: objects equal once unset fields are dropped are unchanged."""
    assert semantically_equal(a, b) == (_pruned(a) == _pruned(b))
    wrapped_a, wrapped_b = {"x": a, "l": [a]}, {"x": b, "l": [b], "y": {"z": []}}
    assert semantically_equal(wrapped_a, wrapped_b) == (_pruned(wrapped_a) == _pruned(wrapped_b))


async def test_reinvocation_is_a_single_extra_round(webhook):
    counter = {"n": 0}

    def ever_changing(request: dict) -> dict:
        counter["n"] += 1
        return allow([{"op": "add", "path": "/metadata/labels", "value": {"round": str(counter["n"])}}])(request)

    ca = webhook.ca_bundle
    chain = chain_of(configuration(
        "c",
        hook("a", webhook.on("a", ever_changing), ca, reinvocationPolicy="IfNeeded"),
        hook("b", webhook.on("b", add_label("b", "x")), ca, reinvocationPolicy="IfNeeded"),
    ))
    await admit(chain, pod())
    # round 0: a, b (b changed: a is marked); round 1: a changes again, which marks b, still
    # ahead in the same round (reinvocationcontext.go); there is no round 2, so each ran twice.
    assert [c.path for c in webhook.calls] == ["a", "b", "a", "b"]


# --- dry run ------------------------------------------------------------------------------


async def test_dry_run_is_passed_to_side_effect_free_webhooks(webhook):
    ca = webhook.ca_bundle
    chain = chain_of(configuration(
        "c",
        hook("none", webhook.on("none", allow(GATE_PATCH)), ca, sideEffects="None"),
        hook("on-dry-run", webhook.on("on-dry-run", allow()), ca, sideEffects="NoneOnDryRun"),
    ))
    admitted = await admit(chain, gang_pod(), dry_run=True)
    assert "schedulingGates" in admitted["spec"]
    for path in ("none", "on-dry-run"):
        (call,) = webhook.calls_to(path)
        assert call.request["dryRun"] is True and call.request["options"]["dryRun"] == ["All"]


@pytest.mark.parametrize("side_effects", ["Unknown", "Some"])
async def test_dry_run_with_side_effects_is_rejected(webhook, side_effects):
    chain = chain_of(configuration("c", hook("effects", webhook.on("effects", allow()), webhook.ca_bundle,
                                             sideEffects=side_effects, failurePolicy="Ignore")))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod(), dry_run=True)
    assert (denied.value.code, denied.value.reason) == (400, "BadRequest")
    assert denied.value.message == 'admission webhook "effects" does not support dry run'
    assert webhook.calls_to("effects") == []
    # Without dryRun the same webhook is called normally.
    await admit(chain, pod())
    assert len(webhook.calls_to("effects")) == 1


# --- review versions ----------------------------------------------------------------------


async def test_v1beta1_only_webhook_gets_a_v1beta1_review(webhook):
    def v1beta1(request: dict) -> dict:
        # v1beta1 answers were never checked for uid; a patch is always a JSONPatch.
        return {"allowed": True, "patch": base64.b64encode(json.dumps(GATE_PATCH).encode()).decode()}

    chain = chain_of(configuration("c", hook("old", webhook.on("old", v1beta1), webhook.ca_bundle,
                                             admissionReviewVersions=["v1beta1"])))
    admitted = await admit(chain, pod())
    assert webhook.calls_to("old")[0].review["apiVersion"] == "admission.k8s.io/v1beta1"
    assert "schedulingGates" in admitted["spec"]


async def test_unknown_review_versions_follow_the_failure_policy(webhook):
    chain = chain_of(configuration("c", hook("future", webhook.on("future", allow()), webhook.ca_bundle,
                                             admissionReviewVersions=["v2"])))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert "webhook does not accept known AdmissionReview versions" in denied.value.message


# --- broken configurations and the CEL cache ----------------------------------------------


async def test_a_broken_selector_is_an_error_only_when_the_rules_match(webhook):
    broken = {"matchExpressions": [{"key": "gang", "operator": "Near", "values": ["x"]}]}
    matching = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, objectSelector=broken)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(matching, pod())
    assert denied.value.code == 500
    assert denied.value.message == 'Internal error occurred: "Near" is not a valid label selector operator'
    assert denied.value.status()["details"]["causes"] == [{"message": '"Near" is not a valid label selector operator'}]

    delete_only = [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]
    unrelated = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle,
                                               objectSelector=broken, rules=delete_only)))
    assert await admit(unrelated, pod()) == pod()


async def test_a_condition_that_does_not_compile_fails_closed(webhook):
    conditions = [{"name": "typo", "expression": "object.metadata.(("}]
    chain = chain_of(configuration("c", hook("h", webhook.on("h", allow()), webhook.ca_bundle, matchConditions=conditions)))
    with pytest.raises(AdmissionDenied) as denied:
        await admit(chain, pod())
    assert denied.value.code == 403 and "compilation error" in denied.value.message


def test_conditions_are_compiled_once_per_expression_text():
    from ganggate.sim.apiserver.admission.cel import build_activation, compile_expression, evaluate_conditions

    expression = GANG_CONDITION + " && true"  # a text no other test compiles
    compile_expression.cache_clear()
    conditions = [{"name": "gang", "expression": expression}]
    for obj, expected in ((gang_pod(), True), (pod(), False), (gang_pod("b"), True)):
        result = evaluate_conditions(conditions, build_activation(obj, None, {"operation": "CREATE"}))
        assert result.matches is expected
    info = compile_expression.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def _common_name_only_tls(directory: Path) -> Tls:
    """A serving certificate naming localhost in its CN only, with no subjectAltName."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = new_key()
    ca_cert = build_ca(ca_key, "cn-only-ca", now, 1)
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1)).sign(ca_key, hashes.SHA256())
    )
    (directory / "cn.crt").write_bytes(cert_pem(cert))
    (directory / "cn.key").write_bytes(key_pem(key))
    return Tls(base64.b64encode(cert_pem(ca_cert)).decode(), str(directory / "cn.crt"), str(directory / "cn.key"))


async def test_the_host_is_checked_against_subject_alt_names_only(webhook, tmp_path):
    # Positive control: the fixture's certificate names localhost in its subjectAltName.
    port = webhook.base_url.rsplit(":", 1)[1]
    by_name = hook("by-name", f"https://localhost:{port}/ok", webhook.ca_bundle)
    webhook.on("ok", allow())
    await admit(chain_of(configuration("c", by_name)), pod())
    assert len(webhook.calls_to("ok")) == 1

    # Go's crypto/x509 ignores the CN, so a CN-only certificate is refused for any host.
    server, runner = await serve(_common_name_only_tls(tmp_path))
    try:
        cn_port = server.base_url.rsplit(":", 1)[1]
        server.on("cn", allow())
        chain = chain_of(configuration("c", hook("cn-only", f"https://localhost:{cn_port}/cn", server.ca_bundle)))
        with pytest.raises(AdmissionDenied) as denied:
            await admit(chain, pod())
        assert denied.value.code == 500 and "tls: failed to verify certificate" in denied.value.message
        assert server.calls_to("cn") == []
    finally:
        await runner.cleanup()
