"""The controller's DRA counting (core.state.dra, core.fit.devices) as a user sees it in a round:
which gangs go and where, and what a waiting gang says."""

from __future__ import annotations

from ganggate.core.planner import decide
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.snapshot import make_node, make_pod

T0 = 1704067200.0
GPU_CLASS = {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {
    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}


def slice_for(node: str, gpus: int, product: str = "NVIDIA H100 80GB HBM3", generation: int = 1, name: str = "") -> dict:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                                                     "uuid": {"string": f"GPU-{node}-{i}"}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
    return {"metadata": {"name": name or f"{node}-gpu"}, "spec": {
        "driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                "resourceSliceCount": 1}, "devices": devices}}


def template(name: str, count: int, selector: str | None = None, namespace: str = "ml") -> dict:
    exactly: dict = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}}}


def claimed(pod: dict, **ref: str) -> dict:
    pod["spec"]["resourceClaims"] = [{"name": "gpus", **ref}]
    return pod


def gang(name: str, n: int, tmpl: str) -> list[dict]:
    return [claimed(make_pod(f"{name}-{i}", namespace="ml", gang=name, pod_num=n),
                    resourceClaimTemplateName=tmpl) for i in range(n)]


def allocated(name: str, node: str, devices: list[str], namespace: str = "ml") -> dict:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                             "count": len(devices)}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


def dra_cluster(nodes: dict[str, int], *objects: tuple[str, dict], pods: list[dict] = ()) -> ClusterState:
    state = ClusterState()
    state.apply_dra("deviceclasses", "ADDED", GPU_CLASS)
    for node, gpus in nodes.items():
        state.apply_dra("resourceslices", "ADDED", slice_for(node, gpus))
    for kind, obj in objects:
        state.apply_dra(kind, "ADDED", obj)
    state.reset([make_node(n, gpus=0) for n in nodes], list(pods))
    return state


def outcome(state: ClusterState, name: str) -> tuple[str, object]:
    decisions, waiting = decide(state, T0)
    for d in decisions:
        if d.gang_key[1] == name:
            return "released", d
    found = [w for w in waiting if w.gang_key[1] == name]
    assert found, f"{name}: neither released nor waiting"
    return found[0].event_reason, found[0].message


def test_a_dra_node_offers_its_devices_as_gpus_and_a_claim_gang_is_placed_whole() -> None:
    state = dra_cluster({"n0": 8, "n1": 8}, ("resourceclaimtemplates", template("two", 2)), pods=gang("ddp", 4, "two"))
    assert state.nodes["n0"].allocatable["nvidia.com/gpu"] == 8000
    assert all(p.request["nvidia.com/gpu"] == 2000 for p in state.pods.values())
    reason, decision = outcome(state, "ddp")
    assert reason == "released" and len(decision.placement) == 4


def test_allocated_claims_use_their_devices_and_a_gang_that_needs_more_waits() -> None:
    busy = [("resourceclaims", allocated(f"other-{n}", n, [f"gpu-{i}" for i in range(6)])) for n in ("n0", "n1")]
    state = dra_cluster({"n0": 8, "n1": 8}, ("resourceclaimtemplates", template("two", 2)), *busy,
                        pods=gang("ddp", 3, "two"))
    assert state.free("n0")["nvidia.com/gpu"] == 2000
    reason, _ = outcome(state, "ddp")
    assert reason in ("GangWaiting", "GangUnschedulable")  # room now taken, not a cluster too small
    state.apply_dra("resourceclaims", "DELETED", busy[0][1])  # those devices are free again
    assert outcome(state, "ddp")[0] == "released"


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    state = dra_cluster({"n0": 8})
    state.apply_dra("resourceslices", "ADDED", slice_for("n0", 2, generation=2, name="n0-gpu-v2"))
    assert state.nodes["n0"].allocatable["nvidia.com/gpu"] == 2000


