"""The starvation guard holds room only where the hold brings the starving gang's start closer
than letting the others run would: refused where a pod or a gang that ends frees the room the
gang needs at once (it would get it first, hold or not), taken where the room frees bit by bit,
let go once it stops winning; said in the gang's Event, in `ganggate status`, and counted."""

from __future__ import annotations

from test_planner import T0, by_gang, cluster, gang, held_on
from test_starvation_guard import ending

from ganggate.controller.reporting.metrics import Metrics
from ganggate.controller.reporting.waitreport import WaitReport
from ganggate.controller.status.tables import format_status
from ganggate.core.planner import decide
from ganggate.core.policy.holdgain import INF, MARGIN_SECONDS, Ending, start_with_hold, start_without_hold, weigh
from ganggate.core.state.snapshot import make_node

GPU = "nvidia.com/gpu"
NOW = T0 + 7200  # the gangs below were created at T0: two hours of waiting, past every limit


def gpus(n: int) -> dict[str, int]:
    return {GPU: n * 1000}


def waiting_of(waitings, name: str):
    return next(w for w in waitings if w.gang_key[1] == name)


# ---- the two predicted starts ---------------------------------------------------------------


def test_without_a_hold_only_room_that_frees_in_one_piece_counts() -> None:
    # Node a: eight 1-GPU pods ending one by one (each a piece of its own): the stream refills
    # each GPU as it frees, so they never make room for an 8-GPU pod. Node b: one 8-GPU gang
    # ending at +3000 s frees b whole.
    endings = {"a": [Ending(NOW + 100 * i, gpus(1), f"a{i}", True) for i in range(1, 9)],
               "b": [Ending(NOW + 3000, gpus(4), ("ml", "g"), True), Ending(NOW + 3000, gpus(4), ("ml", "g"), True)]}
    free = {"a": {}, "b": {}}
    assert start_without_hold([gpus(8)], ["a"], endings, NOW) == INF
    assert start_without_hold([gpus(8)], ["a", "b"], endings, NOW) == NOW + 3000
    # With a hold on a, the room is kept as it frees: the gang starts when the last of them ends.
    assert start_with_hold([("a", gpus(8))], free, endings, NOW) == NOW + 800
    # Free GPUs now are not counted without a hold (the stream takes them), but are with one.
    assert start_with_hold([("a", gpus(8))], {"a": gpus(4)}, endings, NOW) == NOW + 400
    # A gang's pods free its room when the last of them ends; by `until`, or not at all.
    assert start_without_hold([gpus(8)], ["b"], endings, NOW, until=NOW + 2999) == INF
    # What a piece frees must hold the gang's CPU too: free CPU now is taken meanwhile.
    assert start_without_hold([{**gpus(8), "cpu": 64000}], ["b"], endings, NOW) == INF


def test_a_new_hold_must_win_by_the_margin_and_a_held_one_only_win() -> None:
    assert weigh(NOW + 3600, INF, NOW, held_before=False).taken  # it would not start without
    assert not weigh(NOW + 3600, NOW + 3600, NOW, held_before=False).taken  # as early without
    assert not weigh(NOW + 3600, NOW + 3600 + MARGIN_SECONDS / 2, NOW, held_before=False).taken
    assert weigh(NOW + 3600, NOW + 3600 + MARGIN_SECONDS / 2, NOW, held_before=True).taken
    assert not weigh(NOW + 3600, NOW + 3000, NOW, held_before=True).taken  # it stopped winning
    # The margin grows with the wait a hold predicts: a quarter of it.
    assert not weigh(NOW + 8 * 3600, NOW + 9 * 3600, NOW, held_before=False).taken
    assert weigh(NOW + 8 * 3600, NOW + 11 * 3600, NOW, held_before=False).taken


# ---- in a round -----------------------------------------------------------------------------


