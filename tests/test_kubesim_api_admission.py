"""The API server's use of the admission chain: when it is called, with what, in which order
relative to defaulting and validation, and how a denial reaches the client.

The chain itself (webhook calls, matching, reinvocation) is tested in test_kubesim_admission.py;
here a recording chain with AdmissionChain's interface stands in for it, and also the real chain
with no configurations stored.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from ganggate.sim.apiserver.admission.chain import AdmissionChain, AdmissionDenied
from tests.kubesim_support import GATE, pod_manifest, status_of


class RecordingChain:
    """Records each call; adds the gate and a label like ganggate's webhook, or denies."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.deny: AdmissionDenied | None = None
        self.add_gate = True

    async def admit(self, **kwargs: Any) -> dict:
        self.calls.append(copy.deepcopy(kwargs))
        if self.deny is not None:
            raise self.deny
        obj = copy.deepcopy(kwargs["obj"])
        obj["metadata"].setdefault("labels", {})["admitted"] = kwargs["operation"].lower()
        if self.add_gate and kwargs["operation"] == "CREATE":
            obj["spec"]["schedulingGates"] = [{"name": GATE}]
        return obj


CONFIGURATION = {
    "metadata": {"name": "recorder"},
    "webhooks": [{
        "name": "record.kubesim.test",
        "clientConfig": {"url": "https://127.0.0.1:9/mutate"},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }],
}


@pytest.fixture
async def chain(sim, api) -> RecordingChain:
    """The recording chain, with one configuration stored (without any, the server skips the chain)."""
    recorder = RecordingChain()
    sim.server.set_admission(recorder)
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(CONFIGURATION)
    return recorder


async def test_without_configurations_the_chain_is_not_called(api, sim):
    recorder = RecordingChain()
    sim.server.set_admission(recorder)
    pod = await client.CoreV1Api(api).create_namespaced_pod("default", pod_manifest("none"))
    assert recorder.calls == [] and pod.spec.scheduling_gates is None


async def test_create_is_admitted_after_defaulting_and_before_validation(api, chain, sim):
    core = client.CoreV1Api(api)
    pod = await core.create_namespaced_pod("default", pod_manifest("a", gpus=1))
    [call] = chain.calls
    assert call["operation"] == "CREATE" and call["old_obj"] is None and call["sub_resource"] is None
    assert call["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert call["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert (call["namespace"], call["name"], call["dry_run"]) == ("default", "a", False)
    # The chain saw the defaulted object (requests from limits, scheduler name) ...
    assert call["obj"]["spec"]["schedulerName"] == "default-scheduler"
    assert call["obj"]["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    # ... but not the strategy's status, which comes after admission.
    assert "status" not in call["obj"] or not call["obj"]["status"].get("phase")
    # The mutation is stored, and the strategy saw the gate it added.
    assert pod.metadata.labels == {"admitted": "create"}
    assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
    assert pod.status.conditions[0].reason == "SchedulingGated"


async def test_a_mutation_is_validated(api, chain):
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod_manifest("n", node_name="node-0"))
    assert info.value.status == 422
    assert "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared" in status_of(info.value)["message"]


async def test_patch_and_update_are_admitted_as_update_with_the_old_object(api, chain):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("u"))
    await core.patch_namespaced_pod("u", "default", {"metadata": {"annotations": {"x": "y"}}})
    update = chain.calls[-1]
    assert update["operation"] == "UPDATE"
    assert update["old_obj"]["metadata"]["labels"] == {"admitted": "create"}
    assert update["obj"]["metadata"]["annotations"] == {"x": "y"}
    pod = await core.read_namespaced_pod("u", "default")
    replaced = await core.replace_namespaced_pod("u", "default", pod)
    assert chain.calls[-1]["operation"] == "UPDATE" and replaced.metadata.labels == {"admitted": "update"}


async def test_subresources_are_not_admitted(api, chain):
    core = client.CoreV1Api(api)
    chain.add_gate = False
    await core.create_namespaced_pod("default", pod_manifest("s"))
    calls = len(chain.calls)
    await core.patch_namespaced_pod_status("s", "default", {"status": {"phase": "Running"}})
    await core.create_namespaced_pod_binding("s", "default", {"metadata": {"name": "s"}, "target": {"name": "node-0"}},
                                             _preload_content=False)
    assert len(chain.calls) == calls


async def test_other_resources_are_admitted_but_not_webhook_configurations(api, chain):
    # kube-apiserver runs mutating admission for every resource (a webhook's rules choose), except
    # admissionregistration.k8s.io's own objects (generic/webhook.go IsExemptAdmissionConfigurationResource).
    await client.CoordinationV1Api(api).create_namespaced_lease("default", {"metadata": {"name": "l"}, "spec": {}})
    assert [c["kind"]["kind"] for c in chain.calls] == ["Lease"]
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        {"metadata": {"name": "another"}, "webhooks": []})
    assert [c["kind"]["kind"] for c in chain.calls] == ["Lease"]


