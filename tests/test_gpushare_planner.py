"""GPU sharing in the planner (#9): per-card fit beside per-node fit, the card recorded with the
decision in the gpushare device plugin's format, all-or-nothing for sharing gangs, and per-card
use rebuilt from the pods' annotations alone after a restart."""

from __future__ import annotations

import re

from ganggate.contract import (
    GPUSHARE_ASSIGNED,
    GPUSHARE_ASSUME_TIME,
    GPUSHARE_CARD_INDEX,
    GPUSHARE_CARD_TOTAL,
    GPUSHARE_POD_AMOUNT,
    SHARED_GPU_COUNT,
    SHARED_GPU_MEMORY,
)
from ganggate.core.fit.gpushare import random_fit
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0  # 2024-01-01T00:00:00Z


def card_node(name: str, total: int = 16, count: int = 2, gpus: int = 0) -> dict:
    """A node the gpushare device plugin advertises: `count` cards, `total` GiB in all."""
    return make_node(name, gpus=gpus, extra={SHARED_GPU_MEMORY: str(total), SHARED_GPU_COUNT: str(count)})


def sharing_pod(name: str, amount: int | str, *, gang: str | None = None, pod_num: int = 1, **kw) -> dict:
    pod = make_pod(name, namespace="ml", gang=gang or name, pod_num=pod_num, **kw)
    pod["spec"]["containers"][0]["resources"]["limits"][SHARED_GPU_MEMORY] = str(amount)
    return pod


def holder(name: str, node: str, card: int, amount: int) -> dict:
    """A running sharing pod the extender (or ganggate) gave card `card`."""
    pod = make_pod(name, namespace="busy", node_name=node, phase="Running")
    pod["spec"]["containers"][0]["resources"]["limits"][SHARED_GPU_MEMORY] = str(amount)
    pod["metadata"]["annotations"].update(
        {GPUSHARE_CARD_INDEX: str(card), GPUSHARE_POD_AMOUNT: str(amount), GPUSHARE_ASSIGNED: "true",
         GPUSHARE_ASSUME_TIME: "1"}
    )
    return pod


def cluster(nodes: list[dict], pods: list[dict]) -> ClusterState:
    state = ClusterState()
    state.reset(nodes, pods)
    return state


def used(state: ClusterState) -> dict[str, list[int]]:
    return {name: cards.used for name in sorted(state.nodes) if (cards := state.cards(name)) is not None}


def released(decisions) -> dict[str, tuple[str, int]]:
    """pod key -> (node, card) over every decision."""
    return {
        key: (node, int(d.annotations[key][GPUSHARE_CARD_INDEX]))
        for d in decisions
        for key, node in d.placement.items()
    }


def test_a_12_gib_pod_never_lands_on_a_node_split_8_plus_8() -> None:
    # split: 8 + 8 free (16 in all, enough for the default scheduler's node sum); whole: 16 on card 1.
    state = cluster(
        [card_node("split", 32), card_node("whole", 32)],
        [holder("a", "split", 0, 8), holder("b", "split", 1, 8), holder("c", "whole", 0, 16),
         sharing_pod("big", 12)],
    )
    decisions, waiting = decide(state, T0)
    assert waiting == []
    assert released(decisions) == {"ml/big": ("whole", 1)}


def test_a_12_gib_pod_waits_when_every_node_is_split_and_says_why() -> None:
    state = cluster([card_node("split", 32)], [holder("a", "split", 0, 8), holder("b", "split", 1, 8),
                                               sharing_pod("big", 12)])
    decisions, waiting = decide(state, T0)
    assert decisions == []
    assert [w.event_reason for w in waiting] == ["GangUnschedulable"]
    assert "needs 12 aliyun.com/gpu-mem on one GPU card" in waiting[0].message
    assert "split 8 + 8 across cards" in waiting[0].message


def test_a_pod_larger_than_any_card_is_told_it_can_never_fit() -> None:
    state = cluster([card_node("n1", 16, 2)], [sharing_pod("huge", 10)])
    decisions, waiting = decide(state, T0)
    assert decisions == []
    assert [w.event_reason for w in waiting] == ["GangCannotFit"]
    assert waiting[0].message.startswith("a pod needs 10 aliyun.com/gpu-mem on one GPU card, but the largest card of "
                                         "the nodes it may use holds 8 (n1): it can never fit until a node with "
                                         "larger cards joins")