def test_a_hold_that_would_not_bring_the_start_closer_is_refused() -> None:
    # a: one 8-GPU pod that ends within 20 min (a deadline); b: 4 GPUs free, four 1-GPU pods
    # ending within the hour. The hold would drain a, which that pod frees whole in 20 min: the
    # starving gang, first in line, gets it then with or without a hold. No hold: the 1-GPU gang
    # takes b's free room.
    pods = [ending("a1", "a", 8, started=6000, deadline=2400)]
    pods += [ending(f"b{i}", "b", 1, started=6000, deadline=2400 + 600 * i) for i in range(1, 5)]
    pods += gang("big", 1, 8, created=0) + gang("small", 1, 1, created=3000)
    decisions, waiting = decide(cluster([make_node("a"), make_node("b")], pods), NOW, starvation_seconds=300)
    assert by_gang(decisions) == {"small": {"ml/small-0": "b"}}
    big = waiting_of(waiting, "big")
    assert "no capacity held back: it starts in about 20m without a hold" in big.message, big.message
    assert big.kind.endswith("+unheld") and big.hold_refused


def test_a_hold_that_brings_the_start_closer_is_taken() -> None:
    # a: eight 1-GPU pods, each a job of its own, ending one by one within 40 min; b: 4 free
    # GPUs beside four 1-GPU pods ending within an hour. Without a hold each GPU that frees is
    # taken by the next 1-GPU gang; with one, a drains and the gang starts in 40 min.
    pods = [ending(f"a{i}", "a", 1, started=6000, deadline=1200 + 300 * i) for i in range(1, 9)]
    pods += [ending(f"b{i}", "b", 1, started=6000, deadline=2400 + 600 * i) for i in range(1, 5)]
    pods += gang("big", 1, 8, created=0) + gang("small", 1, 1, created=3000)
    decisions, waiting = decide(cluster([make_node("a"), make_node("b")], pods), NOW, starvation_seconds=300)
    big = waiting_of(waiting, "big")
    assert held_on(big.message.split("; starts after")[0]), big.message
    assert "capacity held back on 1 node (a): it starts in about 40m with it" in big.message
    assert big.kind.endswith("+held") and not big.hold_refused and big.hold_gain is not None
    assert by_gang(decisions) == {"small": {"ml/small-0": "b"}}  # (b's room is not held)


def test_a_running_gang_frees_its_room_at_once_but_pods_started_together_do_not() -> None:
    # Blind (no deadlines): a holds two 4-GPU pods that started together 1 h ago; b one 1-GPU pod
    # that has run for days beside 7 free GPUs. The hold drains a (it idles nothing meanwhile).
    def round_with(a_pods):
        pods = a_pods + [ending("b1", "b", 1, started=-5 * 86400, deadline=None)]
        pods += gang("big", 1, 8, created=0)
        _, waiting = decide(cluster([make_node("a"), make_node("b")], pods), NOW,
                            starvation_seconds=300, blind_seconds=3600)
        return waiting_of(waiting, "big")

    # Two pods of no gang that happen to have started together: each frees its room alone,
    # and the stream would refill the first before the second ends. The hold pays.
    apart = [ending(f"a{i}", "a", 4, started=3600, deadline=None) for i in (1, 2)]
    assert held_on(round_with(apart).message)
    # The two ranks of one running gang end together, and free a whole: the starving gang gets
    # it then, held or not. The hold buys nothing and is refused.
    ranks = gang("run", 2, 4, created=0)
    for pod, started in zip(ranks, (3600, 3600), strict=True):
        pod["spec"]["nodeName"] = "a"
        pod["spec"]["schedulingGates"] = []
        pod["status"] = {"phase": "Running", "startTime": ending("x", "a", 1, started=started,
                                                                 deadline=None)["status"]["startTime"]}
    refused = round_with(ranks)
    assert "no capacity held back" in refused.message and refused.hold_refused


