"""The gang checker's judgement (ganggate/replay/results/gangcheck.py) on hand-made pods."""

from __future__ import annotations

from ganggate.contract import GROUP_MIN_AVAILABLE, GROUP_NAME, GROUP_POD_NUM
from ganggate.replay.results.gangcheck import GpuSecondsMeter, gang_states, incomplete_gpus, partly_bound


def pod(name, gang="g", num=2, *, node=None, phase="Pending", gpus=4, gated=False, terminating=False,
        min_available=None, scheduler=None):
    ann = {GROUP_NAME: gang, GROUP_POD_NUM: str(num)}
    if min_available is not None:
        ann[GROUP_MIN_AVAILABLE] = str(min_available)
    meta = {"name": name, "namespace": "default", "annotations": ann}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "scheduling.k8s.io/group-gate"}]
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_a_gang_running_whole_or_wholly_waiting_is_not_partly_bound():
    running = [pod("a", node="n0", phase="Running"), pod("b", node="n1", phase="Running")]
    waiting = [pod("c", "w", gated=True), pod("d", "w", gated=True)]
    assert partly_bound(running + waiting) == []
    assert incomplete_gpus(running + waiting) == 0


def test_a_gang_with_one_member_bound_and_one_gated_is_partly_bound_and_holds_its_gpus():
    pods = [pod("a", node="n0", phase="Running"), pod("b", gated=True), pod("old-b", node="n0", phase="Failed")]
    [message] = partly_bound(pods)
    assert "default/g" in message and "1 of 2 live pods bound" in message
    assert incomplete_gpus(pods) == 4


def test_terminating_members_hold_gpus_and_keep_a_gang_from_counting_as_whole():
    pods = [pod("a", node="n0", phase="Running", terminating=True), pod("b", node="n0", phase="Running")]
    state = gang_states(pods)["default/g"]
    assert state.terminating == 1 and not state.complete and state.incomplete_gpus == 8
    assert partly_bound(pods)


def test_a_gang_restarted_whole_is_whole_though_a_pod_of_its_last_run_still_terminates():
    pods = [pod("old", node="dead", phase="Running", terminating=True),
            pod("a", node="n0", phase="Running"), pod("b", node="n1", phase="Running")]
    state = gang_states(pods)["default/g"]
    assert state.whole_running and partly_bound(pods) == [] and incomplete_gpus(pods) == 0
    restarting = [pod("old", node="n0", phase="Running", terminating=True), pod("a", gated=True), pod("b", gated=True)]
    assert gang_states(restarting)["default/g"].waiting and partly_bound(restarting) == []
    assert incomplete_gpus(restarting) == 4


def test_min_available_succeeded_members_and_other_schedulers():
    elastic = [pod("a", "e", 3, node="n0", phase="Running", min_available=2),
               pod("b", "e", 3, node="n0", phase="Running", min_available=2),
               pod("c", "e", 3, gated=False, min_available=2)]
    finishing = [pod("x", "f", node="n1", phase="Succeeded"), pod("y", "f", node="n1", phase="Running")]
    volcano = [pod("v", "v", 2, node="n1", phase="Running", scheduler="volcano")]
    states = gang_states(elastic + finishing + volcano)
    assert set(states) == {"default/e", "default/f"}
    assert states["default/e"].complete and states["default/f"].complete
    assert incomplete_gpus(elastic + finishing + volcano) == 0


def test_the_meter_integrates_each_sample_until_the_next():
    meter = GpuSecondsMeter()
    for t, v in ((0.0, 0), (0.1, 8), (0.2, 8), (0.5, 0), (1.0, 0)):
        meter.add(t, v)
    assert abs(meter.total - 3.2) < 1e-9 and meter.peak == 8 and meter.samples == 5