def test_two_pods_in_one_round_never_oversubscribe_one_card() -> None:
    # One node, two cards of 8: six pods of 5 each; at most one per card fits.
    pods = [sharing_pod(f"p{i}", 5, created=f"2024-01-01T00:00:0{i}Z") for i in range(6)]
    state = cluster([card_node("n1", 16, 2)], pods)
    decisions, waiting = decide(state, T0)
    placed = released(decisions)
    assert sorted(card for _, card in placed.values()) == [0, 1]
    assert len(waiting) == 4


def test_no_card_oversubscribed_across_rounds_while_promised_and_once_bound() -> None:
    state = cluster([card_node("n1", 16, 2)], [sharing_pod("p0", 6)])
    first, _ = decide(state, T0)
    decision = first[0]
    state.promise(decision.gang_key, decision.placement, T0 + 60,
                  cards={k: (int(a[GPUSHARE_CARD_INDEX]), int(a[GPUSHARE_POD_AMOUNT]))
                         for k, a in decision.annotations.items()})
    state.apply_pod("ADDED", sharing_pod("p1", 6))
    state.apply_pod("ADDED", sharing_pod("p2", 6))
    second, waiting = decide(state, T0 + 1)
    cards = [released(first)["ml/p0"][1]] + [card for _, card in released(second).values()]
    assert sorted(cards) == [0, 1]  # p0's card is promised: the next pod takes the other one
    assert len(waiting) == 1
    # p0 binds: its card is now held by its annotations, not by the promise.
    bound = sharing_pod("p0", 6, node_name="n1", phase="Running", gated=False)
    bound["metadata"]["annotations"].update(decision.annotations["ml/p0"])
    state.apply_pod("MODIFIED", bound)
    assert "ml/p0" not in state.promises
    assert sorted(state.cards("n1").used) == [0, 6]


def test_a_sharing_gang_of_4_goes_whole_or_not_at_all() -> None:
    # Two cards of 8: a gang of 4 pods of 4 fits (two per card); a gang of 4 pods of 5 does not
    # (one per card), and none of its pods is released.
    fits = cluster([card_node("n1", 16, 2)], [sharing_pod(f"a{i}", 4, gang="a", pod_num=4) for i in range(4)])
    decisions, waiting = decide(fits, T0)
    assert waiting == [] and len(decisions[0].placement) == 4
    assert sorted(card for _, card in released(decisions).values()) == [0, 0, 1, 1]
    too_big = cluster([card_node("n1", 16, 2)], [sharing_pod(f"b{i}", 5, gang="b", pod_num=4) for i in range(4)])
    decisions, waiting = decide(too_big, T0)
    assert decisions == []
    assert [w.gang_key for w in waiting] == [("ml", "b")]


def test_two_gangs_in_one_round_share_the_cards_without_oversubscribing() -> None:
    pods = [sharing_pod(f"a{i}", 6, gang="a", pod_num=2) for i in range(2)]
    pods += [sharing_pod(f"b{i}", 6, gang="b", pod_num=2, created="2024-01-01T00:00:05Z") for i in range(2)]
    state = cluster([card_node("n1", 16, 2), card_node("n2", 16, 2)], pods)
    decisions, waiting = decide(state, T0)
    placed = released(decisions)
    assert len(placed) == 4 and waiting == []
    assert len(set(placed.values())) == 4  # four different cards


def test_the_decision_carries_the_annotations_in_the_device_plugins_format() -> None:
    state = cluster([card_node("n1", 16, 2)], [holder("h", "n1", 0, 3), sharing_pod("p", 4)])
    decisions, _ = decide(state, T0 + 0.5)
    annotations = decisions[0].annotations["ml/p"]
    # gpushare-scheduler-extender pkg/utils/pod.go PatchPodAnnotationSpec: decimal ints, the
    # assigned flag "false", the assume time in unix nanoseconds (time.Now().UnixNano()).
    assert annotations == {
        GPUSHARE_CARD_INDEX: "0",  # best fit: the card with 5 free, not the empty one
        GPUSHARE_CARD_TOTAL: "8",
        GPUSHARE_POD_AMOUNT: "4",
        GPUSHARE_ASSIGNED: "false",
        GPUSHARE_ASSUME_TIME: str(int((T0 + 0.5) * 1e9)),
    }
    assert all(re.fullmatch(r"[0-9]+", annotations[k]) for k in
               (GPUSHARE_CARD_INDEX, GPUSHARE_POD_AMOUNT, GPUSHARE_ASSUME_TIME))


