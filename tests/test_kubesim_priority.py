"""PriorityClasses and the Priority admission plugin on kubesim.

Written from https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/ and the
code it describes: plugin/pkg/admission/priority/admission.go, pkg/apis/scheduling/validation/validation.go,
pkg/apis/scheduling/types.go (the system classes).
"""

from __future__ import annotations

from typing import Any

from ganggate.sim import Simulator
from tests.kubesim_support import Raw, pod_manifest

PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"
PODS = "/api/v1/namespaces/default/pods"


def pc(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value, **extra}


async def test_the_system_classes_exist_at_start(raw: Raw) -> None:
    status, body, _ = await raw.request("GET", PCS)
    values = {item["metadata"]["name"]: item["value"] for item in body["items"]}
    assert values == {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
    status, body, _ = await raw.request("GET", "/apis/scheduling.k8s.io/v1")
    [entry] = [r for r in body["resources"] if r["name"] == "priorityclasses"]
    assert entry["namespaced"] is False and entry["shortNames"] == ["pc"]


async def test_a_class_defaults_to_preempt_lower_priority_and_is_validated(raw: Raw) -> None:
    status, body, _ = await raw.request("POST", PCS, pc("high", 1000))
    assert status == 201 and body["preemptionPolicy"] == "PreemptLowerPriority"
    status, body, _ = await raw.request("POST", PCS, pc("huge", 1_000_000_001))
    assert status == 422 and "maximum allowed value of a user defined priority is 1000000000" in body["message"]
    status, body, _ = await raw.request("POST", PCS, pc("system-mine", 5))
    assert status == 422 and "priority class names with 'system-' prefix are reserved" in body["message"]
    status, body, _ = await raw.request("POST", PCS, pc("odd", 5, preemptionPolicy="Sometimes"))
    assert status == 422
    # value and preemptionPolicy are immutable.
    status, body, _ = await raw.request("PATCH", f"{PCS}/high", {"value": 7}, "application/merge-patch+json")
    assert status == 422 and "value: Forbidden: may not be changed in an update." in body["message"]


async def test_only_one_global_default(raw: Raw) -> None:
    assert (await raw.request("POST", PCS, pc("base", 10, globalDefault=True)))[0] == 201
    status, body, _ = await raw.request("POST", PCS, pc("other", 20, globalDefault=True))
    assert status == 403
    assert body["message"].endswith("PriorityClass base is already marked as default. Only one default can exist")


async def test_a_pod_gets_its_class_priority_and_policy(raw: Raw) -> None:
    await raw.request("POST", PCS, pc("batch", 100, preemptionPolicy="Never"))
    status, body, _ = await raw.request("POST", PODS, pod_manifest("p", priorityClassName="batch"))
    assert status == 201
    assert (body["spec"]["priority"], body["spec"]["preemptionPolicy"]) == (100, "Never")
    status, body, _ = await raw.request("POST", PODS, pod_manifest("crit", priorityClassName="system-node-critical"))
    assert body["spec"]["priority"] == 2000001000


async def test_without_a_class_a_pod_gets_the_global_default_or_zero(raw: Raw) -> None:
    status, body, _ = await raw.request("POST", PODS, pod_manifest("plain"))
    assert (body["spec"]["priority"], body["spec"]["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    assert "priorityClassName" not in body["spec"]
    await raw.request("POST", PCS, pc("base", 10, globalDefault=True))
    status, body, _ = await raw.request("POST", PODS, pod_manifest("defaulted"))
    assert (body["spec"]["priority"], body["spec"]["priorityClassName"]) == (10, "base")


async def test_an_unknown_class_is_forbidden(raw: Raw, sim: Simulator) -> None:
    status, body, _ = await raw.request("POST", PODS, pod_manifest("p", priorityClassName="missing"))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == 'pods "p" is forbidden: no PriorityClass with name missing was found'
    assert sim.store.get("pods", "default", "p") is None


async def test_a_priority_or_policy_inconsistent_with_the_class_is_forbidden(raw: Raw) -> None:
    await raw.request("POST", PCS, pc("high", 1000))
    status, body, _ = await raw.request("POST", PODS, pod_manifest("p", priorityClassName="high", priority=5))
    assert status == 403
    assert body["message"] == ('pods "p" is forbidden: the integer value of priority (5) must not be provided in pod spec; '
                               "priority admission controller computed 1000 from the given PriorityClass name")
    status, body, _ = await raw.request("POST", PODS, pod_manifest("q", priorityClassName="high", preemptionPolicy="Never"))
    assert status == 403
    assert "the string value of PreemptionPolicy (Never) must not be provided in pod spec" in body["message"]
    # The value the class gives may be repeated.
    status, body, _ = await raw.request("POST", PODS, pod_manifest("r", priorityClassName="high", priority=1000))
    assert status == 201
