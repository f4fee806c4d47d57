"""A gang that can never fit the cluster as it is says so (GangCannotFit) within one round, for
each cause, names what to fix, and waits for room again (or goes) once a node that fixes it joins."""

from __future__ import annotations

from ganggate.contract import GROUP_TOPOLOGY_REQUIRED
from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0


def gang(name: str, n: int, gpus: int, *, required: str | None = None, extra: dict | None = None,
         **kw) -> list[dict]:
    pods = [make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=n, gpus=gpus, **kw) for i in range(n)]
    for pod in pods:
        if required:
            pod["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = required
        if extra:
            pod["spec"]["containers"][0]["resources"]["limits"].update(extra)
    return pods


def cluster(nodes: list[dict], pods: list[dict]) -> ClusterState:
    state = ClusterState()
    state.reset(nodes, pods)
    return state


def why(state: ClusterState, name: str) -> tuple[str, str]:
    """(reason, message) of the gang's wait this round; ("released", "") when it goes."""
    decisions, waiting = decide(state, T0)
    if any(d.gang_key[1] == name for d in decisions):
        return "released", ""
    found = [w for w in waiting if w.gang_key[1] == name]
    assert found, f"{name}: neither released nor waiting"
    return found[0].event_reason, found[0].message


def racked(count: int, gpus: int = 4, per_rack: int = 2, label: str = "ganggate.io/rack") -> list[dict]:
    return [make_node(f"node-{i}", gpus=gpus, labels={label: f"r{i // per_rack}"}) for i in range(count)]


def test_more_pods_than_the_cluster_holds_can_never_fit_until_a_node_joins() -> None:
    state = cluster([make_node(f"n{i}") for i in range(4)], gang("big", 5, 8))
    reason, message = why(state, "big")
    assert reason == "GangCannotFit"
    assert message.startswith("needs 5 pods of 8 GPUs each, but the 4 nodes it may use hold only 4 even when empty")
    assert "until nodes are added" in message
    state.apply_node("ADDED", make_node("n4"))
    assert why(state, "big")[0] == "released"


def test_a_pod_larger_than_any_node_can_never_fit_until_a_larger_one_joins() -> None:
    state = cluster([make_node("n0"), make_node("n1")], gang("wide", 1, 16))
    reason, message = why(state, "wide")
    assert reason == "GangCannotFit"
    assert message.startswith("a pod needs 16 GPUs on one node, but the largest node it may use has 8 GPUs allocatable")
    state.apply_node("ADDED", make_node("n2", gpus=16))
    assert why(state, "wide")[0] == "released"


def test_a_resource_no_node_has_is_named_with_the_nearest_one_nodes_have() -> None:
    nodes = [make_node("n0", extra={"example.com/fpgas": "2"})]
    state = cluster(nodes, gang("fpga", 1, 0, extra={"example.com/fpga": "1"}))
    reason, message = why(state, "fpga")
    assert reason == "GangCannotFit"
    assert message.startswith("its pods ask for example.com/fpga, a resource no node has "
                              "(did you mean example.com/fpgas?)")
    state.apply_node("ADDED", make_node("n1", extra={"example.com/fpga": "1"}))
    assert why(state, "fpga")[0] == "released"


def test_a_selector_label_no_node_carries_suggests_the_key_nodes_do_carry() -> None:
    nodes = [make_node(f"n{i}", labels={"gpu-type": "a100"}) for i in range(3)]
    state = cluster(nodes, gang("sel", 2, 8, node_selector={"gpu.type": "a100"}))
    reason, message = why(state, "sel")
    assert reason == "GangCannotFit"
    assert message.startswith("its pods' nodeSelector asks for the label gpu.type=a100, which no node carries "
                              "(did you mean gpu-type, which 3 nodes carry?)")
    state.apply_node("ADDED", make_node("n9", gpus=16, labels={"gpu.type": "a100"}))
    assert why(state, "sel")[0] == "released"


def test_a_selector_value_no_node_carries_lists_the_values_nodes_carry() -> None:
    nodes = [make_node("n0", labels={"gpu-type": "h100"}), make_node("n1", labels={"gpu-type": "v100"})]
    state = cluster(nodes, gang("sel", 1, 8, node_selector={"gpu-type": "a100"}))
    reason, message = why(state, "sel")
    assert reason == "GangCannotFit"
    assert "asks for gpu-type=a100, which no node carries (the nodes' gpu-type is h100, v100)" in message


def test_a_required_level_no_node_carries_reads_as_a_sentence_and_suggests_the_label() -> None:
    # The case: a typo'd level (racks), nodes of 4 GPUs, a gang of 6 GPUs.
    state = cluster(racked(4), gang("topo", 3, 2, required="ganggate.io/racks"))
    reason, message = why(state, "topo")
    assert reason == "GangCannotFit"
    assert message.startswith("needs 6 GPUs in one rack, but no node carries the label ganggate.io/racks "
                              "(did you mean ganggate.io/rack, which 4 nodes carry?), so each node is a rack of "
                              "its own, and the largest (node-0) has 4 GPUs allocatable")
    state.apply_node("ADDED", make_node("node-big", gpus=8))  # a node of its own, large enough
    assert why(state, "topo")[0] == "released"


def test_a_domain_larger_than_any_domain_can_never_fit_until_a_domain_grows() -> None:
    state = cluster(racked(4), gang("topo", 3, 4, required="ganggate.io/rack"))
    reason, message = why(state, "topo")
    assert reason == "GangCannotFit"
    assert message.startswith("needs 12 GPUs in one rack, more than any rack holds even when empty: the largest "
                              "(ganggate.io/rack=r0) has 8 GPUs allocatable")
    state.apply_node("ADDED", make_node("node-4", gpus=4, labels={"ganggate.io/rack": "r0"}))
    assert why(state, "topo")[0] == "released"


def test_a_gang_that_waits_for_room_is_not_called_endless() -> None:
    nodes = [make_node("n0"), make_node("n1")]
    busy = [make_pod("r0", namespace="busy", gpus=8, node_name="n0", phase="Running")]
    state = cluster(nodes, busy + gang("job", 2, 8))
    assert why(state, "job")[0] == "GangUnschedulable"


def test_nodes_not_ready_cordoned_or_tainted_still_count_as_the_cluster() -> None:
    nodes = [make_node("n0", ready=False), make_node("n1", unschedulable=True),
             make_node("n2", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])]
    state = cluster(nodes, gang("job", 3, 8))
    assert why(state, "job")[0] == "GangUnschedulable"


