"""bench/traffic.py, the #19 stress scenario: its ledger's arithmetic, its arrivals, and a
CI-size run of the same scenario code (2 nodes, a handful of gangs among ordinary pods)."""

from __future__ import annotations

from bench.traffic import GANG_LABEL, SIZE_LABEL, Ledger, TrafficConfig, arrivals, gang_job, run


def pod(uid: str, *, gang: str | None = "g", size: int = 2, node: str | None = None, phase: str = "Pending",
        deleting: bool = False) -> dict:
    labels = {GANG_LABEL: gang, SIZE_LABEL: str(size)} if gang else {}
    meta = {"uid": uid, "name": uid, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase},
            "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def test_a_gang_bound_one_member_at_a_time_is_partial_until_the_last_binds():
    ledger = Ledger(capacity_gpus=8)
    ledger.observe(0.0, "ADDED", pod("a"))
    ledger.observe(0.0, "ADDED", pod("b"))
    ledger.observe(1.0, "MODIFIED", pod("a", node="n1"))
    ledger.observe(3.0, "MODIFIED", pod("b", node="n1"))
    ledger.observe(6.0, "MODIFIED", pod("a", node="n1", phase="Succeeded"))
    ledger.observe(6.0, "MODIFIED", pod("b", node="n1", phase="Succeeded"))
    f = ledger.figures(10.0, span=10.0)
    assert (f.gangs, f.completed, f.partial_gangs, f.in_pieces, f.restarted) == (1, 1, 1, 0, 0)
    assert f.partial_gpu_seconds == 2.0 and f.longest_window == 2.0 and f.partial_over_2s == 1
    assert f.mean_wait == 3.0  # created at 0, whole at 3
    assert f.busy == (5 + 3) / 80  # 8 GPU-seconds held of 8 GPUs x 10 s


def test_a_member_that_finishes_before_another_binds_ran_in_pieces():
    ledger = Ledger(capacity_gpus=8)
    ledger.observe(0.0, "ADDED", pod("a", node="n1"))
    ledger.observe(0.0, "ADDED", pod("b"))
    ledger.observe(4.0, "MODIFIED", pod("a", node="n1", phase="Succeeded"))
    ledger.observe(9.0, "MODIFIED", pod("b", node="n2"))
    f = ledger.figures(12.0, span=12.0)
    assert f.in_pieces == 1 and f.longest_window == 4.0 and f.partial_over_2s == 1


def test_a_gang_whose_members_are_deleted_before_they_end_was_restarted_and_ordinary_pods_are_counted():
    ledger = Ledger(capacity_gpus=8)
    ledger.observe(0.0, "ADDED", pod("a", node="n1"))
    ledger.observe(0.5, "MODIFIED", pod("a", node="n1", deleting=True))
    ledger.observe(1.0, "DELETED", pod("a", node="n1", deleting=True))
    ledger.observe(1.0, "ADDED", pod("o", gang=None))
    f = ledger.figures(2.0, span=2.0)
    assert (f.restarted, f.in_pieces, f.ordinary_pods) == (1, 0, 1)
    assert f.partial_gpu_seconds == 1.0  # a held its GPU alone until it was gone


def test_the_arrivals_are_the_same_for_every_mode_and_gangs_carry_annotations_only_when_gated():
    config = TrafficConfig(gangs=5, ordinary_rate=2.0, seed=3)
    plan = arrivals(config)
    assert plan == arrivals(config) and [a.at for a in plan] == sorted(a.at for a in plan)
    assert sum(1 for a in plan if a.kind == "gang") == 5 and any(a.kind == "ordinary" for a in plan)
    gated, plain = gang_job(1, 3, 2.0, 2, gated=True), gang_job(1, 3, 2.0, 2, gated=False)
    assert gated["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-pod-num"] == "3"
    assert "scheduling.k8s.io/group-name" not in plain["spec"]["template"]["metadata"]["annotations"]


async def test_ci_size_gangs_among_ordinary_pods_all_complete_and_none_runs_in_pieces():
    config = TrafficConfig(nodes=2, gpus_per_node=4, gangs=4, gang_sizes=(2, 3), gang_interval=1.0,
                           gang_seconds=(2.0, 3.0), ordinary_rate=2.0, ordinary_seconds=(1.0, 3.0),
                           drain_seconds=90.0, seed=2)
    figures = await run(config, "ganggate")
    assert (figures.gangs, figures.completed) == (4, 4)
    assert figures.in_pieces == 0
    assert figures.ordinary_pods > 0
