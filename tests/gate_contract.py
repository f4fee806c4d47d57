"""The webhook contract's pod-creation cases, and the two ways a cluster can enforce them: the webhook
(ganggate/admission/review.py decide_create) or the gate by policy (deploy/components/gate-by-policy),
evaluated here in-process with kubesim's admission machinery for fast comparisons."""

from __future__ import annotations

import copy
from typing import Any

from ganggate.admission.review import ReviewPolicy, decide_create
from ganggate.contract import (
    GROUP_MIN_AVAILABLE,
    GROUP_NAME,
    GROUP_POD_NUM,
    GROUP_TIMEOUT_SECONDS,
    GROUP_TOPOLOGY_PREFERRED,
    GROUP_TOPOLOGY_REQUIRED,
)
from ganggate.local.parts import gate_by_policy_webhook, gate_policies, webhook_configuration
from ganggate.sim.apimachinery import errors
from ganggate.sim.apiserver.admission.cel import build_activation, evaluate_conditions
from ganggate.sim.apiserver.admission.mutating_policy import MutatingPolicyChain, ReinvocationContext
from ganggate.sim.apiserver.admission.policy import PolicyChain, Request
from ganggate.sim.apiserver.registry import mutatingadmissionpolicy as map_registry
from ganggate.sim.apiserver.registry import validatingadmissionpolicy as vap_registry

VAP_PREFIX = ("ValidatingAdmissionPolicy 'ganggate-gang-pod-create' with binding 'ganggate-gang-pod-create' "
              "denied request: ")
WEBHOOK_PREFIX = 'admission webhook "gang-gate.ganggate.io" denied the request: '


def pod(name: str, annotations: dict[str, str] | None = None, *, node: str | None = None,
        limits: dict[str, str] | None = None, scheduler: str | None = None, in_requests: bool = False) -> dict[str, Any]:
    """A pod as a user creates it (namespace set by the request); `in_requests` asks `limits` as requests."""
    container: dict[str, Any] = {"name": "main", "image": "pytorch",
                                 "resources": {"requests" if in_requests else "limits": limits or {"nvidia.com/gpu": "1"}}}
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [container]}}
    if annotations is not None:
        body["metadata"]["annotations"] = dict(annotations)
    if node:
        body["spec"]["nodeName"] = node
    if scheduler:
        body["spec"]["schedulerName"] = scheduler
    return body


def _gang(**extra: str) -> dict[str, str]:
    return {GROUP_NAME: "train", GROUP_POD_NUM: "4", **extra}


#: Every way the webhook refuses a pod at creation (tests/test_webhook.py's cases and docs/webhook.md's
#: "Denial messages"), each a pod the API server would decode. A shared-GPU amount that is not a quantity
#: at all ("eight") is left out: the API server refuses it while decoding, before any admission.
DENIED: list[dict[str, Any]] = [
    pod("count-without-name", {GROUP_POD_NUM: "4"}),
    pod("min-without-name", {GROUP_MIN_AVAILABLE: "2"}),
    pod("timeout-without-name", {GROUP_TIMEOUT_SECONDS: "60"}),
    pod("name-without-count", {GROUP_NAME: "ddp"}),
    pod("upper-name", {GROUP_NAME: "DDP", GROUP_POD_NUM: "4"}),
    pod("long-name", {GROUP_NAME: "a" * 64, GROUP_POD_NUM: "4"}),
    pod("dash-name", {GROUP_NAME: "-x", GROUP_POD_NUM: "4"}),
    pod("quoted-name", {GROUP_NAME: "it's", GROUP_POD_NUM: "4"}),
    pod("newline-name", {GROUP_NAME: "ddp\n", GROUP_POD_NUM: "4"}),
    pod("zero-count", _gang(**{GROUP_POD_NUM: "0"})),
    pod("big-count", _gang(**{GROUP_POD_NUM: "10001"})),
    pod("word-count", _gang(**{GROUP_POD_NUM: "four"})),
    pod("zero-led-count", _gang(**{GROUP_POD_NUM: "04"})),
    pod("negative-count", _gang(**{GROUP_POD_NUM: "-4"})),
    pod("spaced-count", _gang(**{GROUP_POD_NUM: " 4"})),
    pod("min-above-count", _gang(**{GROUP_MIN_AVAILABLE: "5"})),
    pod("zero-min", _gang(**{GROUP_MIN_AVAILABLE: "0"})),
    pod("word-min", _gang(**{GROUP_MIN_AVAILABLE: "x"})),
    pod("bad-timeout", _gang(**{GROUP_TIMEOUT_SECONDS: "soon"})),
    pod("long-timeout", _gang(**{GROUP_TIMEOUT_SECONDS: "31536001"})),
    pod("bad-topology", _gang(**{GROUP_TOPOLOGY_REQUIRED: "rack/"})),
    pod("bad-preferred", _gang(**{GROUP_TOPOLOGY_PREFERRED: "a/b/c"})),
    pod("bound", _gang(), node="gpu-1"),
    pod("broken-and-bound", {GROUP_NAME: "Train", GROUP_POD_NUM: "4"}, node="gpu-1"),
    pod("shared-fraction", limits={"aliyun.com/gpu-mem": "8.5"}),
    pod("shared-and-whole", limits={"aliyun.com/gpu-mem": "4", "nvidia.com/gpu": "1"}),
    pod("shared-bound", limits={"aliyun.com/gpu-mem": "4"}, node="gpu-1"),
    pod("shared-gang-broken", {GROUP_NAME: "ddp"}, limits={"aliyun.com/gpu-mem": "4"}),
]

