"""kubesim's GPU sharing: nodes advertise cards like the gpushare device plugin, the scheduler sees only
the node's sum, and the kubelet's device plugin stand-in fails a pod its card cannot hold."""

from __future__ import annotations

import argparse
import contextlib

import aiohttp
import pytest

from ganggate.sim import Simulator
from ganggate.sim.clock import ManualClock
from ganggate.sim.kubelet.deviceplugin import (
    ASSIGNED,
    ASSUME_TIME,
    CARD_INDEX,
    GPU_COUNT,
    GPU_MEM,
    CardLedger,
    parse_card_memory,
)
from ganggate.sim.simulator import node_manifest
from tests.test_kubesim_scheduler_support import Api, bound_node, pod_manifest, wait_for

RUN = "kubesim.io/run-seconds"


def sharing_pod(name: str, gib: int, card: int | str | None = 0, *, assumed: bool = True, node: str | None = None,
                run_seconds: float | None = None) -> dict:
    """A pod asking `gib` of one card's memory, with the annotations ganggate's decision writes."""
    annotations: dict[str, str] = {}
    if card is not None:
        annotations[CARD_INDEX] = str(card)
    if assumed:
        annotations.update({ASSUME_TIME: "1700000000000000000", ASSIGNED: "false"})
    if run_seconds is not None:
        annotations[RUN] = str(run_seconds)
    manifest = pod_manifest(name, annotations=annotations or None, node_name=node)
    manifest["spec"]["containers"][0]["resources"]["limits"] = {GPU_MEM: str(gib)}
    return manifest


@contextlib.asynccontextmanager
async def cluster(**kwargs):
    clock = ManualClock()
    async with Simulator(clock=clock, **kwargs) as sim, aiohttp.ClientSession() as session:
        yield sim, Api(session, sim.url), clock


async def final_phase(api: Api, name: str) -> dict:
    async def probe():
        pod = await api.pod(name)
        return pod if (pod or {}).get("status", {}).get("phase") in ("Running", "Failed") else None

    return await wait_for(probe, f"{name} to run or fail")


# -- the node and the scheduler ------------------------------------------------------------------


def test_a_node_with_cards_advertises_total_memory_and_card_count():
    node = node_manifest("n", gpus=2, gpu_mem_per_card=8)
    assert node["status"]["allocatable"][GPU_MEM] == "16"
    assert node["status"]["allocatable"][GPU_COUNT] == "2"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert GPU_MEM not in node_manifest("plain", gpus=2)["status"]["capacity"]


async def test_the_scheduler_sees_only_the_sum_and_the_device_plugin_refuses_a_pod_no_card_holds():
    # Two cards of 8 GiB: the default scheduler's NodeResourcesFit sees 16 and binds 12 GiB;
    # only the per-card check on the node can tell it fits on no card.
    async with cluster(nodes=1, gpus_per_node=2, gpu_mem_per_card=8) as (sim, api, _):
        await api.create_pod(sharing_pod("big", 12, card=0))
        assert await bound_node(api, "big") == "node-0"
        pod = await final_phase(api, "big")
        status = pod["status"]
        assert status["phase"] == "Failed"
        assert status["reason"] == "UnexpectedAdmissionError"
        assert status["message"].startswith("Pod was rejected: Allocate failed due to card 0 of node node-0 has 8 of 8")
        assert status["message"].endswith("which is unexpected")
        async with api.session.get(f"{api.url}/api/v1/namespaces/default/events") as response:
            events = (await response.json())["items"]
        assert any(e["reason"] == "UnexpectedAdmissionError" and e["involvedObject"]["name"] == "big"
                   and e["type"] == "Warning" for e in events)


async def test_two_pods_never_oversubscribe_one_card_but_share_two():
    async with cluster(nodes=1, gpus_per_node=2, gpu_mem_per_card=8) as (sim, api, _):
        await api.create_pod(sharing_pod("a", 6, card=0))
        first = await final_phase(api, "a")
        assert first["status"]["phase"] == "Running"
        # the device plugin marks the pod assigned, as its Allocate does
        assert first["metadata"]["annotations"][ASSIGNED] == "true"
        await api.create_pod(sharing_pod("b", 6, card=0))
        assert (await final_phase(api, "b"))["status"]["phase"] == "Failed"
        await api.create_pod(sharing_pod("c", 6, card=1))
        assert (await final_phase(api, "c"))["status"]["phase"] == "Running"
        await api.create_pod(sharing_pod("d", 2, card=0))  # 6 + 2 = 8: exactly full
        assert (await final_phase(api, "d"))["status"]["phase"] == "Running"


