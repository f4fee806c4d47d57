"""bench_gpushare's own arithmetic: arrivals up to the capacity, trace rows as pods, one run."""

from __future__ import annotations

from bench.bench_gpushare import TracePod, arrivals, node_object, pod_info, run, workload_of


def share(name: str, milli: int, cpu: int = 1000) -> TracePod:
    return TracePod(name, cpu, 1024, 1, milli)


def whole(name: str, gpus: int, cpu: int = 1000) -> TracePod:
    return TracePod(name, cpu, 1024, gpus, 1000)


def test_arrivals_stop_once_the_demand_reaches_capacity_and_cycle_a_short_list():
    pods = [share("a", 500), whole("b", 1), TracePod("cpu", 500, 512, 0, 0)]
    order = arrivals(pods, 5000, seed=3)
    demand = [p.gpu_demand for p in order]
    assert sum(demand) >= 5000 > sum(demand[:-1])  # the last arrival crossed the capacity
    assert len(order) > len(pods)  # the list asks 1.5 GPUs: it is cycled through, reshuffled
    assert arrivals(pods, 5000, seed=3) == order and arrivals(pods, 5000, seed=4) != order


def test_trace_rows_become_whole_or_shared_gpu_pods():
    shared = pod_info(share("s", 470))
    assert shared.shared_gpu == 470 and "nvidia.com/gpu" not in shared.request
    full = pod_info(whole("w", 2))
    assert full.shared_gpu == 0 and full.request["nvidia.com/gpu"] == 2000
    assert pod_info(TracePod("c", 500, 512, 0, 0)).shared_gpu == 0


def test_two_shares_that_overfill_a_card_are_not_both_placed():
    nodes = [node_object("n0", 8000, 65536, 1)]
    pods = [share("first", 600), share("second", 600)]
    for policy in ("best-fit", "fgd", "random"):
        result = run(nodes, pods, policy, 1, workload_of(pods), {p.name: pod_info(p) for p in pods}, order=pods)
        assert result.points == [(60.0, 60.0), (120.0, 60.0)]  # (arrived %, allocated %) after each pod
        assert result.failed == 1 and result.first_failure == 120.0


def test_the_full_sharing_list_replaces_whole_gpu_pods_by_sharing_pods_of_the_list():
    from bench.gpushare_trace import share_everything

    pods = [TracePod("cpu", 8000, 1024, 0, 0), TracePod("whole", 12000, 4096, 2, 1000),
            TracePod("share", 6000, 2048, 1, 460)]
    made = share_everything(pods, seed=3)
    assert [p.name for p in made] == ["cpu", "whole", "share"]
    assert made[0] == pods[0] and made[2] == pods[2]
    # the whole-GPU pod became a copy of the sharing pod: its share, CPU and memory together
    assert (made[1].num_gpu, made[1].gpu_milli, made[1].cpu_milli, made[1].memory_mib) == (1, 460, 6000, 2048)


def test_the_reference_loop_gives_ties_to_the_smallest_name_and_scores_pods_without_gpu():
    from bench.fgd_reference import place_all

    nodes = [node_object("b", 40000, 65536, 1), node_object("a", 10000, 65536, 1)]
    typical = [share("t", 500, cpu=8000)]
    # a 4-core pod without GPU: on "a" it leaves 6 cores, below the typical pod's 8, stranding a's
    # card; on "b" nothing: the reference's score sends it to b (best fit on CPU would take a)
    cpu_pod = TracePod("cpu", 4000, 1024, 0, 0)
    chosen: list = []
    place_all(nodes, [cpu_pod], workload_of(typical), "name", chosen=chosen)
    assert chosen == ["b"]
    # s1 fits only b (its CPU); s2 then scores alike on a's idle card and b's half card (the
    # typical pod fits what either leaves): the artifact's scheduler takes the smallest name,
    # ganggate's ties (best-fit) the tightest card
    typical = [share("t", 100)]
    pods = [share("s1", 500, cpu=30000), share("s2", 300)]
    for tie, expected in (("name", ["b", "a"]), ("best-fit", ["b", "b"])):
        chosen = []
        result = place_all(nodes, pods, workload_of(typical), tie, chosen=chosen)
        assert chosen == expected and result.failed == 0


def test_the_artifacts_curves_are_read_as_means_of_its_seeds_and_compared_step_by_step(tmp_path):
    from bench.bench_gpushare import Run, artifact_check, artifact_curves

    head = "workload,sc_policy,tune,seed,total_gpus," + ",".join(str(step) for step in range(101))
    rows = [f"openb_pod_list_default,06-FGD,1.3,{seed},6212," + ",".join(str(min(step, cap)) for step in range(101))
            for seed, cap in ((42, 90), (43, 94))]
    rows.append("openb_pod_list_default,01-Random,1.3,42,6212," + ",".join("1" for _ in range(101)))
    path = tmp_path / "analysis_allo_discrete.csv"
    path.write_text("\n".join([head] + rows) + "\n")
    curves = artifact_curves(path)
    assert list(curves) == [("default", "fgd")]  # Random has no counterpart here
    assert curves[("default", "fgd")][50] == 50 and curves[("default", "fgd")][100] == 92
    ours = {("default", "fgd"): [Run([(float(step), float(min(step, 91))) for step in range(101)], None, 0, 0.0)]}
    (line,) = artifact_check(ours, curves, ["default"], "fgd")
    assert "at most 1.00 points below it at any 1% step (at 94%)" in line and "91.00 against 92.00" in line