#: Pods the webhook admits, gated or not.
ADMITTED: list[dict[str, Any]] = [
    pod("gang", _gang()),
    pod("gang-full", _gang(**{GROUP_MIN_AVAILABLE: "2", GROUP_TIMEOUT_SECONDS: "60",
                              GROUP_TOPOLOGY_REQUIRED: "example.com/rack",
                              GROUP_TOPOLOGY_PREFERRED: "topology.kubernetes.io/zone"})),
    pod("plain"),
    pod("plain-annotated", {"team": "a"}),
    pod("volcano", {GROUP_NAME: "Bad"}, scheduler="volcano"),
    pod("shared", limits={"aliyun.com/gpu-mem": "4"}),
    pod("shared-gang", _gang(), limits={"aliyun.com/gpu-mem": "4"}),
    pod("shared-request-only", limits={"aliyun.com/gpu-mem": "4"}, in_requests=True),  # not sent to the webhook
]


def sent_to_webhook(body: dict[str, Any]) -> bool:
    """Whether deploy/base's MutatingWebhookConfiguration sends the webhook this pod (its matchConditions)."""
    hook = webhook_configuration("https://127.0.0.1:1", b"")["webhooks"][0]  # the pod webhook (then the templates')
    result = evaluate_conditions(hook["matchConditions"], build_activation(body, None, {"operation": "CREATE"}))
    assert result.error is None, result.error
    return result.matches


def webhook_message(body: dict[str, Any]) -> str | None:
    """What the webhook answers for this pod at creation: its denial message, or None when it admits
    (or is not sent the pod)."""
    if not sent_to_webhook(body):
        return None
    decision = decide_create(body, ReviewPolicy())
    return None if decision.allowed else decision.message


def _stored(kind_key: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind_key]


class PolicyCluster:
    """deploy/components/gate-by-policy's objects, defaulted as the API server stores them, evaluated
    by kubesim's MutatingAdmissionPolicy and ValidatingAdmissionPolicy plugins with no HTTP."""

    def __init__(self) -> None:
        objects = gate_policies()
        for obj in objects:
            {"MutatingAdmissionPolicy": map_registry.default_policy,
             "MutatingAdmissionPolicyBinding": map_registry.default_binding,
             "ValidatingAdmissionPolicy": vap_registry.default_policy,
             "ValidatingAdmissionPolicyBinding": vap_registry.default_binding}[obj["kind"]](obj)
        self._by_key = {
            map_registry.POLICY_KEY: _stored("MutatingAdmissionPolicy", objects),
            map_registry.BINDING_KEY: _stored("MutatingAdmissionPolicyBinding", objects),
            vap_registry.POLICY_KEY: _stored("ValidatingAdmissionPolicy", objects),
            vap_registry.BINDING_KEY: _stored("ValidatingAdmissionPolicyBinding", objects),
        }
        namespace = {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "ml", "labels": {"kubernetes.io/metadata.name": "ml"}}}
        args = (lambda key: self._by_key.get(key, []), lambda key: len(self._by_key.get(key, [])),
                lambda name: namespace if name == "ml" else None)
        self.mutating = MutatingPolicyChain(*args)
        self.validating = PolicyChain(*args)
        # The pod webhook as the component leaves it registered: shared-GPU pods without gang annotations
        # and pods naming a PodGroup only (the templates' webhook, second, is left as it is).
        hook = gate_by_policy_webhook(webhook_configuration("https://127.0.0.1:1", b""))["webhooks"][0]
        self.webhook_conditions = hook["matchConditions"]

    def sent_to_webhook(self, obj: dict[str, Any]) -> bool:
        """Whether the API server would call the webhook for this pod (its matchConditions)."""
        result = evaluate_conditions(self.webhook_conditions, build_activation(obj, None, {"operation": "CREATE"}))
        assert result.error is None, result.error
        return result.matches

    def create(self, body: dict[str, Any], uid: str = "") -> dict[str, Any]:
        """The pod after mutating admission; raises errors.ApiError when a policy refuses it."""
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = "ml"
        request = Request("CREATE", {"group": "", "version": "v1", "kind": "Pod"},
                          {"group": "", "version": "v1", "resource": "pods"}, None, "ml",
                          obj["metadata"].get("name", ""), obj, None, False, {"username": "test"})
        context = ReinvocationContext()
        obj = self.mutating.admit(request, obj, context, reinvoking=False)
        if self.sent_to_webhook(obj):  # the mutating webhooks run after the policies
            decision = decide_create(obj, ReviewPolicy(), uid)
            if not decision.allowed:
                raise errors.ApiError(decision.code or 400, "Invalid", WEBHOOK_PREFIX + str(decision.message))
            if decision.patch is not None:
                obj = decision.patch.apply(obj)
                context.should_reinvoke = True
        if context.should_reinvoke:
            obj = self.mutating.admit(request, obj, context, reinvoking=True)
        checked = Request(request.operation, request.kind, request.resource, None, "ml", request.name, obj, None,
                          False, request.user_info)
        self.validating.validate(checked)
        return obj

    def message(self, body: dict[str, Any]) -> str | None:
        """The refusal's message after `ValidatingAdmissionPolicy ... denied request: `, or None if admitted."""
        try:
            self.create(body)
        except errors.ApiError as exc:
            text = exc.message
            prefix = WEBHOOK_PREFIX if text.startswith(WEBHOOK_PREFIX) else VAP_PREFIX
            assert prefix in text, text
            return text.split(prefix, 1)[1]
        return None
