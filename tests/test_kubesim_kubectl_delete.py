"""`kubectl delete pod` against kubesim's graceful deletion (kubectl from tests/kubectl_support.py).

kubectl waits for the pod to be gone by default (--wait=true), returns at once with --wait=false,
and with --grace-period=0 --force deletes immediately
(https://kubernetes.io/docs/reference/kubectl/generated/kubectl_delete/). The simulator runs on a
ManualClock, so the grace period passes when the test says so.
"""

from __future__ import annotations

import asyncio

from ganggate.sim.clock import ManualClock
from tests.kubectl_support import KUBECTL
from tests.kubesim_lifecycle_support import gone, pod_where, simulator, sleeper_at
from tests.kubesim_support import eventually
from tests.test_kubesim_scheduler_support import pod_manifest


async def kubectl(sim, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(KUBECTL, "--kubeconfig", sim.kubeconfig, *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


def _watching_pod(sim, pod: dict) -> bool:
    """An open watch on this one pod, by its name (kubectl delete's wait), not one of the components'."""
    other = {**pod, "metadata": {**pod["metadata"], "name": "someone-else"}}
    return any(w.predicate is not None and w.predicate(pod) and not w.predicate(other)
               for w in sim.store.hub.watchers)


def _running(pod):
    return (pod.get("status") or {}).get("phase") == "Running"


async def test_kubectl_delete_waits_for_the_grace_period_and_the_kubelet():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("p"))
        await pod_where(api, "p", _running, "p to run")
        process = await kubectl(sim, "delete", "pod", "p")
        terminating = await pod_where(api, "p", lambda pod: pod["metadata"].get("deletionTimestamp"), "p to terminate")
        await sleeper_at(clock, 30)
        # kubectl waits by watching the pod: once its watch is open, it is waiting, not done.
        await eventually(lambda: _watching_pod(sim, terminating), timeout=60)
        assert process.returncode is None  # still waiting for the pod to go
        clock.advance_to(30)
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert out.decode().strip() == 'pod "p" deleted from default namespace'
        assert await api.pod("p") is None


async def test_kubectl_delete_without_waiting_and_forced():
    clock = ManualClock()
    async with simulator(clock, nodes=1) as (sim, api):
        await api.create_pod(pod_manifest("a"))
        await api.create_pod(pod_manifest("b"))
        await pod_where(api, "a", _running, "a to run")
        await pod_where(api, "b", _running, "b to run")
        out, err = await (await kubectl(sim, "delete", "pod", "a", "--wait=false")).communicate()
        assert out.decode().strip() == 'pod "a" deleted from default namespace'
        assert (await api.pod("a"))["metadata"]["deletionGracePeriodSeconds"] == 30  # Terminating
        process = await kubectl(sim, "delete", "pod", "b", "--grace-period=0", "--force")
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert "Immediate deletion does not wait for confirmation" in err.decode()
        assert out.decode().strip() == 'pod "b" force deleted from default namespace'
        await gone(api, "b")
