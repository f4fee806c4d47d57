"""`ganggate replay --dra`: the cluster's GPUs are DRA devices, each job's pods claim theirs through a
ResourceClaimTemplate, and the results count the devices the claims hold, so a replay reads the same
with and without DRA."""

from __future__ import annotations

import csv

from ganggate.core.fit.resources import GPU
from ganggate.replay.run.observe import pod_manifest
from ganggate.replay.traces.format import Job
from tests.test_replay_cli import TRACE, ganggate


def summary(out) -> dict[str, dict[str, str]]:
    return {r["mode"]: r for r in csv.DictReader((out / "summary.csv").open())}


def test_a_synthetic_replay_reads_the_same_with_dra_gpus(tmp_path):
    runs = {}
    for name, extra in (("plugin", ()), ("dra", ("--dra",))):
        result = ganggate("replay", "--synth", "--jobs", "16", "--nodes", "2", "--gpus-per-node", "8", "--seed", "2",
                          "--load", "1.5", "--modes", "count,ganggate", "--out", str(tmp_path / name), *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        runs[name] = summary(tmp_path / name)
    # Admitted gangs run at the same times on either kind of GPU, and their GPUs are counted alike
    # (with --dra from the devices the claims hold).
    for mode in ("count", "ganggate"):
        plugin, dra = runs["plugin"][mode], runs["dra"][mode]
        assert dra["completed"] == dra["jobs"] == plugin["completed"] == "16"
        assert float(dra["busy_gpu_hours"]) > 0
        assert abs(float(dra["mean_utilisation"]) - float(plugin["mean_utilisation"])) <= 0.01


def test_gpus_a_stuck_gang_holds_are_counted_from_its_claims(tmp_path):
    trace = tmp_path / "six.csv"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    result = ganggate("replay", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "4", "--dra",
                      "--modes", "none,ganggate", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = summary(out)
    # Without admission the 5-pod gang binds part of itself and its claims hold the devices for good.
    assert rows["none"]["deadlocked"] == "5" and float(rows["none"]["held_idle_gpu_hours"]) > 0
    series = list(csv.DictReader((out / "timeseries.csv").open()))
    assert max(int(r["held_idle_gpus"]) for r in series if r["mode"] == "none") == 8
    assert rows["ganggate"]["completed"] == "6" and float(rows["ganggate"]["held_idle_gpu_hours"]) == 0


def test_a_dra_pod_claims_its_gpus_through_a_template_and_asks_no_nvidia_gpu():
    pod = pod_manifest(Job("j", 0.0, 2, 4, "1", "1Gi", 60.0), 0, "default", dra=True)
    container = pod["spec"]["containers"][0]["resources"]
    assert GPU not in container["requests"] and "limits" not in container
    assert pod["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "replay-gpus-4"}]
    assert container["claims"] == [{"name": "gpus"}]


def test_dra_with_what_it_does_not_replay_is_refused_with_a_clear_message(tmp_path):
    out = tmp_path / "o"
    result = ganggate("replay", "--synth", "--jobs", "4", "--dra", "--node-group", "gpu:0:2", "--out", str(out))
    assert result.returncode == 2 and "--dra does not replay an autoscaled cluster" in result.stderr
    result = ganggate("replay", "--synth", "--jobs", "4", "--dra", "--disruptions", "drain=1", "--out", str(out))
    assert result.returncode == 2 and "--dra does not replay --disruptions" in result.stderr
    result = ganggate("replay", "--synth", "--jobs", "4", "--dra-product", "NVIDIA B200", "--out", str(out))
    assert result.returncode == 2 and "--dra-product needs --dra" in result.stderr
    assert not out.exists()
