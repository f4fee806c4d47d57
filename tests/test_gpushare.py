"""The per-card model and the card policies (ganggate.core.fit.gpushare), against the gpushare
extender's rules: cards of equal size, use from the pods' card annotations, best fit within."""

from __future__ import annotations

import pytest

from ganggate.contract import GPUSHARE_CARD_INDEX, GPUSHARE_POD_AMOUNT, SHARED_GPU_COUNT, SHARED_GPU_MEMORY
from ganggate.core.fit.gpushare import (
    NodeCards,
    QuantityError,
    best_fit,
    card_of,
    card_shortfall,
    equal_cards,
    held_amount,
    mixes_whole_and_shared,
    node_cards,
    node_totals,
    random_fit,
    shared_amount,
)


def test_cards_of_equal_size_as_the_extender_splits_a_node() -> None:
    # gpushare-scheduler-extender NewNodeInfo: newDeviceInfo(i, total/count), integer division.
    assert equal_cards(32, 4) == [8, 8, 8, 8]
    assert equal_cards(31, 4) == [7, 7, 7, 7]
    assert equal_cards(16, 0) == [] and equal_cards(0, 2) == []


def test_node_totals_read_capacity_not_allocatable() -> None:
    node = {"status": {"capacity": {SHARED_GPU_MEMORY: "64", SHARED_GPU_COUNT: "4"},
                       "allocatable": {SHARED_GPU_MEMORY: "1", SHARED_GPU_COUNT: "1"}}}
    assert node_totals(node) == (64, 4)
    assert node_totals({"status": {"capacity": {SHARED_GPU_MEMORY: "64"}}}) == (0, 0)
    assert node_totals({"status": {"capacity": {SHARED_GPU_MEMORY: "lots", SHARED_GPU_COUNT: "4"}}}) == (0, 0)


def test_use_per_card_comes_from_the_holders_and_unknown_cards_are_skipped() -> None:
    cards = node_cards("n1", 16, 2, [(0, 3, "a/x"), (0, 2, "a/y"), (1, 8, "a/z"), (5, 4, "a/lost")])
    assert cards.used == [5, 8]
    assert [cards.free(0), cards.free(1)] == [3, 0]
    assert cards.holders == {0: ["a/x", "a/y"], 1: ["a/z"]}
    assert cards.fits(3) == [0] and cards.fits(4) == []


def test_cards_given_whole_are_the_emptiest_and_not_shared() -> None:
    cards = NodeCards("n1", [8, 8, 8], [2, 0, 0], whole=1)
    assert cards.whole_cards() == {1}
    assert cards.fits(1) == [0, 2]
    assert cards.free(1) == 0
    assert cards.idle() == 1
    cards.take_whole(1)
    assert cards.fits(1) == [0] and cards.idle() == 0


def test_take_and_give_back_are_exact_inverses() -> None:
    cards = node_cards("n1", 16, 2)
    copy = cards.copy()
    cards.take(1, 5, "ns/p")
    assert cards.used == [0, 5] and copy.used == [0, 0]
    cards.give_back(1, 5, "ns/p")
    assert cards == copy


def test_the_pod_amount_is_the_sum_of_its_containers_limits_rounded_up() -> None:
    pod = {"spec": {"containers": [
        {"name": "a", "resources": {"limits": {SHARED_GPU_MEMORY: "3"}}},
        {"name": "b", "resources": {"limits": {SHARED_GPU_MEMORY: "1500m"}}},
        {"name": "c", "resources": {"limits": {"cpu": "1"}}},
    ]}}
    assert shared_amount(pod) == 5  # Quantity.Value() rounds 1.5 up to 2
    with pytest.raises(QuantityError):
        shared_amount({"spec": {"containers": [{"resources": {"limits": {SHARED_GPU_MEMORY: "eight"}}}]}})


def test_card_annotations_are_read_as_strconv_atoi_reads_them() -> None:
    assert card_of({GPUSHARE_CARD_INDEX: "2"}) == 2
    assert card_of({GPUSHARE_CARD_INDEX: "-1"}) is None
    assert card_of({GPUSHARE_CARD_INDEX: "two"}) is None
    assert card_of({}) is None
    assert held_amount({GPUSHARE_POD_AMOUNT: "12"}) == 12
    assert held_amount({GPUSHARE_POD_AMOUNT: "-3"}) == 0 and held_amount({GPUSHARE_POD_AMOUNT: "x"}) == 0


def test_a_container_asking_whole_and_shared_gpus_is_named() -> None:
    pod = {"spec": {"containers": [
        {"name": "both", "resources": {"limits": {"nvidia.com/gpu": "1", SHARED_GPU_MEMORY: "4"}}},
        {"name": "shared", "resources": {"limits": {SHARED_GPU_MEMORY: "4"}}},
    ]}}
    assert mixes_whole_and_shared(pod) == ["both"]


def test_best_fit_takes_the_tightest_card_across_nodes() -> None:
    a = NodeCards("a", [8, 8], [0, 2])  # free 8, 6
    b = NodeCards("b", [16, 16], [11, 0])  # free 5, 16
    assert best_fit(5, [a, b]) == ("b", 0)
    assert best_fit(6, [a, b]) == ("a", 1)
    assert best_fit(17, [a, b]) is None
    from ganggate.controller.config import card_policy_named

    assert card_policy_named("best-fit") is best_fit  # the name the controller's flag takes


def test_random_fit_is_seeded_and_only_picks_cards_that_fit() -> None:
    nodes = [NodeCards(f"n{i}", [8, 8], [i % 3 * 3, 0]) for i in range(6)]
    picks = [random_fit(3)(4, nodes, ()) for _ in range(5)]
    again = [random_fit(3)(4, nodes, ()) for _ in range(5)]
    assert picks == again
    policy = random_fit(11)
    seen = {policy(5, nodes, ()) for _ in range(200)}
    assert all(next(n for n in nodes if n.node == node).free(card) >= 5 for node, card in seen)
    assert len(seen) > 3  # it does spread
    assert random_fit(0)(9, nodes, ()) is None


def test_the_shortfall_says_what_is_free_and_where() -> None:
    split = NodeCards("split", [16, 16], [8, 8])
    assert "split 8 + 8 across cards" in card_shortfall(12, [split])
    assert "holds 8 (split): it can never fit" in card_shortfall(9, [NodeCards("split", [8], [0])])


def test_a_controller_left_to_its_default_chooses_cards_with_fgd() -> None:
    # a 300 pod beside an observed workload of 600 pods: best-fit would take node a's card with
    # 600 free (leaving 300 no such pod can use); the default policy keeps it for one and takes b
    from ganggate.controller.config import ControllerConfig, card_policy_named, whole_gpu_policy_named
    from ganggate.core.fit.gpushare import PodShape

    config = ControllerConfig()
    nodes = [NodeCards("a", [1000], [400]), NodeCards("b", [1000], [0])]
    workload = [PodShape(600, 0, 0, 0, 1.0)]
    assert best_fit(300, nodes, workload) == ("a", 0)
    assert card_policy_named(config.card_policy)(300, nodes, workload) == ("b", 0)
    assert whole_gpu_policy_named(config.card_policy) is not None  # it places whole-GPU pods too
