"""The release patch of a GPU-sharing pod: the card's annotations go in the same patch that
removes the gate and pins the node (so the device plugin never sees a bound pod without them),
and read back as the device plugin reads them."""

from __future__ import annotations

from ganggate.contract import (
    DECISION_ANNOTATION,
    GATE_NAME,
    GPUSHARE_ASSIGNED,
    GPUSHARE_ASSUME_TIME,
    GPUSHARE_CARD_INDEX,
    GPUSHARE_CARD_TOTAL,
    GPUSHARE_POD_AMOUNT,
)
from ganggate.controller.release.patches import build_patch
from ganggate.core.fit.gpushare import cards_of, decision_annotations
from ganggate.core.state.pods import PodInfo
from ganggate.core.state.snapshot import make_pod
from ganggate.sim.apiserver.patch import apply_patch

CARD = decision_annotations(1, 4, 8, 1704067200123456789)


def released(pod: dict) -> dict:
    ops = build_patch(pod, '{"id":"d1"}', "n1", "g", extra_annotations=CARD)
    assert ops is not None
    return apply_patch("application/json-patch+json", pod, ops)


def test_one_patch_ungates_pins_and_records_the_card() -> None:
    pod = make_pod("p", gang="g", pod_num=1)
    after = released(pod)
    assert after["spec"].get("schedulingGates") in (None, [])
    assert after["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    annotations = after["metadata"]["annotations"]
    assert {k: annotations[k] for k in CARD} == {
        GPUSHARE_CARD_INDEX: "1", GPUSHARE_CARD_TOTAL: "8", GPUSHARE_POD_AMOUNT: "4",
        GPUSHARE_ASSIGNED: "false", GPUSHARE_ASSUME_TIME: "1704067200123456789",
    }
    assert annotations[DECISION_ANNOTATION] == '{"id":"d1"}'
    info = PodInfo.from_pod(after)
    assert info.gpu_card == (1, 4)


def test_a_pod_without_annotations_gets_them_all_in_one_add() -> None:
    pod = make_pod("p", gang="g", pod_num=1)
    del pod["metadata"]["annotations"]
    after = released(pod)
    assert after["metadata"]["annotations"][GPUSHARE_CARD_INDEX] == "1"


def test_without_extra_annotations_the_patch_is_as_before() -> None:
    pod = make_pod("p", gang="g", pod_num=1)
    assert build_patch(pod, "{}", "n1", "g") == build_patch(pod, "{}", "n1", "g", extra_annotations={})
    assert not any("ALIYUN" in op["path"] for op in build_patch(pod, "{}", "n1", "g") or [])


def test_the_cards_read_back_from_a_decisions_annotations() -> None:
    assert cards_of({"ns/a": CARD, "ns/b": {}}) == {"ns/a": (1, 4)}


def test_an_ungated_pod_gets_no_patch_at_all() -> None:
    pod = make_pod("p", gang="g", pod_num=1)
    pod["spec"]["schedulingGates"] = [{"name": "other"}]
    assert build_patch(pod, "{}", "n1", "g", extra_annotations=CARD) is None
    assert GATE_NAME not in str(pod)
