"""The gate by policy (deploy/components/gate-by-policy): the API server's MutatingAdmissionPolicies gate
what the webhook gates and its ValidatingAdmissionPolicy refuses what the webhook refuses, with the same
messages. Evaluated with kubesim's admission plugins in-process (tests/gate_contract.py), against the
webhook's own decisions (ganggate/admission/review.py decide_create); end to end in test_webhook_kubesim.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ganggate.admission.review import ReviewPolicy, decide_create
from ganggate.contract import (
    GANG_ANNOTATIONS,
    GATE_NAME,
    GROUP_MIN_AVAILABLE,
    GROUP_NAME,
    GROUP_POD_NUM,
    GROUP_TIMEOUT_SECONDS,
    GROUP_TOPOLOGY_PREFERRED,
    GROUP_TOPOLOGY_REQUIRED,
    TOPOLOGY_ANNOTATIONS,
    is_label_key,
)
from ganggate.local.parts import GATE_KUSTOMIZATION, GATE_POLICIES, gate_policies, gate_policies_text
from ganggate.sim.apiserver.registry import mutatingadmissionpolicy as map_registry
from ganggate.sim.apiserver.registry import validatingadmissionpolicy as vap_registry
from tests.gate_contract import ADMITTED, DENIED, PolicyCluster, pod, sent_to_webhook, webhook_message

ROOT = Path(__file__).resolve().parents[1]
COMPONENT = ROOT / "deploy" / "components" / "gate-by-policy"
POLICIES = PolicyCluster()


def test_sim_ups_copies_are_the_components() -> None:
    """`sim up --gate-by policy` registers byte for byte what the component installs."""
    shipped = GATE_POLICIES + (GATE_KUSTOMIZATION,)
    originals = ("mutatingadmissionpolicies.yaml", "validatingadmissionpolicies.yaml", "kustomization.yaml")
    for name, original in zip(shipped, originals, strict=True):
        assert gate_policies_text(name) == (COMPONENT / original).read_text(encoding="utf-8")


def test_kubesims_registry_accepts_the_policies_and_compiles_every_expression() -> None:
    validators = {"MutatingAdmissionPolicy": map_registry.validate_policy,
                  "MutatingAdmissionPolicyBinding": map_registry.validate_binding,
                  "ValidatingAdmissionPolicy": vap_registry.validate_policy,
                  "ValidatingAdmissionPolicyBinding": vap_registry.validate_binding}
    defaults = {"MutatingAdmissionPolicy": map_registry.default_policy,
                "ValidatingAdmissionPolicy": vap_registry.default_policy}
    for obj in gate_policies():
        defaults.get(obj["kind"], lambda o: None)(obj)
        assert validators[obj["kind"]](obj) == [], obj["metadata"]["name"]


@pytest.mark.parametrize("body", DENIED, ids=lambda b: b["metadata"]["name"])
def test_every_webhook_denial_comes_with_the_same_message(body):
    expected = webhook_message(body)
    assert expected is not None  # the case is one the webhook refuses
    assert POLICIES.message(body) == expected


def webhook_result(body: dict) -> dict:
    """The pod as the webhook leaves it: its patch applied (untouched when it is not sent the pod)."""
    if not sent_to_webhook(body):
        return copy.deepcopy(body)
    decision = decide_create(body, ReviewPolicy())
    assert decision.allowed
    return decision.patch.apply(copy.deepcopy(body)) if decision.patch is not None else copy.deepcopy(body)


@pytest.mark.parametrize("body", ADMITTED, ids=lambda b: b["metadata"]["name"])
def test_admitted_pods_leave_admission_as_the_webhook_leaves_them(body):
    by_policy = POLICIES.create(body)
    by_webhook = webhook_result(body)
    assert by_policy["spec"].get("schedulingGates") == by_webhook["spec"].get("schedulingGates")
    assert by_policy["metadata"].get("annotations") == by_webhook["metadata"].get("annotations")


def test_a_gated_pod_gets_no_second_gate_and_other_gates_stay():
    body = pod("w", {GROUP_NAME: "ddp", GROUP_POD_NUM: "2"})
    body["spec"]["schedulingGates"] = [{"name": "example.com/quota"}, {"name": GATE_NAME}]
    assert POLICIES.create(body)["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": GATE_NAME}]
    body["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    assert POLICIES.create(body)["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": GATE_NAME}]


def test_only_shared_gpu_pods_without_gang_annotations_still_reach_the_webhook():
    """A gang of one needs a unique name, the request's uid when the pod has no name yet, which policies
    are not given: the component keeps the webhook for those pods, and for nothing else."""
    for body in DENIED + ADMITTED:
        annotations = body["metadata"].get("annotations") or {}
        asks_shared = "aliyun.com/gpu-mem" in body["spec"]["containers"][0]["resources"].get("limits", {})
        expected = asks_shared and not any(key in annotations for key in GANG_ANNOTATIONS)
        assert POLICIES.sent_to_webhook(body) is expected, body["metadata"]["name"]


# --- any annotations at all: the policies and the webhook agree -------------------------------------

values = st.one_of(st.sampled_from(["ddp", "4", "2", "0", "04", "10000", "10001", "example.com/rack", "rack/", "",
                                    "it's", 'say "x"', "a\\b", "x\ty", "DDP", "-x", "60", "31536000"]),
                   st.text(alphabet="abz019-./_ '\"\\\n", max_size=12))


@settings(max_examples=120, deadline=None)
@given(annotations=st.dictionaries(st.sampled_from(GANG_ANNOTATIONS + (GROUP_TOPOLOGY_REQUIRED, GROUP_TOPOLOGY_PREFERRED)),
                                   values, max_size=6),
       node=st.sampled_from([None, "gpu-1"]), shared=st.booleans())
def test_the_policies_agree_with_the_webhook_on_any_annotations(annotations, node, shared):
    body = pod("p", annotations, node=node, limits={"aliyun.com/gpu-mem": "4"} if shared else None)
    expected = webhook_message(body)
    if shared and expected is None and not any(key in annotations for key in GANG_ANNOTATIONS):
        # The one difference (docs/webhook.md): the webhook makes this pod a gang of one without reading
        # its topology annotations; the policy then checks the gang of one and refuses a broken one.
        assume(all(is_label_key(annotations[key]) for key in TOPOLOGY_ANNOTATIONS if key in annotations))
    assert POLICIES.message(body) == expected
    if expected is None:
        assert POLICIES.create(body)["spec"].get("schedulingGates") == webhook_result(body)["spec"].get("schedulingGates")


def test_the_examples_cover_every_check():
    """Each validation of the policy is the one that refuses at least one case (none is dead)."""
    (policy,) = [o for o in gate_policies() if o["kind"] == "ValidatingAdmissionPolicy"]
    messages = [POLICIES.message(body) for body in DENIED]
    keys = [GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE, GROUP_TIMEOUT_SECONDS, GROUP_TOPOLOGY_REQUIRED,
            GROUP_TOPOLOGY_PREFERRED, "spec.nodeName", "aliyun.com/gpu-mem", "asks both"]
    assert all(any(key in m for m in messages) for key in keys)
    assert len(policy["spec"]["validations"]) == 11


# --- `ganggate sim up --gate-by policy` -------------------------------------------------------------

def test_sim_up_gate_by_policy_releases_a_gang_and_refuses_a_broken_one_with_the_webhooks_reason(tmp_path):
    from tests.test_sim_up import EXAMPLES, eventually, released_and_running, start_up

    up = start_up(tmp_path, "--nodes", "2", "--gate-by", "policy")
    try:
        assert up.kubectl("create", "namespace", "mpi").returncode == 0
        applied = up.kubectl("apply", "-n", "mpi", "-f", str(EXAMPLES / "mpi-gang-pods.yaml"))
        assert applied.returncode == 0, applied.stderr
        eventually(lambda: (lambda p: len(p) == 4 and all(map(released_and_running, p)))(up.pods("mpi")),
                   "the 4 MPI pods gated by policy, released and Running")
        refused = up.kubectl("apply", "-f", str(EXAMPLES / "invalid-gang-pod.yaml"))
        assert refused.returncode != 0
        assert ("ValidatingAdmissionPolicy 'ganggate-gang-pod-create' with binding 'ganggate-gang-pod-create' denied "
                "request: annotation scheduling.k8s.io/group-min-available='6': must be a plain decimal integer from 1 "
                "to scheduling.k8s.io/group-pod-num (4)") in refused.stderr
        served = up.kubectl("get", "mutatingadmissionpolicies", "-o", "name")
        assert served.stdout.split() == ["mutatingadmissionpolicy.admissionregistration.k8s.io/ganggate-gang-gate"]
    finally:
        assert up.stop() == 0


def test_sim_up_gate_by_policy_refuses_the_gate_turned_off(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "ganggate", "sim", "up", "--gate-by", "policy",
                             "--feature-gates", "MutatingAdmissionPolicy=false",
                             "--kubeconfig-out", str(tmp_path / "kubeconfig")], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("error: --gate-by policy needs the MutatingAdmissionPolicy feature gate: "
                             "drop MutatingAdmissionPolicy=false\n")
