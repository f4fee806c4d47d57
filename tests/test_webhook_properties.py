"""Property-based tests: arbitrary annotations and arbitrary JSON thrown at the real HTTPS webhook.

Whatever arrives, every answer is well-formed (HTTP 200 AdmissionReview or HTTP 400 Status),
and nothing invalid is ever allowed: an allowed gang pod always has valid annotations and ends
up with exactly one gate.
"""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ganggate.admission.server import WebhookConfig
from ganggate.certs.files import TLS_CERT, TLS_KEY
from ganggate.contract import GATE_NAME, GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM, GangSpec, parse_gang
from tests.webhook_support import WebhookThread, apply_response, decode_patch, gang_pod, gate_count, make_certs, review

MAX_POD_NUM = 50
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def webhook(tmp_path_factory):
    cert_dir = make_certs(tmp_path_factory.mktemp("certs"))
    config = WebhookConfig(cert_file=str(cert_dir / TLS_CERT), key_file=str(cert_dir / TLS_KEY),
                           host="127.0.0.1", port=0, max_pod_num=MAX_POD_NUM,
                           scheduler_names=("default-scheduler", "gpu-scheduler"))
    with WebhookThread(config) as running:
        yield Poster(running.port, cert_dir / "ca.crt")


class Poster:
    """A keep-alive HTTPS client (trusting only our CA) that posts bodies to /mutate."""

    def __init__(self, port: int, ca_file: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.load_verify_locations(cafile=str(ca_file))
        self.port = port
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=self.context, timeout=30)

    def post(self, body: bytes) -> tuple[int, dict]:
        self.conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        assert resp.getheader("Content-Type", "").startswith("application/json")
        return resp.status, json.loads(data)


def check_well_formed(status: int, answer: dict, sent: object) -> dict | None:
    """Assert the shape of an answer; return the AdmissionResponse for a 200."""
    assert status in (200, 400), (status, answer)
    if status == 400:
        assert answer["kind"] == "Status" and answer["code"] == 400
        assert isinstance(answer["message"], str) and answer["message"]
        return None
    assert isinstance(sent, dict)
    assert answer["apiVersion"] == sent["apiVersion"] and answer["kind"] == sent["kind"]
    response = answer["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if response["allowed"]:
        assert "status" not in response
    else:
        assert "patch" not in response
        assert response["status"]["code"] in (400, 422)
        assert isinstance(response["status"]["message"], str) and response["status"]["message"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(decode_patch(response), list)
    return response


# Annotation values that hit the edges: valid, nearly valid, and arbitrary text.
counts = st.one_of(
    st.integers(min_value=-3, max_value=MAX_POD_NUM + 3).map(str),
    st.sampled_from(["", " 1", "1 ", "01", "+1", "1e1", "1.0", "0x10", "١", "99999999999999999999"]),
    st.text(max_size=6),
)
names = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True),
    st.sampled_from(["", "-a", "a-", "A", "a.b", "a_b", "a" * 63, "a" * 64, "ａ"]),
    st.text(max_size=10),
)
def maybe(strategy):
    return st.none() | strategy


@SETTINGS
@given(
    group=maybe(names),
    pod_num=maybe(counts),
    min_available=maybe(counts),
    scheduler=st.sampled_from([None, "", "default-scheduler", "gpu-scheduler", "volcano"]),
    gates=st.sampled_from([None, [], [{"name": "other/gate"}], [{"name": GATE_NAME}]]),
    node_name=st.sampled_from([None, "", "gpu-1"]),
)
def test_nothing_invalid_is_ever_allowed(webhook, group, pod_num, min_available, scheduler, gates, node_name):
    pod = gang_pod(group=group, pod_num=pod_num, min_available=min_available, scheduler=scheduler,
                   gates=gates, node_name=node_name)
    body = review(pod)
    status, answer = webhook.post(json.dumps(body).encode())
    response = check_well_formed(status, answer, body)
    assert response is not None  # a well-formed review of a pod is never a 400
    annotations = pod["metadata"].get("annotations")
    served = (scheduler or "default-scheduler") in ("default-scheduler", "gpu-scheduler")
    in_gang = annotations is not None
    if not in_gang or not served:
        assert response == {"uid": body["request"]["uid"], "allowed": True}
        return
    gang = parse_gang(annotations, MAX_POD_NUM)
    if response["allowed"]:
        assert isinstance(gang, GangSpec)
        assert 1 <= gang.min_available <= gang.pod_num <= MAX_POD_NUM
        assert not node_name
        after = apply_response(pod, response)
        assert gate_count(after) == 1
        others = [g for g in after["spec"].get("schedulingGates") if g["name"] != GATE_NAME]
        assert others == [g for g in (gates or []) if g["name"] != GATE_NAME]
    else:
        assert not isinstance(gang, GangSpec) or node_name
        message = response["status"]["message"]
        assert any(key in message for key in (GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE, "spec.nodeName"))