def test_amounts_read_as_sentences() -> None:
    from ganggate.core.placement.domains import level_name
    from ganggate.core.placement.explain import amount_text

    assert [amount_text("nvidia.com/gpu", m) for m in (1000, 500, 6000)] == ["1 GPU", "0.5 GPU", "6 GPUs"]
    assert [amount_text("pods", m) for m in (1000, 2000)] == ["1 pod", "2 pods"]
    assert [level_name(k) for k in ("ganggate.io/racks", "example.com/rack", "zones", "kubernetes.io/hostname",
                                    "nvidia.com/gpu.clique", "example.com/nvl-switches")] == [
        "rack", "rack", "zone", "node", "clique", "nvl-switch"]


def test_a_required_affinity_on_a_label_no_node_carries_names_it() -> None:
    pods = gang("aff", 1, 8)
    pods[0]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-types", "operator": "In", "values": ["a100"]}]}]}}}
    state = cluster([make_node("n0", labels={"gpu-type": "a100"})], pods)
    reason, message = why(state, "aff")
    assert reason == "GangCannotFit"
    assert message.startswith("no node matches its pods' required node affinity; no node carries the label "
                              "gpu-types (did you mean gpu-type, which 1 node carries?)")
    state.apply_node("ADDED", make_node("n1", labels={"gpu-types": "a100"}))
    assert why(state, "aff")[0] == "released"
