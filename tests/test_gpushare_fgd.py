"""FGD (ganggate/core/placement/gpushare_fgd.py): node fragmentation for a target workload, and the choice of
(node, card) that least increases it, against best-fit on the same inputs."""

from __future__ import annotations

import random

import pytest

from ganggate.core.fit.gpushare import NodeCards, PodShape, best_fit
from ganggate.core.placement.gpushare_fgd import FGD, fgd_policy, target_workload


def node(name: str, used: list[int], capacity: int = 1000, whole: int = 0, cpu: int | None = None) -> NodeCards:
    return NodeCards(name, [capacity] * len(used), list(used), whole, free_cpu_milli=cpu)


def share(milli: int, weight: float = 1.0, cpu: int = 0) -> PodShape:
    return PodShape(milli, 0, cpu, 0, weight)


def whole(gpus: int, weight: float = 1.0, cpu: int = 0) -> PodShape:
    return PodShape(0, gpus, cpu, 0, weight)


def place(policy, amount: int, nodes: list[NodeCards], workload) -> tuple[str, int] | None:
    choice = policy(amount, nodes, workload)
    if choice is not None:
        by_name = {n.node: n for n in nodes}
        by_name[choice[0]].take(choice[1], amount)
    return choice


# -- the fragmentation measure ------------------------------------------------------------------


def test_free_gpu_no_workload_pod_can_use_is_all_fragment():
    # one card with 300 free: a 600 pod cannot run, so all 300 is fragment
    assert FGD().node_fragmentation(node("n", [700]), [share(600)]) == 300
    # a 200 pod can: nothing is fragment
    assert FGD().node_fragmentation(node("n", [700]), [share(200)]) == 0


def test_when_the_pod_fits_only_the_too_small_cards_count():
    # cards with 800 and 300 free; a 500 pod fits the first, the 300 card is fragment
    assert FGD().node_fragmentation(node("n", [200, 700]), [share(500)]) == 300


def test_fragmentation_is_the_popularity_weighted_mean():
    # 300 free: fragment for a 600 pod (weight 3), not for a 100 pod (weight 1)
    assert FGD().node_fragmentation(node("n", [700]), [share(600, 3), share(100, 1)]) == pytest.approx(225)


def test_a_whole_gpu_shape_needs_enough_full_cards_and_cpu():
    two_idle = node("n", [0, 0, 500], cpu=8000)
    assert FGD().node_fragmentation(two_idle, [whole(2)]) == 500  # fits; the half card is fragment
    assert FGD().node_fragmentation(two_idle, [whole(3)]) == 2500  # cannot run: all of it
    assert FGD().node_fragmentation(two_idle, [whole(2, cpu=16000)]) == 2500  # too little CPU
    assert FGD().node_fragmentation(node("n", [0, 0], whole=1), [whole(2)]) == 1000  # a card given whole is gone


def test_cards_of_different_memory_compare_in_thousandths_of_a_card():
    small = NodeCards("s", [16], [8])  # half of a 16 GiB card
    big = NodeCards("b", [32], [16])  # half of a 32 GiB card
    workload = [share(600)]
    assert FGD().node_fragmentation(small, workload) == FGD().node_fragmentation(big, workload) == 500


def test_to_pods_that_ask_no_gpu_all_free_gpu_is_fragment():
    # 300 free: a 200 pod can use it all (0), a CPU-only pod none of it (300); equal weights
    assert FGD().node_fragmentation(node("n", [700]), [PodShape(0, 0, 4000, 0, 1.0), share(200)]) == 150
    # they add the same to every candidate's increase, so alone they change no choice
    nodes = [node("a", [400]), node("b", [0])]
    assert FGD(scored=False)(300, nodes, [share(600), PodShape(0, 0, 4000, 0, 5.0)]) == ("b", 0)


def test_the_observed_workload_counts_pods_that_ask_no_gpu_but_is_empty_without_gpu_pods():
    from ganggate.core.placement.capacity import Capacity
    from ganggate.core.placement.gpushare_round import observed_workload
    from tests.test_gpushare_planner import card_node, cluster, holder, make_pod

    cpu_pod = make_pod("c", namespace="ml", gang="c", pod_num=1, cpu="3")
    state = cluster([card_node("n1", 16, 2)], [holder("a", "n1", 0, 4), cpu_pod])
    shapes = {(s.share_milli, s.whole_gpus, s.cpu_milli): s.weight
              for s in observed_workload(state, Capacity.cards_of(state))}
    assert shapes == {(500, 0, 1000): 1.0, (0, 0, 3000): 1.0}  # 4 of a card of 8
    only_cpu = cluster([card_node("n1", 16, 2)], [cpu_pod])
    assert observed_workload(only_cpu, Capacity.cards_of(only_cpu)) == ()


# -- the choice ----------------------------------------------------------------------------------


def test_fgd_leaves_room_for_later_pods_where_best_fit_does_not():
    # Node a has one card with 600 free, node b one empty card. The workload asks 600 of a card.
    # A 300 pod: best-fit takes the tightest card (a: 600 -> 300, a fragment no 600 pod can use);
    # FGD sees a's fragmentation rise by 300 and b's not at all (1000 -> 700 still holds a 600 pod).
    workload = [share(600)]
    fgd_nodes = [node("a", [400]), node("b", [0])]
    bf_nodes = [node("a", [400]), node("b", [0])]
    assert place(FGD(), 300, fgd_nodes, workload) == ("b", 0)
    assert place(best_fit, 300, bf_nodes, workload) == ("a", 0)
    # then two pods of the workload's size arrive, placed by best-fit on both clusters
    fgd_placed = sum(place(best_fit, 600, fgd_nodes, workload) is not None for _ in range(2))
    bf_placed = sum(place(best_fit, 600, bf_nodes, workload) is not None for _ in range(2))
    assert (fgd_placed, bf_placed) == (2, 1)


