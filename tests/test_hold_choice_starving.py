"""On a starving backlog, the holds a round makes are the holds of the plain rule: every node a
starving gang may use ranked afresh for it (ready time, held last, expected idle, pods that must
end, most free GPU, name) over the pods occupying it. A round works the ranking out once per
shape and brings it up to date from its own takes (`holdback._HoldMemo`): these rounds, full and
incremental, on random starving clusters (deadlines known and unknown, pods started at different
times, releases promised, running pods finishing) decide the same, message for message, as
rounds whose every hold ranks every node again."""

from __future__ import annotations

import random
import time
import weakref
from typing import Any

import pytest

from ganggate.core.incremental import IncrementalRounds
from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.nodeindex import NodeIndex
from ganggate.core.planner import decide
from ganggate.core.policy import holdback
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.pods import PodInfo
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0
NOW = T0 + 7200  # every gang waited two hours: all starve
SETTINGS: dict[str, Any] = {"starvation_seconds": 300.0, "blind_seconds": 6 * 3600.0}  # the controller's


def _plain_ranked(self: holdback._HoldMemo, capacity: Capacity, index: NodeIndex, first: PodInfo,
                  sticky: frozenset[str], within: frozenset[str] | None) -> list[holdback._Rank]:
    """The plain rule: every node ranked afresh, from its occupants, for this gang alone."""
    now = self.now
    names = {name for name in index.members if within is None or name in within}
    running = holdback._occupants(self.state_for_test, names, now)
    want = holdback.gpus(first.request)
    ranked = []
    for name in names:
        ready = holdback._ready([first], capacity.free[name], running.get(name, []), now)
        if ready is not None:
            free_gpu = max(0.0, holdback.gpus(capacity.free[name]))
            blind = holdback._expected_idle(ready[1], min(free_gpu, want), now) if ready[0] == float("inf") else 0.0
            ranked.append((ready[0], name not in sticky, blind, len(ready[1]), -free_gpu, name))
    return sorted(ranked)


def _cluster(seed: int, *, deadlines: bool, nodes: int = 24, waiting_pods: int = 160) -> tuple[list[dict], list[dict]]:
    """Nodes of 8 GPUs, half partly used by running pods started up to 6 hours ago (with
    deadlines, two in three of them end by a known time), and gangs of 1-8 pods of 1-8 GPUs."""
    rng = random.Random(seed)
    node_list = [make_node(f"n{i:02d}", gpus=8, cpu="96", memory="768Gi") for i in range(nodes)]
    pods: list[dict] = []
    for i in range(nodes):
        for j in range(rng.choice((0, 0, 1, 2))):
            pod = make_pod(f"run-{i}-{j}", namespace="busy", gpus=rng.choice((1, 2, 3)), cpu="8",
                           node_name=f"n{i:02d}", phase="Running")
            second = rng.randrange(6 * 3600)
            pod["status"]["startTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - second))
            if deadlines and rng.random() < 2 / 3:
                pod["spec"]["activeDeadlineSeconds"] = second + rng.randrange(60, 4 * 3600)
            pods.append(pod)
    waiting, gang = 0, 0
    while waiting < waiting_pods:
        size, gpus = rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 4, 8))
        created = f"2024-01-01T00:{rng.randrange(4):02d}:{rng.randrange(60):02d}Z"
        priority = rng.choice((0, 0, 100))
        pods += [make_pod(f"g{gang}-{j}", namespace="ml", gang=f"g{gang}", pod_num=size, gpus=gpus, cpu="4",
                          memory="32Gi", created=created, priority=priority) for j in range(size)]
        waiting, gang = waiting + size, gang + 1
    return node_list, pods


def _rows(out: tuple[list[Any], list[Any]]) -> tuple[list[Any], list[Any]]:
    decisions, waiting = out
    return ([(d.gang_key, d.placement, d.reason) for d in decisions],
            sorted((w.gang_key, w.event_reason, w.message) for w in waiting))