def test_a_selector_no_device_matches_can_never_fit_and_says_which() -> None:
    selector = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
    state = dra_cluster({"n0": 8}, ("resourceclaimtemplates", template("b200", 1, selector)), pods=gang("b", 2, "b200"))
    reason, message = outcome(state, "b")
    assert reason == "GangCannotFit" and "NVIDIA B200" in str(message)
    state.apply_dra("resourceslices", "ADDED", slice_for("n1", 4, product="NVIDIA B200"))
    state.apply_node("ADDED", make_node("n1", gpus=0))
    assert outcome(state, "b")[0] == "released"


def test_a_template_not_seen_yet_holds_the_gang_until_it_comes() -> None:
    state = dra_cluster({"n0": 8}, pods=gang("ddp", 2, "two"))
    assert outcome(state, "ddp")[0] != "released"
    state.apply_dra("resourceclaimtemplates", "ADDED", template("two", 2))
    assert outcome(state, "ddp")[0] == "released"


def test_a_shared_claim_counts_once_for_the_gang() -> None:
    shared = {"metadata": {"name": "shared", "namespace": "ml"}, "spec": {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}
    pods = [claimed(make_pod(f"s-{i}", namespace="ml", gang="s", pod_num=3), resourceClaimName="shared") for i in range(3)]
    state = dra_cluster({"n0": 4}, ("resourceclaims", shared), pods=pods)
    assert sorted(p.request.get("nvidia.com/gpu", 0) for p in state.pods.values()) == [0, 0, 4000]
    assert outcome(state, "s")[0] == "released"


def test_a_bound_claim_pod_is_counted_by_its_claim_not_twice() -> None:
    pod = claimed(make_pod("solo", namespace="ml", node_name="n0"), resourceClaimTemplateName="two")
    state = dra_cluster({"n0": 8}, ("resourceclaimtemplates", template("two", 2)),
                        ("resourceclaims", allocated("solo-gpus", "n0", ["gpu-0", "gpu-1"])), pods=[pod])
    assert state.free("n0")["nvidia.com/gpu"] == 6000


def test_plain_gpu_requests_are_served_by_a_class_extended_resource_name() -> None:
    mapped = {"metadata": {"name": "gpu.example.com"}, "spec": {"extendedResourceName": "example.com/gpu"}}
    state = dra_cluster({"n0": 4}, ("deviceclasses", mapped))
    assert state.nodes["n0"].allocatable["example.com/gpu"] == 4000


def test_device_plugin_and_dra_nodes_side_by_side_each_gang_on_nodes_that_can_hold_it() -> None:
    state = ClusterState()
    state.apply_dra("deviceclasses", "ADDED", GPU_CLASS)
    state.apply_dra("resourceslices", "ADDED", slice_for("dra-0", 8))
    state.apply_dra("resourceclaimtemplates", "ADDED", template("four", 4))
    plain = [make_pod(f"p-{i}", namespace="ml", gang="p", pod_num=2, gpus=4) for i in range(2)]
    state.reset([make_node("plugin-0", gpus=8), make_node("dra-0", gpus=0)], gang("d", 2, "four") + plain)
    decisions, _ = decide(state, T0)
    placed = {d.gang_key[1]: set(d.placement.values()) for d in decisions}
    assert placed["d"] == {"dra-0"}  # claims only where the class's devices are
    assert placed["p"] == {"plugin-0"}  # plain nvidia.com/gpu: the device plugin's node (the other is full)


def test_a_high_priority_dra_gang_preempts_a_running_dra_gang_whose_claims_hold_the_devices() -> None:
    from ganggate.core.policy.preemption import PreemptionOptions, plan_preemption

    low = []
    objects = [("resourceclaimtemplates", template("eight", 8))]
    for i, node in enumerate(("n0", "n1")):
        pod = claimed(make_pod(f"low-{i}", namespace="ml", gang="low", pod_num=2, gated=False, node_name=node,
                               phase="Running", owner="low", decision={"id": "d-low", "node": node}),
                      resourceClaimTemplateName="eight")
        pod["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": f"low-{i}-gpus"}]
        low.append(pod)
        objects.append(("resourceclaims", allocated(f"low-{i}-gpus", node, [f"gpu-{d}" for d in range(8)])))
    high = [claimed(make_pod(f"high-{i}", namespace="ml", gang="high", pod_num=2, priority=1000, owner="high"),
                    resourceClaimTemplateName="eight") for i in range(2)]
    state = dra_cluster({"n0": 8, "n1": 8}, *objects, pods=low + high)
    assert state.free("n0")["nvidia.com/gpu"] == 0
    decisions, waitings = decide(state, T0)
    assert not decisions
    plan, _ = plan_preemption(state, waitings, T0, PreemptionOptions())
    assert plan is not None and [v.name for v in plan.victims] == ["ml/low"]


