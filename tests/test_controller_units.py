"""The controller shell's pure parts: the release patch, retries, watch-event handling, event targeting."""

from __future__ import annotations

import json

import jsonpatch
import pytest

from ganggate.contract import GATE_NAME
from ganggate.controller.release.patches import (
    DECISION_ANNOTATION,
    build_patch,
    decision_annotation,
    parse_decision,
)
from ganggate.controller.reporting.events import PodRef, WaitNotifier, event_name
from ganggate.controller.round.informer import Gone, Informer
from ganggate.controller.round.loop import ControllerConfig
from ganggate.core.fit.nodematch import node_hostname
from ganggate.core.state.pods import PodInfo
from ganggate.core.state.snapshot import make_pod
from ganggate.kube.calls import ApiCallError, Backoff, with_retries


def pod(gates=None, node_selector=None, annotations=None, uid="u-1"):
    metadata = {"name": "w-0", "namespace": "ml", "uid": uid}
    if annotations is not None:
        metadata["annotations"] = annotations
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"metadata": metadata, "spec": spec}


ANNOT = decision_annotation("d1", "2026-01-01T00:00:00Z", "gpu-1", "ml/train", 4)


def test_patch_removes_only_our_gate_pins_and_records():
    other = {"name": "example.com/other"}
    before = pod(gates=[other, {"name": GATE_NAME}], annotations={"a": "b"})
    after = jsonpatch.apply_patch(before, build_patch(before, ANNOT, "host-1"))
    assert after["spec"]["schedulingGates"] == [other]
    assert after["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "host-1"}
    assert after["metadata"]["annotations"]["a"] == "b"
    assert json.loads(after["metadata"]["annotations"][DECISION_ANNOTATION]) == {
        "id": "d1", "time": "2026-01-01T00:00:00Z", "node": "gpu-1", "gang": "ml/train", "pods": 4}


def test_patch_keeps_existing_node_selector_and_adds_missing_annotations():
    before = pod(gates=[{"name": GATE_NAME}], node_selector={"pool": "a100"})
    after = jsonpatch.apply_patch(before, build_patch(before, ANNOT, "host-1"))
    assert after["spec"]["nodeSelector"] == {"pool": "a100", "kubernetes.io/hostname": "host-1"}
    assert parse_decision(after)["id"] == "d1"
    assert after["spec"]["schedulingGates"] == []


def test_free_placement_does_not_pin():
    before = pod(gates=[{"name": GATE_NAME}])
    after = jsonpatch.apply_patch(before, build_patch(before, ANNOT, None))
    assert "nodeSelector" not in after["spec"]


def test_no_gate_no_patch():
    assert build_patch(pod(gates=[{"name": "example.com/other"}]), ANNOT, "h") is None
    assert build_patch(pod(), ANNOT, "h") is None


def test_patch_fails_instead_of_removing_a_gate_that_moved():
    """Built against an old view; a gate added in front since then must not be removed."""
    seen = pod(gates=[{"name": GATE_NAME}])
    now = pod(gates=[{"name": "example.com/new"}, {"name": GATE_NAME}])
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(now, build_patch(seen, ANNOT, "h"))


def test_patch_fails_on_a_recreated_pod_of_the_same_name():
    seen = pod(gates=[{"name": GATE_NAME}], uid="old")
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(pod(gates=[{"name": GATE_NAME}], uid="new"), build_patch(seen, ANNOT, "h"))


def test_hostname_label_wins_over_node_name():
    assert node_hostname({"metadata": {"labels": {"kubernetes.io/hostname": "h9"}}}, "gpu-9") == "h9"
    assert node_hostname({"metadata": {}}, "gpu-9") == "gpu-9"


async def test_retries_429_and_5xx_then_succeeds_but_not_4xx():
    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise ApiCallError(429, "TooManyRequests", "slow down", retry_after=0.0)
        if len(calls) == 2:
            raise ApiCallError(503, "ServiceUnavailable", "later")
        return {"ok": True}

    assert await with_retries(flaky, Backoff(base=0.001, cap=0.01, attempts=5)) == {"ok": True}
    assert len(calls) == 3

    async def invalid():
        calls.append(1)
        raise ApiCallError(422, "Invalid", "no")

    calls.clear()
    with pytest.raises(ApiCallError):
        await with_retries(invalid, Backoff(base=0.001, attempts=5))
    assert len(calls) == 1


def _informer():
    seen = []
    inf = Informer(lambda **_: None, "pods", on_list=lambda items: None, on_event=lambda t, o: seen.append((t, o)))
    return inf, seen


def test_watch_events_update_store_and_resource_version():
    inf, seen = _informer()
    obj = {"metadata": {"name": "a", "namespace": "ml", "resourceVersion": "5"}}
    inf._handle({"type": "ADDED", "object": obj})
    inf._handle({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert inf.store == {"ml/a": obj} and inf.resource_version == "9"
    inf._handle({"type": "DELETED", "object": {"metadata": {"name": "a", "namespace": "ml", "resourceVersion": "10"}}})
    assert inf.store == {} and [t for t, _ in seen] == ["ADDED", "DELETED"]


def test_watch_error_410_means_relist_and_other_errors_reconnect():
    inf, _ = _informer()
    with pytest.raises(Gone):
        inf._handle({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    with pytest.raises(ApiCallError) as err:
        inf._handle({"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}})
    assert err.value.status == 500


def _pods(n, created="2026-01-01T00:00:0{}Z"):
    return [PodInfo.from_pod(make_pod(f"p{i}", uid=f"u{i}", created=created.format(i))) for i in range(n)]


def names(pods):
    return [p.name for p in pods]


def test_waiting_events_stay_few_for_a_big_gang():
    notifier = WaitNotifier(repeat_seconds=300)
    key = ("ml", "big")
    pods = _pods(3)
    assert names(notifier.targets(key, "GangWaiting", "3 of 1000 pods exist", pods, 0)) == ["p0", "p1", "p2"]
    # Same message: nothing; a new pod hears it once; a new message goes to the first pod only.
    assert notifier.targets(key, "GangWaiting", "3 of 1000 pods exist", pods, 1) == []
    pods = _pods(4)
    assert names(notifier.targets(key, "GangWaiting", "4 of 1000 pods exist", pods, 2)) == ["p0", "p3"]
    assert names(notifier.targets(key, "GangWaiting", "4 of 1000 pods exist", pods, 400)) == ["p0"]
    # A new reason reaches every pod.
    assert len(notifier.targets(key, "GangUnschedulable", "needs 8", pods, 401)) == 4


def test_event_names_are_stable_per_pod_and_reason():
    ref = PodRef("ml", "w-0", "uid-1")
    assert event_name(ref, "GangWaiting") == event_name(ref, "GangWaiting")
    assert event_name(ref, "GangWaiting") != event_name(ref, "GangReleased")
    assert event_name(ref, "GangWaiting").startswith("w-0.")


@pytest.mark.parametrize("field,value", [("policy", "greedy"), ("placement", "loose"), ("on_bind_timeout", "kill"),
                                         ("max_in_flight", 0), ("bind_timeout_seconds", 0)])
def test_bad_config_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        ControllerConfig(**{field: value}).validate()