# Values include JSON null and non-strings: never sent by a real API server, but they must not crash.
update_values = st.sampled_from(["a", "2", "3", None, 2])


@SETTINGS
@given(
    old=st.dictionaries(st.sampled_from([GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE, "team"]), update_values),
    new=st.dictionaries(st.sampled_from([GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE, "team"]), update_values),
)
def test_updates_never_change_gang_annotations(webhook, old, new):
    old_pod = gang_pod(name="p", group=None, pod_num=None, extra_annotations=old)
    new_pod = gang_pod(name="p", group=None, pod_num=None, extra_annotations=new)
    body = review(new_pod, operation="UPDATE", old=old_pod)
    status, answer = webhook.post(json.dumps(body).encode())
    response = check_well_formed(status, answer, body)
    gang_keys = (GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE)
    unchanged = all((k in old) == (k in new) and old.get(k) == new.get(k) for k in gang_keys)
    assert response["allowed"] is unchanged
    assert "patch" not in response


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@SETTINGS
@given(body=json_values)
def test_arbitrary_json_gets_a_well_formed_answer(webhook, body):
    status, answer = webhook.post(json.dumps(body).encode())
    check_well_formed(status, answer, body)


pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(
            json_values,
            st.fixed_dictionaries({}, optional={
                "name": json_values,
                "annotations": st.one_of(json_values, st.dictionaries(
                    st.sampled_from([GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE, "x"]),
                    st.one_of(json_values, names, counts), max_size=4)),
            }),
        ),
        "spec": st.one_of(
            json_values,
            st.fixed_dictionaries({}, optional={
                "schedulerName": st.one_of(json_values, st.sampled_from(["default-scheduler", "volcano"]),
                                           st.lists(st.integers(), min_size=1, max_size=2)),
                "nodeName": json_values,
                "schedulingGates": st.one_of(
                    json_values, st.lists(st.fixed_dictionaries({"name": st.sampled_from([GATE_NAME, "x"])}), max_size=3)),
            }),
        ),
    },
)


@settings(SETTINGS, max_examples=400)
@given(obj=st.one_of(pod_like, json_values), old=st.one_of(st.none(), pod_like),
       operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", None, 7]))
def test_arbitrary_objects_in_a_valid_envelope(webhook, obj, old, operation):
    body = review(obj, operation=operation, old=old)
    status, answer = webhook.post(json.dumps(body).encode())
    response = check_well_formed(status, answer, body)
    if response is None or not response["allowed"] or operation != "CREATE":
        return
    annotations = obj["metadata"]["annotations"] if (
        isinstance(obj.get("metadata"), dict) and isinstance(obj["metadata"].get("annotations"), dict)) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    served = (spec.get("schedulerName") or "default-scheduler") in ("default-scheduler", "gpu-scheduler")
    if served and any(k in annotations for k in (GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE)):
        assert isinstance(parse_gang(annotations, MAX_POD_NUM), GangSpec)
        assert gate_count(apply_response(obj, response)) == 1


@SETTINGS
@given(raw=st.binary(max_size=64))
def test_arbitrary_bytes_get_400_or_an_answer(webhook, raw):
    status, answer = webhook.post(raw)
    try:
        sent = json.loads(raw)
    except ValueError:
        assert status == 400
        return
    check_well_formed(status, answer, sent)


@SETTINGS
@given(
    spec=st.one_of(json_values, st.dictionaries(
        st.sampled_from(["schedulerName", "nodeName", "schedulingGates", "containers"]), json_values, max_size=4)),
    annotations=st.dictionaries(st.sampled_from([GROUP_NAME, GROUP_POD_NUM, GROUP_MIN_AVAILABLE]),
                                st.one_of(names, counts, json_values), min_size=1, max_size=3),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
)
def test_gang_pods_with_arbitrary_specs(webhook, spec, annotations, operation):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations}, "spec": spec}
    body = review(pod, operation=operation, old=gang_pod(name="p") if operation == "UPDATE" else None)
    status, answer = webhook.post(json.dumps(body).encode())
    response = check_well_formed(status, answer, body)
    if response is not None and response["allowed"] and operation == "CREATE" and "patch" in response:
        assert isinstance(parse_gang(annotations, MAX_POD_NUM), GangSpec)
        assert gate_count(apply_response(pod, response)) == 1
