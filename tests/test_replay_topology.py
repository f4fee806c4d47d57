"""Replays on a topology (blocks of racks of nodes): the placement figures, pure and end to end."""

from __future__ import annotations

import pytest

from ganggate.replay.results.metrics import JobRecord, Summary
from ganggate.replay.results.topology import markdown_table, pods_fit, span, summarise_topology, topology_nodes
from ganggate.replay.run import engine
from ganggate.replay.run.stack import topology_settings
from ganggate.replay.traces.format import Job
from ganggate.sim.topology import parse_shape

SHAPE = parse_shape("2x2x2")  # 2 blocks x 2 racks x 2 nodes: node-0,1 rack 0 of block 0, node-2,3 rack 1...
NODES = topology_nodes(SHAPE, gpus_per_node=8)


def job(job_id: str, pods: int, gpus: int) -> Job:
    return Job(job_id, 0.0, pods, gpus, "1", "1Gi", 100.0)


def summary(mode: str = "m") -> Summary:
    return Summary(mode, 0, 0, 0, 0.0, 0.0, 0, 0.75, None, 120.0, None)


def test_nodes_carry_their_rack_and_block():
    assert [n.name for n in NODES] == [f"node-{i}" for i in range(8)]
    labels = dict(NODES[5].labels)
    assert labels["ganggate.io/block"] == "block-1" and labels["ganggate.io/rack"] == "block-1-rack-0"


def test_fit_and_span():
    assert pods_fit(job("a", 2, 8), [8, 8]) and not pods_fit(job("a", 3, 8), [8, 8])
    assert pods_fit(job("a", 5, 3), [8, 8]) is False  # two 3-GPU pods per 8-GPU node: 4 at most on 2 nodes
    assert pods_fit(job("a", 4, 3), [8, 8])
    labels = {n.name: dict(n.labels) for n in NODES}
    assert span(["node-0", "node-1"], labels, "ganggate.io/rack") == 1
    assert span(["node-0", "node-2", "node-5"], labels, "ganggate.io/rack") == 3
    assert span(["node-0", "node-2", "node-5"], labels, "ganggate.io/block") == 2


def test_the_summary_counts_spans_of_multi_node_gangs_and_the_one_rack_share():
    jobs = [job("big-packed", 2, 8), job("big-spread", 4, 4), job("small", 2, 1), job("huge", 4, 8),
            job("single", 1, 8), job("waiting", 2, 8)]
    records = [
        JobRecord("big-packed", 0, 16, started_at=1, nodes=("node-0", "node-1")),  # one rack
        JobRecord("big-spread", 0, 16, started_at=1, nodes=("node-1", "node-2", "node-4")),  # 3 racks, 2 blocks
        JobRecord("small", 0, 2, started_at=1, nodes=("node-3",)),  # fits one node: not multi-node
        JobRecord("huge", 0, 32, started_at=1, nodes=("node-0", "node-1", "node-2", "node-3")),  # cannot fit a rack
        JobRecord("single", 0, 8, started_at=1, nodes=("node-7",)),  # one pod: not counted for the share
        JobRecord("waiting", 0, 16),  # never started
    ]
    result = summarise_topology(summary("topology"), jobs, records, NODES)
    assert result.multi_node_gangs == 3
    assert result.mean_racks == pytest.approx((1 + 3 + 2) / 3) and result.p95_racks == 3
    assert result.mean_blocks == pytest.approx((1 + 2 + 1) / 3) and result.p95_blocks == 2
    assert (result.could_fit_one_rack, result.in_one_rack) == (3, 2)  # big-packed, big-spread, small
    assert result.one_rack_share == pytest.approx(2 / 3)
    assert (result.mean_utilisation, result.p95_queue_delay) == (0.75, 120.0)
    table = markdown_table([result])
    assert "| topology | 3 | 2.00 | 3 | 1.33 | 2 | 67% (2/3) | 75.0% | 120 |" in table


def test_no_gangs_no_figures():
    result = summarise_topology(summary(), [], [], NODES)
    assert (result.multi_node_gangs, result.mean_racks, result.one_rack_share) == (0, None, None)
    assert "| m | 0 | - | - | - | - | - |" in markdown_table([result])


def test_mode_topology_needs_levels():
    assert topology_settings("ganggate", ()) == {}
    with pytest.raises(ValueError, match="topology levels"):
        topology_settings("topology", ())


