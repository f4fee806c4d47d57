"""kubesim's stand-ins for the other control-plane processes: the default scheduler, the kubelet
and kube-controller-manager's Job, garbage collector, node lifecycle and disruption controllers.

Each is an HTTP client of the API server. `Components` runs them as tasks on the current event
loop (the Simulator's default); `python -m ganggate.sim.components URL ...` runs them in a
process of their own, as kube-scheduler and kube-controller-manager run beside kube-apiserver
(cmd/kube-scheduler, cmd/kube-controller-manager): the API server's loop then does only the
API's work. The process prints `ready` once the stand-ins have listed what they watch, and
stops on SIGTERM or when its parent is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from typing import Any

from ganggate.sim.client.informers import SharedInformers
from ganggate.sim.componentbase.featuregate import FeatureGates, parse

log = logging.getLogger("ganggate.sim.components")

READY_LINE = b"ready\n"


class Components:
    """The stand-ins started as tasks on this event loop, by class name."""

    def __init__(self) -> None:
        self.by_name: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self.shared: SharedInformers | None = None

    def start(self, url: str, *, scheduler: bool, kubelet: bool, controllers: bool,
              kubelet_start_seconds: float = 0.0, clock: Any = None, autoscaler: dict[str, Any] | None = None,
              feature_gates: FeatureGates | None = None, scheduler_feature_gates: FeatureGates | None = None,
              dra: bool = False) -> None:
        # feature_gates: kube-controller-manager's and the kubelet's; scheduler_feature_gates:
        # kube-scheduler's (the cluster's, unless set apart: ganggate/sim/componentbase/featuregate.py).
        self.feature_gates = feature_gates or FeatureGates()
        self.scheduler_feature_gates = scheduler_feature_gates or self.feature_gates
        if scheduler:
            self._start("ganggate.sim.scheduler.scheduler", "Scheduler", url, feature_gates=self.scheduler_feature_gates)
        if kubelet:
            self._start("ganggate.sim.kubelet.kubelet", "Kubelet", url, start_seconds=kubelet_start_seconds, clock=clock)
        if controllers:
            # kube-controller-manager's job, garbagecollector, nodelifecycle and disruption
            # controllers, sharing one watch per collection as its controllers share informers.
            self.shared = SharedInformers(url)
            self._start("ganggate.sim.controllers.job", "JobController", url, shared=self.shared, clock=clock)
            self._start("ganggate.sim.controllers.garbagecollector", "GarbageCollector", url, shared=self.shared)
            self._start("ganggate.sim.controllers.nodelifecycle", "NodeLifecycleController", url, clock=clock, shared=self.shared)
            self._start("ganggate.sim.controllers.disruption", "DisruptionController", url, shared=self.shared)
            self._start("ganggate.sim.controllers.resourceclaim", "ResourceClaimController", url, shared=self.shared)
        if dra:
            # NVIDIA's GPU DRA driver: its kubelet plugin on every node and the chart's DeviceClass
            self._start("ganggate.sim.kubelet.dradriver", "GpuDraDriver", url)
        if autoscaler:
            # cluster-autoscaler, a process of its own beside the control plane in a real cluster
            self._start("ganggate.sim.autoscaler.autoscaler", "Autoscaler", url, clock=clock, **autoscaler)

    def _start(self, module_name: str, class_name: str, url: str, **kwargs: Any) -> None:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            log.warning("%s is not installed; running without it", module_name)
            return
        component = getattr(module, class_name)(url, **kwargs)
        self.by_name[class_name] = component
        self._tasks.append(asyncio.create_task(component.run(), name=f"kubesim-{class_name.lower()}"))

    async def wait_ready(self) -> None:
        """Wait until the stand-ins that say when they are ready have listed what they watch.

        So a fault injected or an object created right after start is seen by them as a change,
        not consumed by (or raced with) their first list.
        """
        for component, task in zip(self.by_name.values(), self._tasks, strict=True):
            ready = getattr(component, "ready", None)
            if isinstance(ready, asyncio.Event):
                waiter = asyncio.ensure_future(ready.wait())
                await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.shared is not None:
            await self.shared.stop()


def process_arguments(*, scheduler: bool, kubelet: bool, controllers: bool, kubelet_start_seconds: float,
                      time_scale: float, feature_gates: FeatureGates | None = None,
                      scheduler_feature_gates: FeatureGates | None = None, dra: bool = False) -> list[str]:
    """The command-line flags of `python -m ganggate.sim.components` for these stand-ins."""
    flags = [f"--kubelet-start-seconds={kubelet_start_seconds}", f"--time-scale={time_scale}",
             f"--feature-gates={(feature_gates or FeatureGates()).flag()}",
             f"--scheduler-feature-gates={(scheduler_feature_gates or feature_gates or FeatureGates()).flag()}",
             f"--scheduler-emulated-version={(scheduler_feature_gates or feature_gates or FeatureGates()).version}"]
    flags += [] if scheduler else ["--no-scheduler"]
    flags += [] if kubelet else ["--no-kubelet"]
    flags += [] if controllers else ["--no-controllers"]
    flags += ["--dra"] if dra else []
    return flags


async def _stop_when_orphaned(stop: asyncio.Event) -> None:
    """Stop once the API server's process is gone (killed without the chance to stop us)."""
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    stop.set()


async def _run_process(args: argparse.Namespace) -> None:
    from ganggate.sim.clock import WallClock

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.create_task(_stop_when_orphaned(stop))
    components = Components()
    components.start(args.url, scheduler=not args.no_scheduler, kubelet=not args.no_kubelet,
                     controllers=not args.no_controllers, kubelet_start_seconds=args.kubelet_start_seconds,
                     clock=WallClock(args.time_scale), feature_gates=parse(args.feature_gates),
                     scheduler_feature_gates=parse(args.scheduler_feature_gates, args.scheduler_emulated_version),
                     dra=args.dra)
    try:
        await components.wait_ready()
        sys.stdout.buffer.write(READY_LINE)
        sys.stdout.flush()
        await stop.wait()
    finally:
        await components.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kubesim's scheduler, kubelet and controllers against an API server URL",
                                     allow_abbrev=False)
    parser.add_argument("url")
    parser.add_argument("--no-scheduler", action="store_true")
    parser.add_argument("--no-kubelet", action="store_true")
    parser.add_argument("--no-controllers", action="store_true")
    parser.add_argument("--kubelet-start-seconds", type=float, default=0.0)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--feature-gates", default="")
    parser.add_argument("--scheduler-feature-gates", default="")
    parser.add_argument("--dra", action="store_true")
    parser.add_argument("--scheduler-emulated-version", default="1.35")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_run_process(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
