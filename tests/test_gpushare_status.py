"""`ganggate status --gpus`: per node and per card, the memory used and free and who holds it."""

from __future__ import annotations

from ganggate.controller.status.gpushare import card_rows, format_gpus
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod
from tests.test_gpushare_planner import card_node, holder, sharing_pod


def test_each_card_shows_used_free_and_its_pods_bound_or_promised() -> None:
    state = ClusterState()
    state.reset(
        [card_node("n1", 16, 2, gpus=2), card_node("n2", 24, 3), make_node("cpu-only", gpus=0)],
        [holder("a", "n1", 0, 3), holder("b", "n1", 0, 2), sharing_pod("c", 6),
         make_pod("w", namespace="train", gpus=1, node_name="n2", phase="Running")],
    )
    state.promise(("ml", "c"), {"ml/c": "n2"}, 1e12, cards={"ml/c": (2, 6)})
    text = format_gpus(state)
    lines = text.splitlines()
    assert lines[0].split() == ["NODE", "CARD", "TOTAL", "USED", "FREE", "PODS"]
    assert lines[1].split() == ["n1", "0", "8", "5", "3", "busy/a", "(3),", "busy/b", "(2)"]
    assert lines[2].split() == ["n1", "1", "8", "0", "8", "-"]
    # n2 has no nvidia.com/gpu of its own here, so "w" does not take a card there.
    assert lines[5].split() == ["n2", "2", "8", "6", "2", "ml/c", "(6,", "promised)"]
    assert "cpu-only" not in text
    assert lines[-1] == "Allocated/Total GPU memory in cluster: 11/40 (27%)"


def test_a_card_given_whole_and_a_pod_without_a_card_are_shown_as_such() -> None:
    stray = make_pod("stray", namespace="x", node_name="n1", phase="Running")
    stray["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "4"
    state = ClusterState()
    state.reset([card_node("n1", 16, 2, gpus=2)],
                [make_pod("w", namespace="train", gpus=1, node_name="n1", phase="Running"), stray])
    rows = {(r.node, r.card): r for r in card_rows(state)}
    assert rows[("n1", "0")].free == "whole"
    assert rows[("n1", "1")].free == "8"
    assert rows[("n1", "-")].pods == "x/stray (4) (no card recorded)"


def test_no_sharing_nodes_says_so() -> None:
    state = ClusterState()
    state.reset([make_node("n1")], [])
    assert format_gpus(state).startswith("No nodes with shared GPUs")
