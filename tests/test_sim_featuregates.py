"""kubesim's --feature-gates: parsed and refused as component-base's featuregate.Set does."""

import pytest

from ganggate.sim.componentbase import featuregate as featuregates
from ganggate.sim.componentbase.featuregate import FeatureGateError, FeatureGates, parse


def test_unset_gates_keep_their_release_defaults():
    assert FeatureGates().enabled("SchedulerPopFromBackoffQ") is True


def test_a_set_gate_overrides_its_default_and_round_trips_through_its_flag():
    gates = parse("SchedulerPopFromBackoffQ=false")
    assert gates.enabled("SchedulerPopFromBackoffQ") is False
    assert parse(gates.flag()) == gates
    assert gates.describe() == "SchedulerPopFromBackoffQ=false"


@pytest.mark.parametrize("text, message", [
    ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
    ("SchedulerPopFromBackoffQ", "missing bool value for SchedulerPopFromBackoffQ"),
    ("SchedulerPopFromBackoffQ=maybe", "invalid value of SchedulerPopFromBackoffQ=maybe"),
])
def test_a_bad_value_is_refused_with_the_real_message(text, message):
    with pytest.raises(FeatureGateError, match=message):
        parse(text)


def test_the_scheduler_gates_go_over_the_cluster_gates():
    class Args:
        feature_gates = "SchedulerPopFromBackoffQ=false"
        scheduler_feature_gates = "SchedulerPopFromBackoffQ=true"

    cluster, scheduler = featuregates.from_arguments(Args())
    assert not cluster.enabled("SchedulerPopFromBackoffQ")
    assert scheduler.enabled("SchedulerPopFromBackoffQ")


def test_sim_serve_refuses_an_unknown_gate_before_serving(capsys):
    from ganggate.cli import main

    assert main(["sim", "serve", "--port", "0", "--feature-gates", "Nope=true"]) == 2
    assert "--feature-gates: unrecognized feature gate: Nope" in capsys.readouterr().out
