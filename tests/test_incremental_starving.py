"""Incremental rounds on a starving backlog: gangs past the starvation limit are kept between
rounds like the others, planned again only when what their answer read changed (their nodes,
a hold made before their turn, the hold they waited behind gone), and decide as full rounds."""

from __future__ import annotations

import time

import pytest

from ganggate.core.incremental import IncrementalRounds, SettingsMismatch
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0
NOW = T0 + 7200  # two hours after the gangs were created: every waiting gang starves


def _gang(name: str, gpus: int, pool: str | None = None, second: int = 0) -> dict:
    return make_pod(f"{name}-0", namespace="ml", gang=name, pod_num=1, gpus=gpus,
                    node_selector={"pool": pool} if pool else None, created=f"2024-01-01T00:00:{second:02d}Z")


def _running(name: str, node: str, gpus: int, deadline: int | None = None) -> dict:
    pod = make_pod(name, namespace="busy", gpus=gpus, cpu="2", node_name=node, phase="Running")
    if deadline is not None:  # ends by startTime + deadline: a hold on its node knows when it starts
        pod["spec"]["activeDeadlineSeconds"] = deadline
        pod["status"]["startTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW))
    return pod


def _round(state: ClusterState, rounds: IncrementalRounds) -> dict[str, str]:
    """The incremental round, checked against the full one; the waiting gangs' messages."""
    got = rounds.decide(state, NOW)
    want = decide(state, NOW)
    assert [(d.gang_key, d.placement) for d in got[0]] == [(d.gang_key, d.placement) for d in want[0]]
    assert {w.gang_key: w.message for w in got[1]} == {w.gang_key: w.message for w in want[1]}
    return {w.gang_key[1]: w.message for w in got[1]}


def _cluster() -> tuple[ClusterState, list[dict]]:
    """n0 (pool b) and n1 (pool a), both full; `old` may use either, `late-a` only n1."""
    nodes = [make_node("n0", gpus=8, labels={"pool": "b"}), make_node("n1", gpus=8, labels={"pool": "a"})]
    busy = [_running("b0", "n0", 8), _running("b1", "n1", 8)]
    state = ClusterState()
    state.reset(nodes, busy + [_gang("old", 8), _gang("late-a", 4, pool="a", second=30)])
    return state, busy


def test_starving_gangs_are_kept_between_rounds_and_planned_again_when_a_hold_comes_before_them() -> None:
    state, busy = _cluster()
    rounds = IncrementalRounds()
    _round(state, rounds)  # no GPU free anywhere: nothing to hold, both wait as any gang would
    _round(state, rounds)
    assert (rounds.incremental_rounds, rounds.turns) == (1, 0)  # starving, and kept all the same
    state.apply_pod("ADDED", _gang("new", 1, pool="a", second=50))  # younger, on n1 alone
    _round(state, rounds)
    assert rounds.turns == 1
    # n0 frees 4 GPUs, held by a pod that ends within 10 minutes: `old` holds n0 now, and
    # `late-a` (kept; its node n1 did not change) must say it is next in line after it.
    state.apply_pod("DELETED", busy[0])
    state.apply_pod("ADDED", _running("short", "n0", 4, deadline=600))
    waiting = _round(state, rounds)
    assert "capacity held back on 1 node" in waiting["old"]
    assert "next in line after ml/old" in waiting["late-a"]


def test_a_gang_that_waited_behind_a_hold_is_planned_again_when_the_hold_is_gone() -> None:
    state, busy = _cluster()
    state.apply_pod("DELETED", busy[0])
    state.apply_pod("ADDED", _running("short", "n0", 4, deadline=600))
    rounds = IncrementalRounds()
    assert "next in line after ml/old" in _round(state, rounds)["late-a"]
    state.apply_pod("DELETED", _running("short", "n0", 4, deadline=600))  # n0 is empty: `old` fits there
    decisions, _ = rounds.decide(state, NOW)
    assert [d.gang_key for d in decisions] == [("ml", "old")]
    waiting = _round(state, rounds)  # (the same state: `old` is decided again, not yet promised)
    assert "next in line" not in waiting["late-a"] and "waited" not in waiting["late-a"]


def test_a_call_with_other_settings_is_refused_and_the_rounds_go_on_incremental() -> None:
    """A second caller (a bench's baseline, a debugging hook) with other settings must not turn
    the owner's rounds into full ones: it is refused, with what was asked and what is used."""
    state, _ = _cluster()
    rounds = IncrementalRounds(blind_seconds=21600.0)
    rounds.decide(state, NOW, blind_seconds=21600.0)
    with pytest.raises(SettingsMismatch, match=r"plan with blind_seconds=21600.0; a call asked for blind_seconds=None"):
        rounds.decide(state, NOW, blind_seconds=None)
    rounds.decide(state, NOW)  # no settings given: the rounds' own
    rounds.decide(state, NOW, starvation_seconds=300.0, blind_seconds=21600.0)
    assert (rounds.full_rounds, rounds.incremental_rounds, rounds.turns) == (1, 2, 0)
