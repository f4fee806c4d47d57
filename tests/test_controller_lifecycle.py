"""The controller as its own process: where its lease lives, what it says when it cannot lead,
and a clean stop on SIGTERM/SIGINT that hands the lease over at once."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client

from ganggate.kube.calls import ApiCallError
from ganggate.kube.leader import LeaderElector, default_lease_namespace
from tests.controller_support import create_pods, e2e_cluster, gang_pod, wait_for

GANGGATE = str(Path(sys.executable).with_name("ganggate"))
LEASE = "ganggate-controller"


def gang(name, num, gpus=1):
    return [gang_pod(f"{name}-{i}", name, num, gpus=gpus) for i in range(num)]


async def bound(env, prefix, count):
    pods = [p for p in await env.pods("default") if p["metadata"]["name"].startswith(prefix + "-")]
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


class Proc:
    """A `ganggate controller` subprocess whose stderr is collected as it comes."""

    def __init__(self, proc):
        self.proc = proc
        self.err = ""
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, kubeconfig, *args, env=None):
        env_vars = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        if "POD_NAMESPACE" not in (env or {}):
            env_vars.pop("POD_NAMESPACE", None)
        proc = await asyncio.create_subprocess_exec(
            GANGGATE, "controller", "--kubeconfig", kubeconfig, "--metrics-port", "0", *args,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env_vars)
        return cls(proc)

    async def _read(self):
        async for line in self.proc.stderr:
            self.err += line.decode()

    async def port(self):
        async def found():
            match = re.search(r"metrics on http://[0-9.]+:(\d+)/metrics", self.err)
            return int(match.group(1)) if match else None

        return await wait_for(found, what="the metrics port in the log")

    async def stop(self, sig=signal.SIGTERM):
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        code = await self.proc.wait()
        await self._reader
        return code


async def get(url):
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as resp:
            return resp.status, await resp.text()


async def read_lease(env, namespace="ganggate-system"):
    try:
        return await client.CoordinationV1Api(env.api).read_namespaced_lease(LEASE, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def status_out(env, *args):
    proc = await asyncio.create_subprocess_exec(
        GANGGATE, "status", "--kubeconfig", env.sim.kubeconfig, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def test_the_lease_namespace_is_the_controllers_own_in_a_cluster(tmp_path):
    sa_file = tmp_path / "namespace"
    sa_file.write_text("team-gpu\n")
    assert default_lease_namespace({}, str(sa_file)) == "team-gpu"
    assert default_lease_namespace({"POD_NAMESPACE": "from-env"}, str(sa_file)) == "from-env"
    assert default_lease_namespace({}, str(tmp_path / "absent")) == "ganggate-system"


async def test_a_controller_leads_from_its_own_namespace_and_status_names_the_leader(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        await env.core.create_namespace({"metadata": {"name": "team-gpu"}})
        ctl = await Proc.start(env.sim.kubeconfig, env={"POD_NAMESPACE": "team-gpu"})
        try:
            await create_pods(env.core, gang("own", 2))
            await wait_for(lambda: bound(env, "own", 2), timeout=60, what="gang released")
            lease = await read_lease(env, "team-gpu")
            assert lease is not None and str(ctl.proc.pid) in lease.spec.holder_identity
            assert await read_lease(env) is None  # nothing in ganggate-system
            out = await status_out(env, "--lease-namespace", "team-gpu")
            assert re.search(rf"controller: leader \S*-{ctl.proc.pid}-\S* \(lease renewed \d+s ago\)", out), out
        finally:
            assert await ctl.stop() == 0, ctl.err
        out = await status_out(env, "--lease-namespace", "team-gpu")
        assert "no controller is leading (lease team-gpu/ganggate-controller given up" in out, out


async def test_a_missing_lease_namespace_is_a_warning_with_the_remedy_and_not_ready(tmp_path):
    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        ctl = await Proc.start(env.sim.kubeconfig, "--lease-namespace", "nowhere")
        try:
            port = await ctl.port()
            await wait_for(lambda: _true("WARNING" in ctl.err and "nowhere" in ctl.err), what="the warning")
            warning = next(line for line in ctl.err.splitlines() if "WARNING" in line)
            for remedy in ("kubectl create namespace nowhere", "--lease-namespace", "--no-leader-election"):
                assert remedy in warning, warning

            async def readyz_says_why():
                status, body = await get(f"http://127.0.0.1:{port}/readyz")
                return (status, body) if "does not exist" in body else None

            status, body = await wait_for(readyz_says_why, what="/readyz explains")
            assert status == 503 and "lease namespace nowhere does not exist" in body
            assert (await get(f"http://127.0.0.1:{port}/healthz"))[0] == 200
            _, metrics = await get(f"http://127.0.0.1:{port}/metrics")
            assert "ganggate_leader 0.0" in metrics
            out = await status_out(env, "--lease-namespace", "nowhere")
            assert "no controller is leading (lease nowhere/ganggate-controller not found)" in out, out
        finally:
            assert await ctl.stop() == 0, ctl.err
        assert "Traceback" not in ctl.err


async def test_a_standby_replica_says_once_which_replica_leads(caplog):
    from ganggate.sim import Simulator

    async with Simulator(nodes=0, scheduler=False, kubelet=False, controllers=False) as sim:
        api_client = sim.api_client()
        try:
            api = client.CoordinationV1Api(api_client)
            leader = LeaderElector(api, name=LEASE, namespace="default", identity="replica-a")
            standby = LeaderElector(api, name=LEASE, namespace="default", identity="replica-b")
            assert await leader.try_acquire_or_renew()
            with caplog.at_level(logging.INFO, logger="ganggate.kube.leader"):
                for _ in range(3):
                    assert not await standby.try_acquire_or_renew()
        finally:
            await api_client.close()
    said = [r.getMessage() for r in caplog.records if "stands by" in r.getMessage()]
    assert said == ["lease default/ganggate-controller is held by replica-a: this replica stands by and takes "
                    "over when the lease is given up or expires"]
    assert standby.not_leading_reason() == "not leading: lease default/ganggate-controller is held by replica-a"


async def _true(value):
    return value


class _NoNamespace:
    """A CoordinationV1Api whose lease namespace does not exist."""

    def __init__(self):
        self.creates = 0

    async def read_namespaced_lease(self, *args, **kwargs):
        raise ApiCallError(404, "NotFound", 'leases.coordination.k8s.io "ganggate-controller" not found')

    async def create_namespaced_lease(self, *args, **kwargs):
        self.creates += 1
        raise ApiCallError(404, "NotFound", 'namespaces "ganggate-system" not found')


async def test_the_missing_namespace_warning_backs_off_instead_of_repeating(caplog):
    api = _NoNamespace()
    elector = LeaderElector(api, name=LEASE, namespace="ganggate-system", identity="me", retry_period=2.0)
    with caplog.at_level(logging.DEBUG, logger="ganggate.kube.leader"):
        for _ in range(10):
            assert not await elector.try_acquire_or_renew()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert api.creates == 10 and len(warnings) == 1
    assert "kubectl create namespace ganggate-system" in warnings[0].getMessage()
    assert "does not exist" in elector.not_leading_reason()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stopped_leader_exits_0_and_hands_the_lease_over_before_it_could_expire(tmp_path, sig):
    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        first = await Proc.start(env.sim.kubeconfig)
        second = None
        try:
            async def held_by(proc):
                lease = await read_lease(env)
                return lease if lease and f"-{proc.proc.pid}-" in (lease.spec.holder_identity or "") else None

            await wait_for(lambda: held_by(first), timeout=30, what="the first controller leads")
            second = await Proc.start(env.sim.kubeconfig)
            await create_pods(env.core, gang("before", 2))
            await wait_for(lambda: bound(env, "before", 2), timeout=60, what="gang released by the first")
            old = await read_lease(env)
            assert await first.stop(sig) == 0, first.err
            assert "Traceback" not in first.err, first.err
            assert "gave up lease" in first.err and "is handing over leadership" in first.err
            assert "lost leadership" not in first.err  # a hand-over on SIGTERM is not a loss
            new = await wait_for(lambda: held_by(second), timeout=60, what="the second controller leads")
            assert new.spec.lease_transitions == old.spec.lease_transitions + 1
            # Acquired before the old lease could have expired (the lease's own timestamps).
            assert new.spec.acquire_time.timestamp() < (
                old.spec.renew_time.timestamp() + old.spec.lease_duration_seconds)
            await create_pods(env.core, gang("after", 2))
            await wait_for(lambda: bound(env, "after", 2), timeout=60, what="gang released by the second")
        finally:
            await first.stop()
            if second is not None:
                assert await second.stop() == 0, second.err
        await env.check()


async def test_a_clean_stop_finishes_the_release_being_applied_and_starts_no_other(tmp_path):
    """stop() during a release's patches: the whole gang is still released; then run() returns."""
    from tests.controller_support import is_gated

    async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
        controller, patches = await env.start_controller(shutdown_grace_seconds=60.0)
        applying, proceed = asyncio.Event(), asyncio.Event()

        async def hold_the_first_patch(_key):
            applying.set()
            await proceed.wait()

        controller.releaser.before_apply = hold_the_first_patch
        await create_pods(env.core, gang("inflight", 3))
        await wait_for(lambda: _true(applying.is_set()), what="the release is being applied")
        controller.stop()
        await create_pods(env.core, gang("late", 2))  # complete while stopping: never released
        proceed.set()
        task = next(t for c, t, _ in env.controllers if c is controller)
        await task  # returns, does not raise
        pods = await env.pods("default")
        assert all(not is_gated(p) for p in pods if p["metadata"]["name"].startswith("inflight-"))
        assert all(is_gated(p) for p in pods if p["metadata"]["name"].startswith("late-"))
        assert sum(patches.applied.values()) == 3


async def test_a_stopping_releaser_validates_but_applies_nothing(tmp_path):
    from ganggate.controller.release.patches import Releaser, ReleaseRequest
    from tests.controller_support import is_gated

    async with e2e_cluster(tmp_path, nodes=1, gpus_per_node=8) as env:
        created = await create_pods(env.core, gang("g", 2))
        releaser = Releaser(env.core)
        releaser.may_apply = lambda: False
        pods = {f"default/{p['metadata']['name']}": p for p in created}
        outcome = await releaser.release(ReleaseRequest(
            decision_id="d", time="2027-01-01T00:00:00Z", gang="default/g", pod_count=2,
            placement={k: "node-0" for k in pods}, pods=pods, hostnames={"node-0": "node-0"}))
        assert outcome.validation_failed and not outcome.released
        assert all(is_gated(p) for p in await env.pods("default"))