def test_fgd_chooses_the_card_within_a_node_too():
    # cards with 500 and 1000 free; workload of 500 pods: a 500 pod on the half card keeps the full
    # card whole for the next; on the full card it would leave two 500 halves (also fine: 0 frag),
    # but a 700 pod must go to the full card since the half card cannot hold it
    workload = [share(500)]
    assert FGD()(500, [node("n", [500, 0])], workload) in {("n", 0), ("n", 1)}
    assert FGD()(700, [node("n", [500, 0])], workload) == ("n", 1)
    assert FGD()(1001, [node("n", [500, 0])], workload) is None


def test_whole_gpu_pods_go_where_they_fragment_least():
    # a 1-GPU pod: node a has 2 idle cards, node b 1 idle card and a card with 500 free;
    # workload of 2-GPU pods: taking a's card ruins a for them (all free becomes fragment),
    # b cannot host one anyway, so FGD takes b
    workload = [whole(2)]
    nodes = [node("a", [0, 0]), node("b", [0, 500])]
    assert FGD().whole_node(1, nodes, workload) == "b"
    assert FGD().whole_node(3, nodes, workload) is None


def test_nodes_in_the_same_state_tie_break_by_name_and_the_cache_does_not_change_the_answer():
    rng = random.Random(7)
    workload = [share(m, w) for m, w in ((300, 5), (500, 3), (800, 2))] + [whole(1, 4), whole(2, 1)]
    nodes = [node(f"n{i:02d}", [rng.choice([0, 200, 500, 700, 1000]) for _ in range(4)]) for i in range(30)]
    warm = FGD()
    for amount in (100, 300, 450, 800):
        first = warm(amount, nodes, workload)
        again = warm(amount, nodes, workload)  # from the cache now
        fresh = FGD()(amount, list(reversed(nodes)), workload)  # no cache, other order
        assert first == again == fresh
        # the chosen node is the first by name among those in its state
        chosen = next(n for n in nodes if n.node == first[0])
        twins = [n.node for n in nodes if (n.used, n.whole) == (chosen.used, chosen.whole)]
        assert first[0] == min(twins)


def test_the_module_policy_has_the_card_policy_signature():
    assert fgd_policy(300, [node("a", [400]), node("b", [0])], [share(600)]) == ("b", 0)


def test_target_workload_weights_by_count_and_cuts_at_coverage():
    pods = [(500, 0, 4000, 0)] * 6 + [(0, 1, 8000, 0)] * 3 + [(250, 0, 2000, 0)]
    full = target_workload(pods)
    assert [(s.share_milli, s.whole_gpus, s.weight) for s in full] == [(500, 0, 6.0), (0, 1, 3.0), (250, 0, 1.0)]
    assert len(target_workload(pods, coverage=0.9)) == 2
    with pytest.raises(ValueError):
        target_workload(pods, coverage=0)


def test_increases_within_one_reference_score_step_tie_and_go_to_the_tightest_card():
    # Node a has one card with 620 free, node b an empty card; a 50 pod arrives. The workload:
    # 600 pods (weight 1), 980 pods (0.5), 100 pods (99). On a the pod leaves 570, too little for
    # a 600 pod: F rises by about 5.4 thousandths; on b it leaves 950, too little for a 980 pod:
    # F rises by about 4.7. Exact FGD takes b, the smaller increase; both are worth 49 of the
    # reference's 100 score points, so ganggate's FGD takes the tightest card, a, as best-fit does,
    # keeping b's card empty for the whole-card pods that may come.
    workload = [share(600, 1), share(980, 0.5), share(100, 99)]
    nodes = [node("a", [380]), node("b", [0])]
    assert FGD(scored=False)(50, nodes, workload) == ("b", 0)
    assert FGD()(50, nodes, workload) == best_fit(50, nodes, workload) == ("a", 0)
    # a difference the score does see still overrides best-fit (600 pods are the whole workload)
    assert FGD()(300, [node("a", [400]), node("b", [0])], [share(600)]) == ("b", 0)


def test_the_reference_score_is_50_for_no_increase_and_falls_as_fragmentation_rises():
    from ganggate.core.placement.gpushare_fgd import reference_score

    assert [reference_score(x) for x in (-1000, 0, 5, 40, 100, 300, 8000)] == [73, 50, 49, 49, 47, 42, 0]


def test_a_pod_without_gpu_goes_where_its_cpu_strands_no_card():
    # The typical pod shares a card and needs 8 cores: a CPU pod of 4 cores on node a (10 free)
    # leaves a's card without the CPU to use it; on b (40 free) it strands nothing. Best fit
    # alone would take a (least CPU left); FGD takes b, as the reference scores every pod.
    workload = [share(500, cpu=8000)]
    nodes = [node("a", [0], cpu=10000), node("b", [0], cpu=40000)]
    assert FGD().whole_node(0, nodes, workload, cpu_milli=4000) == "b"
    # where no node is hurt, least free GPU first (best fit): c's card is half used
    nodes = [node("b", [0], cpu=40000), node("c", [500], cpu=40000)]
    assert FGD().whole_node(0, nodes, workload, cpu_milli=4000) == "c"