def test_a_dra_gang_requiring_one_rack_is_placed_in_one() -> None:
    from ganggate.contract import GROUP_TOPOLOGY_REQUIRED

    rack = "ganggate.io/rack"
    state = ClusterState(topology_levels=(rack,))
    state.apply_dra("deviceclasses", "ADDED", GPU_CLASS)
    names = {"a0": "a", "a1": "a", "b0": "b", "b1": "b"}
    for name in names:
        state.apply_dra("resourceslices", "ADDED", slice_for(name, 8))
    state.apply_dra("resourceclaimtemplates", "ADDED", template("four", 4))
    state.apply_dra("resourceclaims", "ADDED", allocated("busy", "a0", [f"gpu-{i}" for i in range(4)]))
    pods = gang("r", 4, "four")
    for pod in pods:
        pod["metadata"]["annotations"][GROUP_TOPOLOGY_REQUIRED] = rack
    state.reset([make_node(n, gpus=0, labels={rack: r}) for n, r in names.items()], pods)
    (decision,), _ = decide(state, T0)
    assert {names[n] for n in decision.placement.values()} == {"b"}  # rack a has 12 devices free, b 16


# ---- holding a released gang's devices (core.state.dra_hold) ---------------------------------


def made_for(pod: dict, node: str | None = None, devices: list[str] = (), count: int = 2) -> dict:
    """The claim the resourceclaim controller makes from the template for a pod (allocated on
    `node` when devices are given)."""
    meta = pod["metadata"]
    claim = allocated(f"{meta['name']}-gpus-x", node or "n0", list(devices)) if devices else {
        "metadata": {"name": f"{meta['name']}-gpus-x", "namespace": meta["namespace"]},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                         "count": count}}]}}}
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpus"}
    claim["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                             "uid": meta["uid"], "controller": True}]
    return claim


def test_a_released_gang_gets_its_claims_allocated_on_its_planned_nodes_on_free_devices() -> None:
    from ganggate.core.state import dra_hold

    pods = [dict(p, metadata=dict(p["metadata"], uid=f"uid-{i}")) for i, p in enumerate(gang("ddp", 3, "two"))]
    busy = allocated("ordinary", "n0", ["gpu-7"])
    claims = [("resourceclaims", made_for(p)) for p in pods]
    state = dra_cluster({"n0": 8, "n1": 8}, ("resourceclaimtemplates", template("two", 2)), ("resourceclaims", busy),
                        *claims, pods=pods)
    reason, decision = outcome(state, "ddp")
    assert reason == "released"
    members = dra_hold.members_of(decision.placement, state.pods)
    holds = dra_hold.plan_holds(state.dra, members)
    assert not isinstance(holds, str)
    assert len(holds.allocate) == 3
    given: list[tuple[str, str]] = []
    for key, allocation in holds.allocate.items():
        owner = "ml/" + key.split("/")[1].removesuffix("-gpus-x")
        node = decision.placement[owner]
        assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
        results = allocation["devices"]["results"]
        assert [r["request"] for r in results] == ["gpus", "gpus"] and {r["pool"] for r in results} == {node}
        given += [(node, r["device"]) for r in results]
    assert len(set(given)) == 6 and ("n0", "gpu-7") not in given  # no device twice, none in use


def test_a_member_whose_claim_is_not_made_yet_is_not_held_and_the_plan_says_why() -> None:
    from ganggate.core.state import dra_hold

    pods = [dict(p, metadata=dict(p["metadata"], uid=f"uid-{i}")) for i, p in enumerate(gang("ddp", 2, "two"))]
    state = dra_cluster({"n0": 8}, ("resourceclaimtemplates", template("two", 2)),
                        ("resourceclaims", made_for(pods[0])), pods=pods)
    _, decision = outcome(state, "ddp")
    why = dra_hold.plan_holds(state.dra, dra_hold.members_of(decision.placement, state.pods))
    assert why == "the claim gpus of ml/ddp-1 is not made yet"


def test_a_promised_members_own_allocated_claim_is_counted_once_then_as_the_claims_use_once_bound() -> None:
    pods = [dict(p, metadata=dict(p["metadata"], uid=f"uid-{i}")) for i, p in enumerate(gang("ddp", 2, "two"))]
    state = dra_cluster({"n0": 8}, ("resourceclaimtemplates", template("two", 2)), pods=pods)
    state.promise(("ml", "ddp"), {"ml/ddp-0": "n0", "ml/ddp-1": "n0"}, T0 + 60)
    assert state.free("n0")["nvidia.com/gpu"] == 4000
    state.apply_dra("resourceclaims", "ADDED", made_for(pods[0], "n0", ["gpu-7", "gpu-6"]))
    state.apply_dra("resourceclaims", "ADDED", made_for(pods[1], "n0", ["gpu-5", "gpu-4"]))
    assert state.free("n0")["nvidia.com/gpu"] == 4000  # held by the promises, not counted again
    for pod in pods:
        pod["spec"]["nodeName"] = "n0"
        state.apply_pod("MODIFIED", pod)
    assert not state.promises
    assert state.free("n0")["nvidia.com/gpu"] == 4000  # now the claims' use


def test_a_claim_an_earlier_release_left_allocated_elsewhere_is_listed_to_give_back() -> None:
    from ganggate.core.state import dra_hold

    pods = [dict(p, metadata=dict(p["metadata"], uid=f"uid-{i}")) for i, p in enumerate(gang("ddp", 2, "two"))]
    state = dra_cluster({"n0": 8, "n1": 8}, ("resourceclaimtemplates", template("two", 2)),
                        ("resourceclaims", made_for(pods[0])), ("resourceclaims", made_for(pods[1], "n1", ["gpu-7", "gpu-6"])),
                        pods=pods)
    members = [dra_hold.Member("ml/ddp-0", "uid-0", "ml", ("gpus",), "n0"),
               dra_hold.Member("ml/ddp-1", "uid-1", "ml", ("gpus",), "n0")]
    holds = dra_hold.plan_holds(state.dra, members)
    assert not isinstance(holds, str) and holds.stale == ["ml/ddp-1-gpus-x"]


def test_a_device_another_claim_was_given_as_it_was_held_is_found_contested() -> None:
    from ganggate.core.state import dra_hold

    pods = [dict(p, metadata=dict(p["metadata"], uid=f"uid-{i}")) for i, p in enumerate(gang("ddp", 1, "two"))]
    ours = made_for(pods[0], "n0", ["gpu-7", "gpu-6"])
    state = dra_cluster({"n0": 8}, ("resourceclaimtemplates", template("two", 2)), ("resourceclaims", ours), pods=pods)
    written = {"ml/ddp-0-gpus-x": ours["status"]["allocation"]}
    assert dra_hold.contested(state.dra, written) is None
    state.apply_dra("resourceclaims", "ADDED", allocated("ordinary", "n0", ["gpu-6"]))
    assert dra_hold.contested(state.dra, written) == "device gpu-6 of pool n0 is held by ml/ordinary too"
    state.apply_dra("resourceclaims", "DELETED", {"metadata": {"name": "ordinary", "namespace": "ml"}})
    assert dra_hold.contested(state.dra, written) is None
