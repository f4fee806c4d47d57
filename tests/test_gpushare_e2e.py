"""GPU sharing end to end on kubesim (#9): the shipped webhook configuration sends pods asking
aliyun.com/gpu-mem, the webhook gates them (a lone pod as a gang of one), the controller picks
each pod's card and writes it with the release, the unmodified default-scheduler stand-in binds
them, and kubesim's gpushare device plugin stand-in (which refuses a pod whose card it would
oversubscribe) runs every one. A pod larger than any card gets an Event and is left as it was."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from ganggate.contract import (
    GPUSHARE_ASSIGNED,
    GPUSHARE_ASSUME_TIME,
    GPUSHARE_CARD_INDEX,
    GPUSHARE_POD_AMOUNT,
    GROUP_NAME,
    SHARED_GPU_MEMORY,
)
from ganggate.kube.calls import call_json
from tests.controller_support import create_pods, e2e_cluster, gang_pod, is_gated, list_events, wait_for

SHIPPED = Path(__file__).resolve().parent.parent / "ganggate" / "local" / "webhook-url.yaml"


def sharing(name: str, amount: int, group: str | None = None, num: int | None = None) -> dict:
    pod = gang_pod(name, group, num, gpus=0)
    pod["spec"]["containers"][0]["resources"]["limits"][SHARED_GPU_MEMORY] = str(amount)
    return pod


async def use_shipped_configuration(env, tmp_path: Path) -> None:
    """Replace the test registration (which sends every pod) by the shipped one, matchConditions
    and all, pointed at this webhook."""
    from kubernetes_asyncio import client

    admission = client.AdmissionregistrationV1Api(env.api)
    await call_json(admission.delete_mutating_webhook_configuration, "ganggate")
    shipped = yaml.safe_load(SHIPPED.read_text())
    hook = shipped["webhooks"][0]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{env.webhook.port}/mutate",
                            "caBundle": base64.b64encode((tmp_path / "certs" / "ca.crt").read_bytes()).decode()}
    await call_json(admission.create_mutating_webhook_configuration, shipped)


async def test_sharing_pods_and_a_sharing_gang_run_on_cards_the_controller_chose(tmp_path):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=2, gpu_mem_per_card=8) as env:
        await use_shipped_configuration(env, tmp_path)
        await env.start_controller()
        pods = [sharing("solo-a", 6), sharing("solo-b", 5)]
        pods += [sharing(f"g-{i}", 4, "shared-gang", 4) for i in range(4)]
        pods += [sharing("too-big", 9)]
        await create_pods(env.core, pods)

        async def settled():
            listed = {p["metadata"]["name"]: p for p in await env.pods("default")}
            running = [n for n, p in listed.items() if (p.get("status") or {}).get("phase") == "Running"]
            return listed if len(running) == 6 else None

        listed = await wait_for(settled, what="six sharing pods running")
        assert all((p.get("status") or {}).get("phase") != "Failed" for p in listed.values())
        per_card: dict[tuple[str, str], int] = {}
        for name, pod in listed.items():
            if name == "too-big":
                continue
            annotations = pod["metadata"]["annotations"]
            assert annotations[GPUSHARE_ASSIGNED] == "true"  # the device plugin stand-in allocated it
            assert annotations[GPUSHARE_ASSUME_TIME].isdigit()
            key = (pod["spec"]["nodeName"], annotations[GPUSHARE_CARD_INDEX])
            per_card[key] = per_card.get(key, 0) + int(annotations[GPUSHARE_POD_AMOUNT])
        assert all(total <= 8 for total in per_card.values()) and sum(per_card.values()) == 27
        assert listed["solo-a"]["metadata"]["annotations"][GROUP_NAME] == "gpushare-solo-a"

        events = await wait_for(lambda: _events(env, "too-big"), what="an Event for the pod no card holds")
        assert any("the largest card of the nodes it may use holds 8" in e["message"] and "never fit" in e["message"]
                   for e in events)
        big = listed["too-big"]
        assert is_gated(big) and not big["spec"].get("nodeName")
        assert GPUSHARE_CARD_INDEX not in big["metadata"]["annotations"]


async def _events(env, name: str):
    found = [e for e in await list_events(env.core) if e["involvedObject"].get("name") == name
             and e.get("reason") == "GangCannotFit"]  # larger than any card: a wait that cannot end
    return found or None


async def test_a_restarted_controller_reads_the_cards_in_use_from_the_pods_annotations(tmp_path):
    # One node, two cards of 8. The first controller puts a 5 on a card; a new controller, which
    # knows only what the pods record, must put the next 5 on the other card and a 3 beside the
    # first 5 (best fit): kubesim's device plugin stand-in fails any pod that would overflow a card.
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=2, gpu_mem_per_card=8) as env:
        await use_shipped_configuration(env, tmp_path)
        first, _ = await env.start_controller()
        await create_pods(env.core, [sharing("first", 5)])
        await wait_for(lambda: _running(env, {"first"}), what="first running")
        await env.stop_controller(first)
        await env.start_controller()
        await create_pods(env.core, [sharing("second", 5)])
        await wait_for(lambda: _running(env, {"first", "second"}), what="second running")
        await create_pods(env.core, [sharing("third", 3)])
        listed = await wait_for(lambda: _running(env, {"first", "second", "third"}), what="third running")
        card = {name: pod["metadata"]["annotations"][GPUSHARE_CARD_INDEX] for name, pod in listed.items()}
        assert card["second"] != card["first"] and card["third"] == card["first"]


async def _running(env, names: set[str]):
    listed = {p["metadata"]["name"]: p for p in await env.pods("default")}
    failed = [n for n, p in listed.items() if (p.get("status") or {}).get("phase") == "Failed"]
    assert not failed, f"the device plugin stand-in failed {failed}"
    running = {n for n, p in listed.items() if (p.get("status") or {}).get("phase") == "Running"}
    return listed if names <= running else None