def test_a_hold_that_stops_winning_is_let_go() -> None:
    # Round 1: a (two 4-GPU pods, independent) is held, blind. Round 2: b's pod gives way to one
    # 8-GPU pod that ends by a deadline in 10 min, while a's pods run on for hours: b frees whole
    # long before a drains, so the hold no longer brings the start closer. It is let go, and a
    # 1-GPU gang may use a's free room again.
    a1, a2 = ending("a1", "a", 4, started=-3600, deadline=None), ending("a2", "a", 4, started=-3600, deadline=None)
    b1 = ending("b1", "b", 1, started=-5 * 86400, deadline=None)
    state = cluster([make_node("a"), make_node("b")], [a1, a2, b1] + gang("big", 1, 8, created=0))
    _, waiting = decide(state, NOW, starvation_seconds=300, blind_seconds=3600)
    assert held_on(waiting_of(waiting, "big").message)
    state.apply_pod("DELETED", a1)
    state.apply_pod("DELETED", b1)
    state.apply_pod("ADDED", ending("b2", "b", 8, started=7000, deadline=800))
    for pod in gang("small", 1, 1, created=3000):
        state.apply_pod("ADDED", pod)
    decisions, waiting = decide(state, NOW + 100, starvation_seconds=300, blind_seconds=3600)
    assert by_gang(decisions) == {"small": {"ml/small-0": "a"}}
    assert waiting_of(waiting, "big").hold_refused
    assert state.gangs[("ml", "big")].held_nodes == frozenset()


def test_after_a_refused_hold_the_next_starving_gang_waits_behind_it() -> None:
    # One hold at a time: the guard's turn went to `big`, which starts as early without one.
    pods = [ending("a1", "a", 8, started=6000, deadline=2400)]
    pods += [ending(f"b{i}", "b", 1, started=6000, deadline=2400 + 600 * i) for i in range(1, 5)]
    pods += gang("big", 1, 8, created=0) + gang("big2", 1, 8, created=5)
    _, waiting = decide(cluster([make_node("a"), make_node("b")], pods), NOW, starvation_seconds=300)
    assert "next in line after ml/big, which would start as early without capacity held back" in \
        waiting_of(waiting, "big2").message


# ---- what a user sees: status, the log, the metrics -----------------------------------------


def test_status_shows_the_held_node_and_the_starts_it_was_held_for() -> None:
    pods = [ending(f"a{i}", "a", 1, started=6000, deadline=1200 + 300 * i) for i in range(1, 9)]
    pods += gang("big", 1, 8, created=0)
    state = cluster([make_node("a"), make_node("b", gpus=4)], pods)
    decisions, waiting = decide(state, NOW, starvation_seconds=300)
    text = format_status(state, decisions, waiting, NOW)
    line = next(line for line in text.splitlines() if line.startswith("ml/big"))
    assert "capacity held back on 1 node (a): it starts in about 40m with it; without, no pod or gang" in line


def test_each_hold_weighed_is_logged_and_counted_once_per_change(caplog) -> None:
    metrics = Metrics()
    report = WaitReport(on_hold=metrics.hold_weighed)
    held_pods = [ending(f"a{i}", "a", 1, started=6000, deadline=1200 + 300 * i) for i in range(1, 9)]
    state = cluster([make_node("a"), make_node("b", gpus=4)], held_pods + gang("big", 1, 8, created=0))
    told = []
    with caplog.at_level("INFO", logger="ganggate.controller"):
        for second in (0, 10, 20):  # the same hold, three rounds: counted once
            _, waiting = decide(state, NOW + second, starvation_seconds=300)
            report.report(waiting, NOW + second, state.gangs, lambda pod, reason, message: told.append(message))
    assert metrics.registry.get_sample_value("ganggate_hold_gain_seconds_count") == 1
    assert metrics.registry.get_sample_value("ganggate_holds_refused_total") == 0
    assert [r.getMessage() for r in caplog.records if "starvation guard" in r.getMessage()] == [
        "starvation guard ml/big: hold taken, predicted gain unbounded (no room frees at once for it without)"]
    # The room frees whole now (one 8-GPU pod ending in 10 min): the hold is let go, counted once.
    for pod in held_pods:
        state.apply_pod("DELETED", pod)
    state.apply_pod("ADDED", ending("a9", "a", 8, started=7000, deadline=800))
    _, waiting = decide(state, NOW + 30, starvation_seconds=300)
    report.report(waiting, NOW + 30, state.gangs, lambda pod, reason, message: told.append(message))
    assert metrics.registry.get_sample_value("ganggate_holds_refused_total") == 1
