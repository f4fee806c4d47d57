"""The starvation guard with run-time bounds (issue #20): nodes to drain chosen by the pods'
deadlines (spec.activeDeadlineSeconds from status.startTime), held room lent to gangs that
surely leave before the starving gang could start, the start it can promise, and no hold
where nothing is free for a younger gang to take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from test_planner import T0, by_gang, cluster, gang, held_on, running

from ganggate.core.planner import decide
from ganggate.core.state.snapshot import make_node


def at(seconds: int) -> str:
    """T0 + seconds as a Kubernetes timestamp (before T0 too, unlike test_planner.ts)."""
    when = datetime.fromtimestamp(T0, UTC) + timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def ending(name: str, node: str, gpus: int, *, started: int, deadline: int | None) -> dict:
    """A running pod that started `started` seconds after T0, with that activeDeadlineSeconds."""
    pod = running(name, node, gpus)
    pod["status"]["startTime"] = at(started)
    if deadline is not None:
        pod["spec"]["activeDeadlineSeconds"] = deadline
    return pod


def with_deadline(pods: list[dict], deadline: int) -> list[dict]:
    for pod in pods:
        pod["spec"]["activeDeadlineSeconds"] = deadline
    return pods


def two_nodes() -> list[dict]:
    # node a: 6 GPUs busy until T0+3600 at the latest; node b: 7 busy until T0+1200.
    return [ending("a1", "a", 6, started=0, deadline=3600), ending("b1", "b", 7, started=0, deadline=1200)]


def test_the_guard_drains_the_node_whose_pods_end_first_and_says_when_the_gang_starts():
    # Without deadlines it would hold node a (most free GPU); b's pods surely end sooner.
    state = cluster([make_node("a"), make_node("b")], two_nodes() + gang("big", 1, 8, created=0))
    decisions, waiting = decide(state, T0 + 600, starvation_seconds=300)
    big = next(w for w in waiting if w.gang_key[1] == "big")
    assert "capacity held back on 1 node" in big.message
    assert "starts after busy/b1 end, by 2024-01-01T00:20:00Z at the latest" in big.message
    state.apply_pod("DELETED", two_nodes()[1])
    decisions, _ = decide(state, T0 + 1200, starvation_seconds=300)
    assert by_gang(decisions) == {"big": {"ml/big-0": "b"}}


def test_a_younger_gang_that_surely_ends_before_the_starving_gang_can_start_uses_the_held_room():
    pods = two_nodes() + gang("big", 1, 8, created=0)
    pods += with_deadline(gang("long", 1, 1, created=100), 3600)  # would outlast the hold
    pods += gang("unbounded", 1, 1, created=110)  # no deadline: nothing proves it leaves
    pods += with_deadline(gang("short", 1, 1, created=120), 300)  # ends by T0+900 < T0+1200
    state = cluster([make_node("a"), make_node("b")], pods)
    decisions, waiting = decide(state, T0 + 600, starvation_seconds=300)
    placed = by_gang(decisions)
    # a's 2 free GPUs go to the older two; "short" takes b's free GPU, held for "big".
    assert placed == {"long": {"ml/long-0": "a"}, "unbounded": {"ml/unbounded-0": "a"}, "short": {"ml/short-0": "b"}}
    assert "backfilled into room held for ml/big" in next(d for d in decisions if d.gang_key[1] == "short").reason
    state.apply_pod("ADDED", ending("a2", "a", 2, started=0, deadline=None))  # a is full now
    decisions, waiting = decide(state, T0 + 600, starvation_seconds=300)
    assert set(by_gang(decisions)) == {"short"}  # the held room goes to no gang without a bound
    decisions, _ = decide(state, T0 + 1000, starvation_seconds=300)  # 300 s from now is past the start
    assert decisions == []


def test_without_deadlines_nothing_uses_the_held_room():
    # a: full, one of its pods running for days (a hold there would wait for it); b: 1 GPU
    # free beside a young pod without a deadline: the hold drains b, blind.
    pods = [ending("a1", "a", 6, started=-5 * 86400, deadline=None), running("b1", "b", 7)]
    pods += gang("big", 1, 8, created=0) + with_deadline(gang("short", 1, 1, created=100), 300)
    state = cluster([make_node("a"), make_node("b")], pods + [running("a2", "a", 2)])
    decisions, waiting = decide(state, T0 + 600, starvation_seconds=300)
    assert decisions == []
    big = next(w for w in waiting if w.gang_key[1] == "big")
    assert held_on(big.message)  # no start it could promise


def test_a_starving_gang_holds_nothing_when_no_gpu_is_free_for_a_younger_one_to_take():
    # Every GPU busy: nothing a younger gang could take, so the slot stays free for the next.
    state = cluster([make_node("a")], [running("a1", "a", 8)] + gang("one", 1, 1, created=0)
                    + gang("big", 1, 8, created=5))
    _, waiting = decide(state, T0 + 600, starvation_seconds=300)
    assert all("held back" not in w.message and "next in line" not in w.message for w in waiting)


def test_where_pods_have_no_deadline_room_is_held_only_after_the_blind_limit():
    # b: full, one of its pods running for days; a hold drains a, whose one pod is young.
    pods = [running("a1", "a", 6), ending("b1", "b", 4, started=-5 * 86400, deadline=None), running("b2", "b", 4)]
    pods += gang("big", 1, 8, created=0) + gang("small", 1, 1, created=100)
    state = cluster([make_node("a"), make_node("b")], pods)
    decisions, waiting = decide(state, T0 + 600, starvation_seconds=300, blind_seconds=3600)
    assert by_gang(decisions) == {"small": {"ml/small-0": "a"}}  # nothing held: a's free room is usable
    big = next(w for w in waiting if w.gang_key[1] == "big")
    assert "not every pod there has a deadline: held after 3600s" in big.message
    state = cluster([make_node("a"), make_node("b")], pods)
    decisions, waiting = decide(state, T0 + 3700, starvation_seconds=300, blind_seconds=3600)
    assert decisions == []  # a is held for big now
    assert held_on(next(w for w in waiting if w.gang_key[1] == "big").message)


def test_no_start_is_promised_while_an_older_gang_still_waits():
    # "aaa" is older in round order (same age, key first) and waits too: it could take the
    # room freed for "big" before big's turn, so big is held for but promised nothing.
    pods = two_nodes() + gang("big", 1, 8, created=0) + gang("aaa", 1, 16, created=0)
    state = cluster([make_node("a"), make_node("b")], pods)
    _, waiting = decide(state, T0 + 600, starvation_seconds=300)
    big = next(w for w in waiting if w.gang_key[1] == "big")
    assert held_on(big.message) and "at the latest" not in big.message



def blind_hold_choice(pods: list[dict]) -> dict:
    """Where a 1-GPU gang goes while a 8-GPU gang that waited past the blind limit holds."""
    pods = pods + gang("big", 1, 8, created=0) + gang("small", 1, 1, created=3000)
    decisions, waiting = decide(cluster([make_node("a"), make_node("b")], pods), T0 + 7200,
                                starvation_seconds=300, blind_seconds=3600)
    big = next(w for w in waiting if w.gang_key[1] == "big").message
    assert held_on(big) or "no capacity held back" in big
    return by_gang(decisions)


def test_a_blind_hold_drains_the_node_expected_to_idle_least():
    # Run times are heavy-tailed: a pod that has run for days likely runs on for days. a: one
    # 1-GPU pod running for 5 days, 7 GPUs free (they would idle for days); b: two 4-GPU pods
    # started an hour ago, none free. The hold drains b; the small gang takes a's room.
    pods = [ending("a1", "a", 1, started=-5 * 86400, deadline=None)]
    pods += [ending("b1", "b", 4, started=-3600, deadline=None), ending("b2", "b", 4, started=-3600, deadline=None)]
    assert blind_hold_choice(pods) == {"small": {"ml/small-0": "a"}}
    # A node all of whose GPUs one pod holds idles nothing until it ends, however long it has
    # run: a: one 8-GPU pod for 5 days; b: 3 GPUs free beside pods of a few hours. (Nor does it
    # bring the start closer: the pod frees the node whole, which the gang, first in line, gets
    # with or without a hold; the hold is weighed and refused, and b's room is usable all the same.)
    pods = [ending("a1", "a", 8, started=-5 * 86400, deadline=None)]
    pods += [ending(f"b{i}", "b", 1, started=-3600 * i, deadline=None) for i in range(1, 6)]
    assert blind_hold_choice(pods) == {"small": {"ml/small-0": "b"}}


def test_a_blind_hold_stays_on_the_node_it_has_half_drained():
    # First round: a (two 4-GPU pods, none free) costs nothing to hold; b would idle 7 GPUs
    # behind a pod that has run for days. The hold drains a.
    a1, a2 = ending("a1", "a", 4, started=-3600, deadline=None), ending("a2", "a", 4, started=-3600, deadline=None)
    b1 = ending("b1", "b", 1, started=-5 * 86400, deadline=None)
    state = cluster([make_node("a"), make_node("b")], [a1, a2, b1] + gang("big", 1, 8, created=0))
    _, waiting = decide(state, T0 + 7200, starvation_seconds=300, blind_seconds=3600)
    assert held_on(next(w for w in waiting if w.gang_key[1] == "big").message)
    # Then a1 ends (a: 4 free GPUs now) and b's pod gives way to young ones that fill it: b
    # would now look cheaper to hold, but a is half drained and the hold stays there, so
    # a 1-GPU gang does not get a's free room (handing it back would start the drain over).
    # (Two pods on b: one 8-GPU pod would free b whole, and the hold would buy nothing.)
    state.apply_pod("DELETED", a1)
    state.apply_pod("DELETED", b1)
    state.apply_pod("ADDED", ending("b2", "b", 4, started=7000, deadline=None))
    state.apply_pod("ADDED", ending("b3", "b", 4, started=7000, deadline=None))
    for pod in gang("small", 1, 1, created=3000):
        state.apply_pod("ADDED", pod)
    decisions, _ = decide(state, T0 + 7300, starvation_seconds=300, blind_seconds=3600)
    assert decisions == []