def test_a_restart_rebuilds_per_card_use_from_the_annotations_alone() -> None:
    nodes = [card_node("n1", 16, 2), card_node("n2", 24, 3)]
    state = cluster(nodes, [holder("h0", "n1", 1, 3)] + [sharing_pod(f"p{i}", 2 + i) for i in range(4)])
    decisions, _ = decide(state, T0)
    for d in decisions:
        state.promise(d.gang_key, d.placement, T0 + 60,
                      cards={k: (int(a[GPUSHARE_CARD_INDEX]), int(a[GPUSHARE_POD_AMOUNT]))
                             for k, a in d.annotations.items()})
    before = used(state)
    # The pods as the release patch leaves them: ungated, pinned, the decision and card recorded.
    pods = [holder("h0", "n1", 1, 3)]
    for d in decisions:
        for key, node in d.placement.items():
            name = key.split("/")[1]
            pod = sharing_pod(name, int(d.annotations[key][GPUSHARE_POD_AMOUNT]), gated=False,
                              decision={"id": "d1", "time": "2024-01-01T00:00:00Z", "node": node})
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            pod["metadata"]["annotations"].update(d.annotations[key])
            pods.append(pod)
    fresh = cluster(nodes, pods)
    assert used(fresh) == before
    assert sum(sum(u) for u in before.values()) == 3 + 2 + 3 + 4 + 5


def test_whole_gpus_and_shared_memory_on_one_node_never_take_the_same_card() -> None:
    # Two cards; one is shared by a running pod: a pod asking 2 whole GPUs does not fit, 1 does.
    nodes = [card_node("n1", 16, 2, gpus=2)]
    two = cluster(nodes, [holder("h", "n1", 0, 2), make_pod("w", namespace="ml", gang="w", pod_num=1, gpus=2)])
    decisions, waiting = decide(two, T0)
    assert decisions == [] and len(waiting) == 1
    one = cluster(nodes, [holder("h", "n1", 0, 2), make_pod("w", namespace="ml", gang="w", pod_num=1, gpus=1),
                          sharing_pod("s", 8, created="2024-01-01T00:00:09Z")])
    decisions, waiting = decide(one, T0)
    # The whole GPU takes the idle card; the 8 GiB pod then finds no card with 8 free.
    assert [d.gang_key[1] for d in decisions] == ["w"]
    assert "needs 8 aliyun.com/gpu-mem on one GPU card" in waiting[0].message


def test_a_seeded_random_policy_is_selectable_and_still_never_oversubscribes() -> None:
    pods = [sharing_pod(f"p{i}", 3, created=f"2024-01-01T00:00:0{i}Z") for i in range(8)]
    state = cluster([card_node("n1", 16, 2), card_node("n2", 16, 2)], pods)
    decisions, waiting = decide(state, T0, card_policy=random_fit(7))
    per_card: dict[tuple[str, int], int] = {}
    for where in released(decisions).values():
        per_card[where] = per_card.get(where, 0) + 3
    assert len(decisions) == 8 and all(total <= 8 for total in per_card.values())


def test_the_observed_workload_counts_the_clusters_gpu_pods_as_shares_of_a_card() -> None:
    from ganggate.core.placement.capacity import Capacity
    from ganggate.core.placement.gpushare_round import observed_workload

    pods = [holder("a", "n1", 0, 4), holder("b", "n1", 1, 4), sharing_pod("c", 2),
            make_pod("w", namespace="ml", gang="w", pod_num=1, gpus=1, cpu="2")]
    state = cluster([card_node("n1", 16, 2, gpus=2)], pods)
    shapes = {(s.share_milli, s.whole_gpus, s.cpu_milli): s.weight
              for s in observed_workload(state, Capacity.cards_of(state), coverage=1.0)}
    assert shapes == {(500, 0, 1000): 2.0, (250, 0, 1000): 1.0, (0, 1, 2000): 1.0}


