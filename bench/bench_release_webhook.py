"""A gang's release through the whole `ganggate sim up` stack, webhook in place: what the admission
configuration costs the controller's release.

One process, one event loop, as `ganggate sim up` runs them: kubesim (scheduler on, kubelet off),
the webhook over HTTPS registered through its MutatingWebhookConfiguration, the controller. Pods are
created without the gate (the webhook adds it on CREATE); the time is from the last pod created to
every gate removed, and to every pod bound. Three admission configurations, each in a fresh cluster:

- `UPDATE, cel-python`: the webhook also matches pod UPDATE (deploy/components/webhook-update-check,
  which was the shipped configuration before the policies), and kubesim evaluates CEL with cel-python
  only, as it did before it compiled expressions into closures: each release PATCH is a webhook call
  and a cel-python evaluation of the matchCondition;
- `UPDATE`: the same webhook configuration, CEL compiled once (kubesim/apiserver/admission/cel_fast.py);
- `CREATE only`: what deploy/base ships now: the webhook matches CREATE, and the ValidatingAdmissionPolicy
  ganggate-gang-annotations-immutable checks each PATCH inside the API server.

In the same cluster after each release, the bare-PATCH floor: as many no-op JSON patches (a lone
`test` of the uid) to ordinary pods (no gang annotation: no webhook, and the policies' checks pass)
at the controller's concurrency; release/floor is what the release costs over the API's price of
a patch that writes nothing. Beside the wall times, the CPU time of the process (it runs everything)
in each window: on a shared machine the wall times move with the load, the CPU much less.

    .venv/bin/python bench/bench_release_webhook.py [--sizes 100 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ganggate.contract import GATE_NAME, GROUP_NAME, GROUP_POD_NUM
from ganggate.controller.round.informer import Informer
from ganggate.controller.round.loop import Controller, ControllerConfig
from ganggate.kube.calls import call_json
from ganggate.local.parts import make_certificates, register_webhook, start_tls_webhook, webhook_configuration

ROOT = Path(__file__).resolve().parent.parent
COMPONENT = ROOT / "deploy" / "components" / "webhook-update-check" / "kustomization.yaml"
MODES = ("UPDATE, cel-python", "UPDATE", "CREATE only")


def pod(name: str, group: str | None, num: int) -> dict[str, Any]:
    annotations = {GROUP_NAME: group, GROUP_POD_NUM: str(num)} if group else {}
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"} if group else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": limits}}]}}


def update_configuration(configuration: dict[str, Any]) -> dict[str, Any]:
    """The shipped configuration as deploy/components/webhook-update-check patches it."""
    ops = yaml.safe_load(yaml.safe_load(COMPONENT.read_text())["patches"][0]["patch"])
    for op in ops:
        if op["op"] != "replace":
            continue
        target: Any = configuration
        *parents, last = [int(p) if p.isdigit() else p for p in op["path"].strip("/").split("/")]
        for part in parents:
            target = target[part]
        target[last] = op["value"]
    return configuration


@contextlib.contextmanager
def cel_python_only(enabled: bool):
    """kubesim's CEL as before this change: every expression through cel-python."""
    from ganggate.sim.apiserver.admission import cel, cel_fast

    original = cel_fast.compile_cel

    def unsupported(text: str) -> Any:
        raise cel_fast.Unsupported("benchmark: cel-python only")

    cel.compile_expression.cache_clear()
    if enabled:
        cel_fast.compile_cel = unsupported
    try:
        yield
    finally:
        cel_fast.compile_cel = original
        cel.compile_expression.cache_clear()


async def patch_floor(core: Any, names: list[str], concurrency: int) -> float:
    """Seconds to send one no-op JSON patch to each pod, `concurrency` in flight."""
    sem = asyncio.Semaphore(concurrency)
    pods = {p["metadata"]["name"]: p for p in (await call_json(core.list_namespaced_pod, "default"))["items"]}

    async def noop(name: str) -> None:
        async with sem:
            body = [{"op": "test", "path": "/metadata/uid", "value": pods[name]["metadata"]["uid"]}]
            await call_json(core.patch_namespaced_pod, name, "default", body)

    start = time.perf_counter()
    await asyncio.gather(*(noop(n) for n in names))
    return time.perf_counter() - start


