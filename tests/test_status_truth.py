"""`ganggate status` tells the truth: never `running` below min-available (restarting, terminating,
completing, ended, broken), whole cards beside shared room, and `-o json|yaml` / `--watch`."""

from __future__ import annotations

import asyncio
import json

import yaml

from ganggate.controller.status.output import render, status_document, watch
from ganggate.controller.status.tables import format_status, gang_rows, node_rows
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from tests.test_status import NOW, node, pod


def going(p: dict, by_ganggate: bool = False, reason: str = "DeletionByGanggate", owned: bool = True) -> dict:
    """Being deleted; for a disruption (DisruptionTarget `reason`) when by_ganggate."""
    p["metadata"]["deletionTimestamp"] = "2027-01-15T09:00:00Z"
    if owned:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j",
                                             "controller": True}]
    if by_ganggate:
        p["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason}]
    return p


def ended(p: dict, phase: str) -> dict:
    p["status"]["phase"] = phase
    return p


def states(pods: list[dict]) -> dict[str, str]:
    state = ClusterState()
    state.reset([node("gpu-0"), node("gpu-1")], pods)
    decisions, waitings = decide(state, NOW)
    return {row.gang: row.state for row in gang_rows(state, decisions, waitings, NOW)}


def run(name: str, i: int, num: int = 4) -> dict:
    return pod(f"{name}-{i}", name, num, 1, gated=False, node_name="gpu-0")


def test_no_gang_reads_running_with_fewer_released_pods_than_min_available():
    shown = states(
        [going(run("restart", i), by_ganggate=True) for i in range(4)]  # a whole-gang restart, nothing new yet
        + [going(run("deleted", i)) for i in range(4)]  # kubectl delete job
        + [ended(run("half", 0), "Succeeded"), ended(run("half", 1), "Succeeded"), run("half", 2), run("half", 3)]
        + [ended(run("lost", 0), "Failed"), run("lost", 1), run("lost", 2), run("lost", 3)]
        + [ended(run("done", i), "Succeeded") for i in range(4)]
        + [going(run("again", i), by_ganggate=True) for i in range(4)]
        + [pod(f"again-new-{i}", "again", 4, 1) for i in range(4)]  # the Job's new pods, gated
        + [going(run("evicted", i), by_ganggate=True, reason="EvictionByEvictionAPI") for i in range(4)]  # a drain
        + [going(run("bare", i), by_ganggate=True, owned=False) for i in range(4)]  # nothing recreates them
        + [run("ok", i) for i in range(4)]
    )
    assert shown["ml/restart"] == "restarting"
    assert shown["ml/deleted"] == "terminating"
    assert shown["ml/half"] == "completing"
    assert shown["ml/lost"].startswith("broken (lost lost-0: Failed")
    assert shown["ml/done"] == "succeeded"
    assert shown["ml/again"] == "restarting"
    assert shown["ml/evicted"] == "restarting"
    assert shown["ml/bare"] == "terminating"
    assert shown["ml/ok"] == "running"
    assert not [g for g, s in shown.items() if s.startswith("running") and g != "ml/ok"]


def test_a_restarting_gang_says_why_in_its_row():
    state = ClusterState()
    state.reset([node("gpu-0")], [going(run("r", i), by_ganggate=True) for i in range(4)])
    line = next(x for x in format_status(state, [], [], NOW).splitlines() if x.startswith("ml/r "))
    assert line.split()[1:3] == ["restarting", "0/4"]
    assert "4 pods going away for a disruption (a restart of the gang, a drain); their owner recreates them" in line


def test_free_counts_only_idle_cards_on_a_shared_node_and_shared_free_the_rest():
    from tests.test_gpushare_planner import card_node, holder

    state = ClusterState()  # 2 cards of 8, both partly shared: no card is left for a whole-GPU pod
    state.reset([card_node("n1", 16, 2, gpus=2)], [holder("a", "n1", 0, 3), holder("b", "n1", 1, 2)])
    [row] = node_rows(state)
    assert (row.gpus, row.free, row.shared_free) == (2, 0, 11)
    text = format_status(state, [], [], NOW)
    assert text.splitlines()[2].split() == ["NODE", "STATUS", "GPUS", "USED", "PROMISED", "FREE", "SHARED-FREE"]
    assert text.splitlines()[3].split() == ["n1", "Ready", "2", "0", "0", "0", "11"]


def test_json_and_yaml_carry_the_tables_rows():
    state = ClusterState()
    state.reset([node("gpu-0")], [run("ok", i, 2) for i in range(2)] + [pod("w-0", "w", 2, 1)])
    decisions, waitings = decide(state, NOW)
    document = status_document(gang_rows(state, decisions, waitings, NOW), node_rows(state), "controller: x", ())
    parsed = json.loads(render(document, "json"))
    assert parsed == yaml.safe_load(render(document, "yaml"))
    assert parsed["controller"] == "controller: x"
    assert {g["gang"]: (g["state"], g["pods"], g["podNum"]) for g in parsed["gangs"]} == {
        "ml/ok": ("running", 2, 2), "ml/w": ("incomplete", 1, 2)}
    assert parsed["gangs"][1]["why"].startswith("GangWaiting: 1 of 2 pods exist")
    assert parsed["nodes"] == [{"node": "gpu-0", "status": "Ready", "gpus": 8, "used": 2, "promised": 0, "free": 6,
                                "sharedFree": None, "domain": None}]


def test_watch_prints_again_only_when_the_status_changes():
    texts = iter(["a\n", "a\n", "b\n", "b\n"])
    printed: list[str] = []

    async def read() -> str:
        return next(texts)

    asyncio.run(watch(read, printed.append, interval=0, rounds=4, output="yaml"))
    assert printed == ["a\n", "---\nb\n"]


def test_gpus_with_an_output_format_is_refused_before_reaching_the_cluster(capsys):
    from ganggate.cli import main

    assert main(["status", "--kubeconfig", "/nonexistent", "--gpus", "-o", "json"]) == 2
    assert capsys.readouterr().err == "error: --gpus prints a table only: leave out -o/--output\n"
