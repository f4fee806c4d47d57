"""Topology-aware gangs: one domain when required (or wait, saying why), few when preferred."""

from __future__ import annotations

from ganggate.contract import GROUP_TOPOLOGY_PREFERRED, GROUP_TOPOLOGY_REQUIRED
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

BLOCK, RACK = "example.com/block", "example.com/rack"
LEVELS = (BLOCK, RACK, "kubernetes.io/hostname")
NOW = 1704067200.0


def node(name: str, block: str | None, rack: str | None, gpus: int = 8) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if block is not None:
        labels[BLOCK] = block
    if rack is not None:
        labels[RACK] = rack
    return make_node(name, gpus=gpus, labels=labels)


def gang(name: str, n: int, gpus: int, *, required: str | None = None, preferred: str | None = None,
         created: str = "2024-01-01T00:00:00Z") -> list[dict]:
    pods = [make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=n, gpus=gpus, created=created)
            for i in range(n)]
    for pod in pods:
        if required:
            pod["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = required
        if preferred:
            pod["metadata"]["annotations"][GROUP_TOPOLOGY_PREFERRED] = preferred
    return pods


def running(name: str, node_name: str, gpus: int) -> dict:
    return make_pod(name, namespace="busy", gpus=gpus, node_name=node_name, phase="Running")


def state(nodes: list[dict], pods: list[dict], levels=LEVELS) -> ClusterState:
    out = ClusterState(topology_levels=levels)
    out.reset(nodes, pods)
    return out


def racks_of(placement: dict, nodes: list[dict]) -> set:
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    return {labels[name].get(RACK, name) for name in placement.values()}


def two_racks(free_a: int, free_b: int) -> tuple[list[dict], list[dict]]:
    """Rack a and b of 4 nodes of 8 GPUs each, with that many GPUs left free in each."""
    nodes = [node(f"a{i}", "b1", "a") for i in range(4)] + [node(f"b{i}", "b1", "b") for i in range(4)]
    busy = [running(f"ra{i}", f"a{i}", 8) for i in range((32 - free_a) // 8)]
    busy += [running(f"rb{i}", f"b{i}", 8) for i in range((32 - free_b) // 8)]
    return nodes, busy


def test_a_required_gang_goes_into_the_rack_with_least_waste():
    nodes, busy = two_racks(32, 16)
    decisions, _ = decide(state(nodes, busy + gang("ddp", 2, 8, required=RACK)), NOW)
    (d,) = decisions
    assert racks_of(d.placement, nodes) == {"b"}
    assert "in example.com/rack=b" in d.reason


def test_a_required_gang_that_fits_no_rack_waits_naming_the_largest_free_rack():
    nodes, busy = two_racks(24, 16)
    decisions, waiting = decide(state(nodes, busy + gang("ddp", 4, 8, required=RACK)), NOW)
    assert decisions == []
    (w,) = waiting
    assert w.message == "needs 32 GPUs in one rack; the largest free rack (example.com/rack=a in example.com/block=b1) has 24"


def test_a_required_gang_that_fits_no_node_for_its_cpu_waits_naming_the_cpu_not_the_rack():
    # Each rack's one node has the GPUs for both pods but CPU for neither: the level is not
    # why it waits, so the reason is the flat packer's, not "needs 8 GPUs in one rack ... has 8".
    nodes = [make_node(n, gpus=8, cpu="16", labels={"kubernetes.io/hostname": n, BLOCK: "b1", RACK: r})
             for n, r in (("a0", "a"), ("b0", "b"))]
    pods = [make_pod(f"g-{i}", namespace="ml", gang="g", pod_num=2, gpus=4, cpu="20") for i in range(2)]
    for pod in pods:
        pod["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = RACK
    _, waiting = decide(state(nodes, pods), NOW)
    # No node has 20 cpu even empty: it can never fit, and says so (GangCannotFit).
    assert [(w.event_reason, w.message.split(":")[0]) for w in waiting] == [
        ("GangCannotFit", "a pod needs 20 cpu on one node, but the largest node it may use has 16 cpu allocatable")
    ]


def test_a_preferred_gang_that_fits_no_rack_still_goes_across_racks():
    nodes, busy = two_racks(24, 16)
    decisions, waiting = decide(state(nodes, busy + gang("ddp", 4, 8, preferred=RACK)), NOW)
    (d,) = decisions
    assert waiting == [] and racks_of(d.placement, nodes) == {"a", "b"}
    assert "in example.com/block=b1" in d.reason


def test_without_annotations_a_gang_prefers_one_rack_when_levels_are_set():
    # Best fit alone would take the fuller nodes a0 (4 free) and b0 (4 free) for 2 pods of 4:
    # two racks. With levels, one rack that holds both is chosen.
    nodes = [node("a0", "b1", "a"), node("a1", "b1", "a"), node("b0", "b1", "b")]
    busy = [running("ra0", "a0", 4), running("rb0", "b0", 4), running("ra1", "a1", 4)]
    decisions, _ = decide(state(nodes, busy + gang("ddp", 2, 4)), NOW)
    (d,) = decisions
    assert len(racks_of(d.placement, nodes)) == 1


def test_without_levels_nothing_changes():
    nodes = [node("a0", "b1", "a"), node("a1", "b1", "a"), node("b0", "b1", "b")]
    busy = [running("ra0", "a0", 4), running("rb0", "b0", 4), running("ra1", "a1", 4)]
    decisions, _ = decide(state(nodes, busy + gang("ddp", 2, 4), levels=()), NOW)
    (d,) = decisions
    assert "in " not in d.reason.split("on ")[-1]


def test_a_node_without_the_label_is_a_domain_of_its_own():
    nodes = [node("x0", None, None), node("x1", None, None)]
    decisions, waiting = decide(state(nodes, gang("ddp", 2, 8, required=RACK)), NOW)
    assert decisions == []
    assert waiting[0].event_reason == "GangCannotFit"  # no node holds 16 GPUs, even empty
    assert waiting[0].message.startswith("needs 16 GPUs in one rack, but no node carries the label example.com/rack, "
                                         "so each node is a rack of its own, and the largest (x0) has 8 GPUs")


def test_a_required_level_works_without_configured_levels():
    nodes, busy = two_racks(32, 16)
    decisions, _ = decide(state(nodes, busy + gang("ddp", 3, 8, required=RACK), levels=()), NOW)
    (d,) = decisions
    assert racks_of(d.placement, nodes) == {"a"}


def test_a_starving_required_gang_holds_back_room_inside_one_rack():
    # Rack a is half busy; rack b is full. The gang of 4 x 8 waits, starves, and holds rack a:
    # a small gang that would fit in rack a must not take it, one in rack b's room would.
    nodes, busy = two_racks(16, 0)
    pods = busy + gang("big", 4, 8, required=RACK) + gang("small", 1, 8, created="2024-01-01T00:00:30Z")
    decisions, waiting = decide(state(nodes, pods), NOW + 3600, starvation_seconds=60)
    assert decisions == []
    big = next(w for w in waiting if w.gang_key[1] == "big")
    assert "capacity held back on 4 nodes" in big.message


def test_a_starving_required_gang_holds_one_rack_and_leaves_the_other_to_smaller_gangs():
    nodes, busy = two_racks(16, 16)  # 32 GPUs free in all, but at most 16 in one rack
    pods = busy + gang("big", 3, 8, required=RACK) + gang("small", 1, 8, created="2024-01-01T00:00:30Z")
    decisions, waiting = decide(state(nodes, pods), NOW + 3600, starvation_seconds=60)
    (w,) = waiting
    assert w.message.startswith("needs 24 GPUs in one rack; the largest free rack (example.com/rack=a in example.com/block=b1) has 16")
    assert "capacity held back on 3 nodes" in w.message
    (d,) = decisions
    assert d.gang_key[1] == "small" and racks_of(d.placement, nodes) == {"b"}


def test_the_controller_takes_topology_levels_from_its_flag_and_checks_them():
    import pytest

    from ganggate.controller.config import ControllerConfig

    ControllerConfig(topology_levels=LEVELS).validate()
    with pytest.raises(ValueError, match="not a node label key"):
        ControllerConfig(topology_levels=("rack/",)).validate()
    with pytest.raises(ValueError, match="listed twice"):
        ControllerConfig(topology_levels=(RACK, RACK)).validate()


def test_pods_that_disagree_on_topology_put_the_gang_in_conflict_naming_both_values():
    nodes, busy = two_racks(32, 32)
    pods = gang("ddp", 3, 8, required=RACK)
    pods[2]["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = BLOCK
    pods[1]["metadata"]["annotations"][GROUP_TOPOLOGY_PREFERRED] = RACK
    decisions, waiting = decide(state(nodes, busy + pods), NOW)
    assert decisions == []
    (w,) = waiting
    assert w.event_reason == "GangConflict"
    assert w.message == (
        f"pods disagree on {GROUP_TOPOLOGY_REQUIRED}: {BLOCK} (ddp-2), {RACK} (ddp-0, ddp-1); "
        f"{GROUP_TOPOLOGY_PREFERRED}: (none) (ddp-0, ddp-2), {RACK} (ddp-1)"
    )


def test_a_gang_whose_pods_agree_again_leaves_the_conflict():
    nodes, busy = two_racks(32, 32)
    pods = gang("ddp", 2, 8, required=RACK)
    pods[1]["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = BLOCK
    current = state(nodes, busy + pods)
    assert decide(current, NOW)[1][0].event_reason == "GangConflict"
    current.apply_pod("DELETED", pods[1])
    current.apply_pod("ADDED", gang("ddp", 2, 8, required=RACK)[1])
    (d,), waiting = decide(current, NOW)
    assert waiting == [] and "in example.com/rack=" in d.reason


def members(name: str, n: int, gpus: int, *, released_on: list[str], min_available: int | None = None,
            required: str | None = None, preferred: str | None = None, bound: bool = True) -> list[dict]:
    """A gang of n pods whose first len(released_on) are released onto those nodes (bound and
    running, or, bound=False, released but unbound with a decision naming the node: a release
    cut short); the rest still gated."""
    pods = gang(name, n, gpus, required=required, preferred=preferred)
    for pod, node_name in zip(pods, released_on, strict=False):  # the first len(released_on) pods; the rest gated
        spec, annotations = pod["spec"], pod["metadata"]["annotations"]
        if min_available is not None:
            annotations["scheduling.k8s.io/group-min-available"] = str(min_available)
        spec["schedulingGates"] = []
        annotations["ganggate.io/decision"] = (
            f'{{"id":"d1","time":"2024-01-01T00:00:00Z","node":"{node_name}","gang":"ml/{name}","pods":{len(released_on)}}}')
        if bound:
            spec["nodeName"] = node_name
            pod["status"] = {"phase": "Running"}
    if min_available is not None:
        for pod in pods[len(released_on):]:
            pod["metadata"]["annotations"]["scheduling.k8s.io/group-min-available"] = str(min_available)
    return pods


def test_the_extras_of_a_started_gang_that_requires_a_rack_go_into_its_rack_or_wait():
    # Rack b is fuller (best fit alone would pick it); the gang runs in rack a.
    nodes, busy = two_racks(32, 8)
    pods = members("elastic", 4, 8, released_on=["a0", "a1"], min_available=2, required=RACK)
    current = state(nodes, busy + pods)
    assert current.gangs[("ml", "elastic")].state == "started"
    decisions, _ = decide(current, NOW)
    assert [racks_of(d.placement, nodes) for d in decisions] == [{"a"}]
    # Rack a full: the extras wait quietly, although rack b has room.
    full = state(nodes, busy + pods + [running("ra2", "a2", 8), running("ra3", "a3", 8)])
    assert decide(full, NOW) == ([], [])


def test_without_configured_levels_the_extras_of_a_started_gang_that_requires_a_rack_go_into_its_rack():
    nodes, busy = two_racks(32, 8)
    pods = members("elastic", 4, 8, released_on=["a0", "a1"], min_available=2, required=RACK)
    plain = members("plain", 3, 8, released_on=["b3"], min_available=1)  # started, no annotation
    decisions, _ = decide(state(nodes, busy + pods + plain, levels=()), NOW)
    assert {d.gang_key[1]: racks_of(d.placement, nodes) for d in decisions}["elastic"] == {"a"}


def test_the_extras_of_a_started_gang_that_prefers_a_rack_go_there_first_else_elsewhere():
    # The gang runs in rack b; best fit alone would take a3 (as full, and first by name).
    nodes, busy = two_racks(8, 32)
    pods = members("elastic", 3, 8, released_on=["b0", "b1"], min_available=2, preferred=RACK)
    (d,), _ = decide(state(nodes, busy + pods), NOW)
    assert racks_of(d.placement, nodes) == {"b"}
    full = state(nodes, busy + pods + [running("rb2", "b2", 8), running("rb3", "b3", 8)])
    (d,), _ = decide(full, NOW)
    assert racks_of(d.placement, nodes) == {"a"}


def test_without_annotations_the_extras_of_a_started_gang_stay_in_its_rack_when_they_can():
    nodes, busy = two_racks(32, 8)
    pods = members("elastic", 3, 8, released_on=["a0"], min_available=1)
    (d,), _ = decide(state(nodes, busy + pods), NOW)
    assert racks_of(d.placement, nodes) == {"a"}


def test_the_rest_of_a_cut_short_release_goes_into_the_rack_of_the_pods_released_before():
    # Rack a has 24 GPUs left beside the 8 promised to the released pods on a0; rack b has 16:
    # least waste alone would pick rack b.
    nodes, busy = two_racks(32, 16)
    pods = members("ddp", 4, 4, released_on=["a0", "a0"], required=RACK, bound=False)
    current = state(nodes, busy + pods)
    assert current.gangs[("ml", "ddp")].state == "partial"
    (d,), _ = decide(current, NOW)
    assert d.roll_forward and racks_of(d.placement, nodes) == {"a"}
    assert "a0" not in d.placement.values()  # promised to the released pods


def test_the_rest_of_a_cut_short_release_waits_for_its_rack_naming_it():
    nodes, busy = two_racks(32, 32)
    pods = members("ddp", 4, 8, released_on=["a0", "a1"], required=RACK, bound=False)
    current = state(nodes, busy + pods + [running("ra2", "a2", 4)])
    decisions, waiting = decide(current, NOW)
    assert decisions == []
    (w,) = waiting
    assert w.message.startswith(
        "finishing decision d1: needs 16 GPUs in its rack (example.com/rack=a in example.com/block=b1), "
        "where its released pods are; it has 12 free")


def test_a_cut_short_release_that_starves_holds_back_room_in_its_own_rack():
    # Rack a (the gang's) has 12 GPUs free and needs 16; rack b has 24. The hold-back is in rack a:
    # a later small gang still gets rack b.
    nodes, busy = two_racks(32, 24)
    pods = members("ddp", 4, 8, released_on=["a0", "a1"], required=RACK, bound=False)
    small = gang("small", 1, 8, created="2024-01-01T00:00:30Z")
    decisions, waiting = decide(state(nodes, busy + pods + small + [running("ra2", "a2", 4)]), NOW)
    (w,) = waiting
    assert "capacity held back on 2 nodes" in w.message
    (d,) = decisions
    assert d.gang_key[1] == "small" and racks_of(d.placement, nodes) == {"b"}