async def test_a_replay_on_a_topology_records_where_each_gang_ran():
    jobs = [job("two-nodes", 2, 8), job("one-node", 4, 2)]
    scenario = engine.Scenario(jobs, NODES, topology_levels=SHAPE.levels)
    for mode in ("ganggate", "free"):
        result = await engine.run_scenario(scenario, mode, exact_webhook=False)
        records = {r.job_id: r for r in result.records}
        assert result.summary.completed == 2
        assert len(records["two-nodes"].nodes) == 2
        assert set(records["two-nodes"].nodes) <= {n.name for n in NODES}
        placed = summarise_topology(result.summary, jobs, result.records, NODES)
        assert placed.multi_node_gangs == 1 and placed.could_fit_one_rack == 2


async def test_mode_topology_keeps_a_gang_in_one_rack_where_best_fit_spreads_it():
    # One GPU used on node-0 (rack 0) and on node-2 (rack 1): best fit takes the two tightest
    # nodes for a gang of 2 x 7 GPUs, one in each rack; topology-aware keeps it in one rack.
    jobs = [Job("pair", 0.0, 2, 7, "1", "1Gi", 100.0)]
    used = [engine.Background("used-0", "node-0", 1), engine.Background("used-2", "node-2", 1)]
    scenario = engine.Scenario(jobs, NODES, background=used, topology_levels=SHAPE.levels)
    spans = {}
    for mode in ("ganggate", "topology"):
        result = await engine.run_scenario(scenario, mode, exact_webhook=False)
        assert result.summary.completed == 1
        spans[mode] = summarise_topology(result.summary, jobs, result.records, NODES).mean_racks
    assert spans == {"ganggate": 2.0, "topology": 1.0}


# ---- jobs that carry topology annotations -------------------------------------------------

RACK = "ganggate.io/rack"


def test_a_trace_carries_topology_levels_in_two_optional_columns():
    import io

    from ganggate.replay.traces.format import COLUMNS, TraceError, format_trace, read_trace

    jobs = [Job("a", 0.0, 2, 8, "1", "1Gi", 100.0, topology_required=RACK),
            Job("b", 1.0, 2, 4, "1", "1Gi", 100.0, topology_preferred="ganggate.io/block"), job("c", 2, 1)]
    text = format_trace(jobs)
    assert text.splitlines()[0] == ",".join(COLUMNS) + ",topology_required,topology_preferred"
    assert read_trace(io.StringIO(text)) == sorted(jobs, key=lambda j: j.submit_time)
    assert "topology" not in format_trace([job("c", 2, 1)]).splitlines()[0]  # old traces stay as they were
    bad = text.replace(f",{RACK},", ",Rack/,")
    with pytest.raises(TraceError, match="line 2: topology_required='Rack/' is not a node label key"):
        read_trace(io.StringIO(bad))


def test_a_synthetic_trace_gives_a_share_of_its_multi_pod_jobs_a_level_and_changes_nothing_else():
    from dataclasses import replace

    from ganggate.replay.traces.synth import SynthConfig, generate

    plain = generate(SynthConfig(jobs=400, nodes=32, seed=3))
    marked = generate(SynthConfig(jobs=400, nodes=32, seed=3, require_share=0.5, prefer_share=0.25))
    assert [replace(j, topology_required=None, topology_preferred=None) for j in marked] == plain
    multi = [j for j in marked if j.pods > 1]
    required = [j for j in multi if j.topology_required == RACK]
    preferred = [j for j in multi if j.topology_preferred == RACK]
    assert all(j.pods > 1 for j in marked if j.topology_required or j.topology_preferred)
    assert 0.35 < len(required) / len(multi) < 0.65 and 0.1 < len(preferred) / len(multi) < 0.4
    assert not any(j.topology_required and j.topology_preferred for j in marked)
    with pytest.raises(ValueError, match="from 0 to 1"):
        generate(SynthConfig(require_share=1.5))


def test_a_replayed_job_s_pods_carry_its_topology_annotations():
    from ganggate.replay.run.observe import pod_manifest

    pod = pod_manifest(Job("a", 0.0, 2, 8, "1", "1Gi", 100.0, topology_required=RACK), 0, "replay")
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-topology-required"] == RACK
    assert "scheduling.k8s.io/group-topology-preferred" not in pod["metadata"]["annotations"]
    assert "scheduling.k8s.io/group-topology-required" not in pod_manifest(job("b", 2, 8), 0, "replay")["metadata"]["annotations"]