async def one_run(size: int, run: int, mode: str) -> tuple[float, float, float, float, float]:
    """(gates removed, all bound, PATCH floor, release CPU, floor CPU) in seconds, for one gang in a
    fresh cluster. CPU is this process's (everything runs in it): it holds whatever the load."""
    from kubernetes_asyncio import client

    from ganggate.sim import Simulator

    with tempfile.TemporaryDirectory() as tmp, cel_python_only(mode == MODES[0]):
        certs = make_certificates(Path(tmp))
        webhook = await start_tls_webhook(certs)
        try:
            async with Simulator(nodes=(size + 7) // 8, gpus_per_node=8, scheduler=True, kubelet=False) as sim:
                async with sim.api_client() as api, sim.api_client() as ctl_api:
                    configuration = webhook_configuration(webhook.url, certs.ca_file.read_bytes())
                    if mode == "CREATE only":
                        await register_webhook(api, configuration)
                    else:
                        await register_webhook(api, update_configuration(configuration), policies=False)
                    return await _release(client.CoreV1Api(api), ctl_api, size, run)
        finally:
            await webhook.close()


async def _release(core: Any, ctl_api: Any, size: int, run: int) -> tuple[float, float, float, float, float]:
    ungated: dict[str, float] = {}
    bound: dict[str, float] = {}

    def see(obj: dict[str, Any]) -> None:
        name, now = obj["metadata"]["name"], time.perf_counter()
        if obj["metadata"].get("annotations", {}).get(GROUP_NAME) and not any(
                g.get("name") == GATE_NAME for g in obj["spec"].get("schedulingGates") or []):
            ungated.setdefault(name, now)
        if obj["spec"].get("nodeName"):
            bound.setdefault(name, now)

    watcher = Informer(core.list_pod_for_all_namespaces, "pods(bench)",
                       on_list=lambda items: [see(p) for p in items], on_event=lambda _k, p: see(p))
    tasks = [asyncio.create_task(watcher.run())]
    controller = Controller(ctl_api, ControllerConfig(leader_election=False))
    tasks.append(asyncio.create_task(controller.run()))
    try:
        while not (controller.synced and watcher.synced):
            await asyncio.sleep(0.02)
        # Creation is not timed; few in flight, so that the webhook (on this loop) answers within its
        # 5 s timeout even when cel-python evaluations stall the loop on a loaded machine.
        group, sem = f"g{run}", asyncio.Semaphore(8)

        async def create(body: dict[str, Any]) -> None:
            async with sem:
                await call_json(core.create_namespaced_pod, "default", body)

        await asyncio.gather(*(create(pod(f"{group}-{i}", group, size)) for i in range(size - 1)))
        await asyncio.sleep(0.3)  # the controller has seen the first size-1 pods and waits for the last
        assert not ungated, "released before the gang was complete"
        cpu, start = time.process_time(), time.perf_counter()
        await create(pod(f"{group}-{size - 1}", group, size))
        deadline = time.monotonic() + 300
        while (len(ungated) < size or len(bound) < size) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if len(bound) < size:
            raise SystemExit(f"gang of {size}: {len(ungated)} released, {len(bound)} bound after 300 s")
        release_cpu = time.process_time() - cpu
        released, all_bound = max(ungated.values()) - start, max(bound.values()) - start
        plain = [f"plain-{i}" for i in range(size)]
        await asyncio.gather(*(create(pod(name, None, 0)) for name in plain))
        cpu = time.process_time()
        floor = await patch_floor(core, plain, controller.config.max_in_flight)
        return released, all_bound, floor, release_cpu, time.process_time() - cpu
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def per_request(count: int = 300) -> None:
    """CPU per pod UPDATE of each admission step alone: the webhook's matchCondition (cel-python and
    compiled) and the shipped immutability policy's whole evaluation, on a release patch of a gang pod."""
    from ganggate.local.parts import admission_policies
    from ganggate.sim.apiserver.admission import policy as vap
    from ganggate.sim.apiserver.admission.cel import build_activation, evaluate_conditions

    old = pod("g-0", "g", 100)
    old["metadata"]["uid"] = "u"
    old["spec"].update(schedulerName="default-scheduler", schedulingGates=[{"name": GATE_NAME}])
    new = yaml.safe_load(yaml.safe_dump(old))
    del new["spec"]["schedulingGates"]
    new["metadata"]["annotations"]["ganggate.io/decision"] = '{"id": "d"}'
    conditions = update_configuration(webhook_configuration("https://x", b""))["webhooks"][0]["matchConditions"]
    request = {"operation": "UPDATE"}
    from ganggate.sim.apiserver.registry.validatingadmissionpolicy import BINDING_KEY, POLICY_KEY

    keys = {"ValidatingAdmissionPolicy": POLICY_KEY, "ValidatingAdmissionPolicyBinding": BINDING_KEY}
    objects = admission_policies()
    chain = vap.PolicyChain(lambda key: [o for o in objects if keys[o["kind"]] == key],
                            lambda key: 1, lambda name: {"metadata": {"name": name}})
    denied = yaml.safe_load(yaml.safe_dump(new))
    denied["metadata"]["annotations"][GROUP_POD_NUM] = "7"
    try:
        chain.validate(vap.Request("UPDATE", {"group": "", "version": "v1", "kind": "Pod"},
                                   {"group": "", "version": "v1", "resource": "pods"}, None, "default", "g-0",
                                   denied, old, False, {}))
        raise SystemExit("the policy did not refuse a changed group-pod-num")
    except Exception as exc:  # errors.ApiError: the policy is evaluated
        if "immutable" not in str(exc):
            raise
    attributes = vap.Request("UPDATE", {"group": "", "version": "v1", "kind": "Pod"},
                             {"group": "", "version": "v1", "resource": "pods"}, None, "default", "g-0", new, old,
                             False, {})

    def timed(step: Any) -> float:
        step()
        start = time.process_time()
        for _ in range(count):
            step()
        return (time.process_time() - start) / count * 1e6

    with cel_python_only(True):
        celpy = timed(lambda: evaluate_conditions(conditions, build_activation(new, old, request)))
    compiled = timed(lambda: evaluate_conditions(conditions, build_activation(new, old, request)))
    policy = timed(lambda: chain.validate(attributes))
    print(f"per pod UPDATE, CPU: webhook matchCondition {celpy:.0f} us with cel-python, {compiled:.0f} us compiled "
          f"({celpy / compiled:.0f}x); the immutability policy (match, condition, variables, validation) {policy:.0f} us")


async def main(sizes: list[int], repeat: int) -> None:
    per_request()
    print(f"kubesim, webhook and controller in one process (as `ganggate sim up`); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'gang':>6} {'admission':>20} {'runs':>4} {'gates removed: median':>22} {'worst':>8} "
          f"{'all bound: median':>18} {'PATCH floor':>12} {'removed/floor':>14} {'CPU: release':>13} "
          f"{'floor':>8} {'release/floor':>14}")
    for size in sizes:
        for mode in MODES:
            results = [await asyncio.wait_for(one_run(size, r, mode), 600) for r in range(repeat)]
            removed = [r[0] for r in results]
            print(f"{size:>6} {mode:>20} {repeat:>4} {statistics.median(removed) * 1000:>19.0f} ms "
                  f"{max(removed) * 1000:>5.0f} ms {statistics.median(r[1] for r in results) * 1000:>15.0f} ms "
                  f"{statistics.median(r[2] for r in results) * 1000:>9.0f} ms "
                  f"{statistics.median(r[0] / r[2] for r in results):>13.2f}x "
                  f"{statistics.median(r[3] for r in results) * 1000:>10.0f} ms "
                  f"{statistics.median(r[4] for r in results) * 1000:>5.0f} ms "
                  f"{statistics.median(r[3] / r[4] for r in results):>13.2f}x", flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    from bench.small import small  # tests/test_benches.py runs --small
    parser.add_argument("--small", action=small(sizes=[4], repeat=1))
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args.sizes, args.repeat))