async def test_dry_run_is_passed_to_the_chain(api, chain, sim):
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_manifest("d"), dry_run="All")
    assert chain.calls[-1]["dry_run"] is True
    assert sim.store.get("pods", "default", "d") is None


async def test_a_denial_is_served_with_the_webhook_code_and_message(api, chain, sim):
    core = client.CoreV1Api(api)
    chain.deny = AdmissionDenied(400, "BadRequest",
                                 'admission webhook "gate.ganggate.io" denied the request: annotation is not a number')
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod_manifest("x"))
    status = status_of(info.value)
    assert info.value.status == 400 and status["kind"] == "Status" and status["status"] == "Failure"
    assert status["message"] == 'admission webhook "gate.ganggate.io" denied the request: annotation is not a number'
    assert sim.store.get("pods", "default", "x") is None


async def test_the_real_chain_with_no_configurations_lets_pods_through(api, sim):
    chain = AdmissionChain(lambda: sim.store.list("mutatingwebhookconfigurations"),
                           lambda name: sim.store.get("namespaces", None, name))
    sim.server.set_admission(chain)
    pod = await client.CoreV1Api(api).create_namespaced_pod("default", pod_manifest("plain"))
    assert pod.spec.scheduling_gates is None
    await chain.close()


async def test_the_simulator_loads_the_real_chain_by_default(sim):
    assert isinstance(sim.server.admission(), AdmissionChain)


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_the_real_chain_applies_the_failure_policy_of_an_unreachable_webhook(api, sim, policy):
    configuration = copy.deepcopy(CONFIGURATION)
    configuration["webhooks"][0]["failurePolicy"] = policy
    configuration["webhooks"][0]["timeoutSeconds"] = 2
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(configuration)
    core = client.CoreV1Api(api)
    if policy == "Ignore":
        assert (await core.create_namespaced_pod("default", pod_manifest("ignored"))).metadata.name == "ignored"
        return
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod_manifest("failed"))
    status = status_of(info.value)
    assert info.value.status == 500 and status["reason"] == "InternalError"
    assert 'failed calling webhook "record.kubesim.test"' in status["message"]
    assert sim.store.get("pods", "default", "failed") is None


async def test_a_changed_webhook_configuration_decides_the_next_request(api, sim):
    admission = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    configuration = copy.deepcopy(CONFIGURATION)
    configuration["webhooks"][0]["failurePolicy"] = "Fail"
    await admission.create_mutating_webhook_configuration(configuration)
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod_manifest("failed"))
    assert info.value.status == 500
    await admission.patch_mutating_webhook_configuration("recorder", {"webhooks": [
        dict(configuration["webhooks"][0], failurePolicy="Ignore")]})
    assert (await core.create_namespaced_pod("default", pod_manifest("ignored"))).metadata.name == "ignored"


class SlowChain(RecordingChain):
    """Lets another write land while it 'calls a webhook', once."""

    def __init__(self, during) -> None:
        super().__init__()
        self.add_gate = False
        self.during = during

    async def admit(self, **kwargs):
        if kwargs["operation"] == "UPDATE" and self.during is not None:
            during, self.during = self.during, None
            await during()
        return await super().admit(**kwargs)


async def test_a_patch_is_reapplied_when_the_object_changes_during_admission(api, sim):
    core = client.CoreV1Api(api)
    chain = SlowChain(None)
    sim.server.set_admission(chain)
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(CONFIGURATION)
    await core.create_namespaced_pod("default", pod_manifest("race", labels={"a": "1"}))

    async def concurrent_status_write():
        await core.patch_namespaced_pod_status("race", "default", {"status": {"phase": "Running"}})

    chain.during = concurrent_status_write
    pod = await core.patch_namespaced_pod("race", "default", {"metadata": {"labels": {"b": "2"}}})
    # Both writes survive: the patch was re-applied on top of the status change.
    assert pod.metadata.labels == {"a": "1", "b": "2", "admitted": "update"}
    assert len([c for c in chain.calls if c["operation"] == "UPDATE"]) == 2  # admitted again on the retry
    assert pod.status.phase == "Running"


async def test_an_update_with_a_precondition_conflicts_when_the_object_changes_during_admission(api, sim):
    core = client.CoreV1Api(api)
    chain = SlowChain(None)
    sim.server.set_admission(chain)
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(CONFIGURATION)
    await core.create_namespaced_pod("default", pod_manifest("race2"))
    current = await core.read_namespaced_pod("race2", "default")

    async def concurrent_status_write():
        await core.patch_namespaced_pod_status("race2", "default", {"status": {"phase": "Running"}})

    chain.during = concurrent_status_write
    current.metadata.labels = {"x": "y"}
    with pytest.raises(ApiException) as info:
        await core.replace_namespaced_pod("race2", "default", current)
    assert info.value.status == 409 and status_of(info.value)["reason"] == "Conflict"