def test_the_checker_names_a_job_that_left_its_required_rack():
    jobs = [Job("kept", 0.0, 2, 8, "1", "1Gi", 100.0, topology_required=RACK),
            Job("left", 0.0, 2, 8, "1", "1Gi", 100.0, topology_required=RACK),
            Job("waits", 0.0, 2, 8, "1", "1Gi", 100.0, topology_required=RACK), job("free", 2, 8)]
    records = [JobRecord("kept", 0, 16, started_at=1, nodes=("node-0", "node-1")),
               JobRecord("left", 0, 16, started_at=1, nodes=("node-1", "node-2")),
               JobRecord("waits", 0, 16), JobRecord("free", 0, 16, started_at=1, nodes=("node-1", "node-6"))]
    from ganggate.replay.results.topology import required_line, required_violations

    assert required_violations(jobs, records, NODES) == [
        "job left requires one ganggate.io/rack and started in 2: node-1, node-2"]
    assert required_line(jobs, records, NODES).startswith(
        "3 jobs require one domain of a level, 2 started, 1 across domains (job left requires")


async def test_a_replay_never_breaks_a_required_rack_where_best_fit_alone_would():
    # As above: best fit spreads the pair over two racks (the checker sees it, had it required
    # one); when the job requires a rack, ganggate and topology both keep it in one.
    from ganggate.replay.results.topology import required_violations

    used = [engine.Background("used-0", "node-0", 1), engine.Background("used-2", "node-2", 1)]
    plain = [Job("pair", 0.0, 2, 7, "1", "1Gi", 100.0)]
    required = [Job("pair", 0.0, 2, 7, "1", "1Gi", 100.0, topology_required=RACK)]
    spread = await engine.run_scenario(engine.Scenario(plain, NODES, background=used), "ganggate",
                                       exact_webhook=False)
    assert len(required_violations(required, spread.records, NODES)) == 1
    scenario = engine.Scenario(required, NODES, background=used, topology_levels=SHAPE.levels)
    for mode in ("ganggate", "topology"):
        result = await engine.run_scenario(scenario, mode, exact_webhook=False)
        assert result.summary.completed == 1
        assert required_violations(required, result.records, NODES) == []


def test_ganggate_replay_runs_a_synthetic_trace_whose_jobs_require_a_rack(tmp_path):
    from tests.test_replay_cli import ganggate

    result = ganggate("replay", "--synth", "--jobs", "30", "--seed", "2", "--topology", "1x2x2", "--gpus-per-node", "4",
                      "--require-share", "0.5", "--modes", "topology", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  topology: " in result.stdout and " across domains" in result.stdout
    line = next(x for x in result.stdout.splitlines() if "jobs require one domain of a level" in x)
    assert line.endswith(", 0 across domains") and not line.strip().startswith("topology: 0 jobs")
    assert "topology_required" in (tmp_path / "out" / "trace.csv").read_text().splitlines()[0]
    refused = ganggate("replay", "--synth", "--require-share", "0.5", "--out", str(tmp_path / "o"))
    assert refused.returncode == 2 and "need --synth and --topology" in refused.stderr
    assert not (tmp_path / "o").exists()


def test_the_gang_checker_finds_a_gang_whose_bound_pods_leave_the_required_domain():
    from ganggate.core.state.snapshot import make_pod
    from ganggate.replay.results.gangcheck import required_topology_broken

    def pod(name, gang, node, *, phase="Running", level=RACK):
        raw = make_pod(name, gang=gang, pod_num=2, gpus=1, gated=False, node_name=node, phase=phase)
        if level:
            raw["metadata"]["annotations"]["scheduling.k8s.io/group-topology-required"] = level
        return raw

    labels = {n.name: dict(n.labels) for n in NODES}
    pods = [pod("kept-0", "kept", "node-0"), pod("kept-1", "kept", "node-1"),
            pod("left-0", "left", "node-1"), pod("left-1", "left", "node-2"),
            pod("done-0", "done", "node-1", phase="Succeeded"), pod("done-1", "done", "node-2"),
            pod("free-0", "free", "node-1", level=None), pod("free-1", "free", "node-6", level=None),
            pod("bare-0", "bare", "elsewhere"), pod("bare-1", "bare", "node-0")]
    assert required_topology_broken(pods, labels) == [
        "gang default/bare requires one ganggate.io/rack: on 2 (elsewhere, node-0)",
        "gang default/left requires one ganggate.io/rack: on 2 (node-1, node-2)"]