async def test_memory_is_free_again_when_the_pod_on_the_card_finishes():
    async with cluster(nodes=1, gpus_per_node=1, gpu_mem_per_card=8) as (sim, api, clock):
        await api.create_pod(sharing_pod("short", 8, card=0, run_seconds=10))
        assert (await final_phase(api, "short"))["status"]["phase"] == "Running"
        await wait_for(lambda: _now(clock.next_wakeup() == 10), "the kubelet to wait for the end")
        clock.advance_to(10)

        async def succeeded():
            return ((await api.pod("short")) or {}).get("status", {}).get("phase") == "Succeeded"

        await wait_for(succeeded, "short to succeed")
        await api.create_pod(sharing_pod("next", 8, card=0))
        assert (await final_phase(api, "next"))["status"]["phase"] == "Running"


@pytest.mark.parametrize("card, assumed, why", [
    (None, True, "annotation ALIYUN_COM_GPU_MEM_IDX=None is not a card index"),
    ("one", True, "annotation ALIYUN_COM_GPU_MEM_IDX='one' is not a card index"),
    (2, True, "card index 2 is out of range: node node-0 has 2 card(s)"),
    (0, False, "not an assumed pod"),
])
async def test_a_pod_without_a_valid_assumed_card_fails_at_admission(card, assumed, why):
    async with cluster(nodes=1, gpus_per_node=2, gpu_mem_per_card=8) as (sim, api, _):
        await api.create_pod(sharing_pod("p", 4, card=card, assumed=assumed, node="node-0"))
        pod = await final_phase(api, "p")
        assert pod["status"]["phase"] == "Failed"
        assert why in pod["status"]["message"]


async def test_plain_gpu_nodes_and_pods_are_untouched():
    async with cluster(nodes=1, gpus_per_node=2) as (sim, api, _):
        await api.create_pod(pod_manifest("whole", gpus=2))
        assert (await final_phase(api, "whole"))["status"]["phase"] == "Running"


# -- the ledger alone (the device plugins' view) ---------------------------------------------------


def _node(cards: int = 2, per_card: int = 8) -> dict:
    return node_manifest("n", gpus=cards, gpu_mem_per_card=per_card)


def _whole(gpus: int) -> dict:
    return pod_manifest("w", gpus=gpus)


def test_a_card_given_whole_is_not_shared():
    ledger = CardLedger()
    assert ledger.admit("w", _whole(1), _node()) is None
    assert ledger.admit("s1", sharing_pod("s1", 2, card=0), _node()) is None
    # both cards are now taken: one whole, one shared
    assert "is given whole" in ledger.admit("s2", sharing_pod("s2", 2, card=1), _node())
    assert "neither given whole nor shared" in ledger.admit("w2", _whole(1), _node())
    assert ledger.admit("s3", sharing_pod("s3", 2, card=0), _node()) is None  # same shared card: fine
    ledger.release("w")
    assert ledger.admit("s2", sharing_pod("s2", 2, card=1), _node()) is None


def test_a_pod_asking_whole_and_shared_gpus_is_refused():
    pod = sharing_pod("both", 2)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert "both nvidia.com/gpu and aliyun.com/gpu-mem" in CardLedger().admit("both", pod, _node())


def test_amount_is_summed_over_containers():
    pod = sharing_pod("two", 5)
    pod["spec"]["containers"].append({"name": "side", "image": "busybox", "resources": {"limits": {GPU_MEM: "4"}}})
    assert "the pod asks 9" in CardLedger().admit("two", pod, _node())


# -- the command line -------------------------------------------------------------------------------


def _serve_args(*argv: str) -> argparse.Namespace:
    from ganggate.cli import build_parser

    return build_parser().parse_args(["sim", "serve", *argv])


def test_serve_flags_build_shared_cards():
    from ganggate.sim.cli import gpushare_nodes

    args = _serve_args("--gpu-mem-per-card", "16Gi", "--gpu-cards", "4")
    assert gpushare_nodes(args) == (16, None)
    assert args.gpus_per_node == 4
    args = _serve_args("--gpu-mem-per-card", "16Gi", "--gpu-mem-unit", "MiB")
    assert gpushare_nodes(args)[0] == 16384


@pytest.mark.parametrize("text, unit", [("1.5Gi", "GiB"), ("0", "GiB"), ("lots", "GiB"), ("100Mi", "GiB")])
def test_bad_card_memory_is_a_clear_error(text, unit):
    with pytest.raises(ValueError, match="gpu memory per card"):
        parse_card_memory(text, unit)


async def _now(value):
    return value