def test_fgd_is_selectable_for_cards_and_whole_gpus_and_never_oversubscribes() -> None:
    from ganggate.controller.config import card_policy_named, whole_gpu_policy_named

    pods = [sharing_pod(f"s{i}", 3, created=f"2024-01-01T00:00:0{i}Z") for i in range(6)]
    pods += [make_pod("w", namespace="ml", gang="w", pod_num=1, gpus=1)]
    state = cluster([card_node("n1", 16, 2, gpus=2), card_node("n2", 16, 2, gpus=2)], pods)
    decisions, waiting = decide(state, T0, card_policy=card_policy_named("fgd"),
                                whole_gpu_policy=whole_gpu_policy_named("fgd"))
    assert waiting == [] and len(decisions) == 7
    placed = {k: v for d in decisions for k, v in d.placement.items()}
    per_card: dict[tuple[str, int], int] = {}
    for d in decisions:
        for key, pod_annotations in d.annotations.items():
            where = (placed[key], int(pod_annotations[GPUSHARE_CARD_INDEX]))
            per_card[where] = per_card.get(where, 0) + 3
    whole_node = placed["ml/w"]
    assert all(total <= 8 for total in per_card.values())
    # the whole GPU's card is one nobody shares: its node has a card without sharing pods
    assert len({card for node, card in per_card if node == whole_node}) <= 1


def test_an_unknown_card_policy_is_refused_by_the_controller_config() -> None:
    import pytest

    from ganggate.controller.config import ControllerConfig

    with pytest.raises(ValueError, match="card_policy must be one of best-fit, random, fgd"):
        ControllerConfig(card_policy="tightest").validate()


def test_a_card_chosen_after_placement_is_asked_of_the_policy_with_the_pods_cpu() -> None:
    """with_cards (a pod placed without a card, e.g. on a preemptor's reserved node) tells the
    card policy the pod's CPU, as the packer's choice does: FGD weighs it."""
    from ganggate.core.fit.gpushare import best_fit
    from ganggate.core.placement.capacity import Capacity
    from ganggate.core.placement.gpushare_round import with_cards

    state = cluster([card_node("c0")], [sharing_pod("s", 4, cpu="3")])
    asked: list[int] = []

    def policy(amount, candidates, workload, cpu_milli=0):
        asked.append(cpu_milli)
        return best_fit(amount, candidates, workload, cpu_milli=cpu_milli)

    capacity = Capacity.from_state(state, card_policy=policy)
    (pod,) = state.gangs[("ml", "s")].pods.values()
    capacity.take("c0", pod.request)
    assert with_cards([pod], {pod.key: "c0"}, capacity) == {pod.key: "c0"}
    assert asked == [3000]


def _cpu_pod_placement(nodes: list[dict], policy: str) -> str | None:
    """Where a lone 4-core pod asking no GPU goes, the typical pod sharing half a card with 8 cores."""
    from ganggate.controller.config import card_policy_named, whole_gpu_policy_named
    from ganggate.core.fit.gpushare import PodShape
    from ganggate.core.placement.capacity import Capacity

    state = cluster(nodes, [make_pod("cpu-only", namespace="ml", gang="cpu-only", pod_num=1, cpu="4")])
    capacity = Capacity.from_state(state, card_policy=card_policy_named(policy),
                                   whole_gpu_policy=whole_gpu_policy_named(policy),
                                   workload=[PodShape(500, 0, 8000, 0, 1.0)])
    (pod,) = state.gangs[("ml", "cpu-only")].pods.values()
    return capacity.best_node(pod)


def _node(name: str, cpu: str, cards: bool = True) -> dict:
    extra = {SHARED_GPU_MEMORY: "16", SHARED_GPU_COUNT: "2"} if cards else None
    return make_node(name, gpus=0, cpu=cpu, extra=extra)


def test_under_fgd_a_pod_without_gpu_leaves_a_nodes_cards_the_cpu_to_use_them() -> None:
    # On "tight" (10 cores) the pod would leave 6, below the 8 the typical sharing pod needs, and
    # both cards would be stranded; on "roomy" (40 cores) nothing is. Best fit takes the node with
    # least CPU left; fgd weighs the cards, as the FGD reference scores every pod.
    nodes = [_node("tight", "10"), _node("roomy", "40")]
    assert _cpu_pod_placement(nodes, "best-fit") == "tight"
    assert _cpu_pod_placement(nodes, "fgd") == "roomy"


def test_under_fgd_a_pod_without_gpu_takes_a_node_without_cards_first() -> None:
    nodes = [_node("cards", "10"), _node("cards-roomy", "40"), _node("cpu", "64", cards=False)]
    assert _cpu_pod_placement(nodes, "fgd") == "cpu"
    assert _cpu_pod_placement(nodes, "best-fit") == "cards"