def _rounds(nodes: list[dict], pods: list[dict], seed: int, blind: float) -> list[tuple[list[Any], list[Any]]]:
    """A full and an incremental round after each step: the first round, its releases promised,
    then running pods finishing one by one (each round's releases promised). Blind holds are
    made after `blind` seconds of waiting (before: given back, the room named only)."""
    settings = {**SETTINGS, "blind_seconds": blind}
    rng = random.Random(seed)
    # Two pictures fed the same events, as two controllers would be: a round leaves memos on its
    # picture (a starving gang's held nodes), so the full and the incremental round each keep their own.
    full_state, state = ClusterState(), ClusterState()
    full_state.reset(nodes, pods)
    state.reset(nodes, pods)
    rounds = IncrementalRounds(**settings)
    out = []
    running = [p for p in pods if p["metadata"]["namespace"] == "busy"]
    rng.shuffle(running)
    for step in range(6):
        if step >= 2 and running:
            pod = running.pop()
            for picture in (full_state, state):
                picture.apply_pod("MODIFIED", {**pod, "status": {**pod["status"], "phase": "Succeeded"}})
        full = decide(full_state, NOW, **settings)
        incremental = rounds.decide(state, NOW)
        assert _rows(incremental) == _rows(full)  # (as always: incremental rounds decide as full ones)
        out.append(_rows(full))
        for d in full[0]:
            for picture in (full_state, state):
                picture.promise(d.gang_key, d.placement, NOW + 120)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("deadlines", [False, True])
@pytest.mark.parametrize("blind", [6 * 3600.0, 3600.0])  # the default; and past it: blind holds made
def test_holds_on_a_starving_backlog_are_those_of_ranking_every_node_for_each_gang(
        seed: int, deadlines: bool, blind: float, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, pods = _cluster(seed, deadlines=deadlines)
    kept = _rounds(nodes, pods, seed, blind)
    held = sum("capacity held back" in message or "would be held back" in message
               for _, waiting in kept for _, _, message in waiting)
    assert held  # (the clusters do make holds)

    plain_of = holdback._HoldMemo.of.__func__  # type: ignore[attr-defined]  # a classmethod's function, to wrap it

    def of(cls: type[holdback._HoldMemo], capacity: Capacity, state: ClusterState, now: float) -> holdback._HoldMemo:
        memo: holdback._HoldMemo = plain_of(cls, capacity, state, now)
        memo.state_for_test = state  # type: ignore[attr-defined]  # what the plain ranking reads, set on the memo for this test only
        return memo

    monkeypatch.setattr(holdback._HoldMemo, "of", classmethod(of))
    monkeypatch.setattr(holdback._HoldMemo, "ranked", _plain_ranked)
    assert _rounds(nodes, pods, seed, blind) == kept


def test_the_nodes_a_hold_ranks_are_sorted_in_steps_into_the_order_one_sort_gives() -> None:
    import random

    from ganggate.core.placement.nodeindex import sorted_in_steps

    rng = random.Random(7)
    for count in (0, 1, 2000, 2001, 9999):
        ranks = [(rng.random() < 0.5, rng.randint(0, 3), -rng.randint(0, 8), f"node-{i:05d}") for i in range(count)]
        rng.shuffle(ranks)
        assert sorted_in_steps(ranks) == sorted(ranks)
        assert sorted_in_steps(iter(ranks), step=7) == sorted(ranks)


def test_a_rounds_memo_is_emptied_piece_by_piece_and_a_piece_still_held_elsewhere_is_left_whole() -> None:
    from ganggate.core.state.letgo import let_go_of_memo

    class Memo:
        def __init__(self) -> None:
            self.rankings = {i: [i] * 3 for i in range(5000)}
            self.now = 1.0

    dropped, kept = Memo(), Memo()
    gone = weakref.ref(dropped)
    memo: dict[str, object] = {"dropped": dropped, "kept": kept}
    del dropped
    let_go_of_memo(memo)
    assert memo == {} and gone() is None
    assert len(kept.rankings) == 5000 and kept.now == 1.0  # someone still reads it: untouched
