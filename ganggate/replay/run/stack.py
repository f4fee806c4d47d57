"""The whole system in one process on loopback: kubesim, and for a gated mode the webhook
(over HTTPS with certificates made on the spot, registered by a MutatingWebhookConfiguration
with a URL clientConfig and caBundle, as in deploy/) and the gate controller. The start-up steps
are ganggate.local.parts, shared with `ganggate sim up`.

Modes: `none` (the default scheduler alone), `count` (webhook + controller with the seed's
count-only check), `ganggate` (webhook + controller with the planner, its placement pinned: best
fit), `free` (the planner admits, the scheduler places: `--placement=free`) and `topology` (the
planner pinned, with the scenario's topology levels: `--topology-levels`).

The controller runs on the replay's clock: `SimulatedClock` adapts kubesim's ManualClock to the
controller's Clock (ganggate.kube.clock), so its bind timeouts, gang timeouts and starvation
hold-back happen in simulated time, and a deadline it sleeps for is a wake-up the replay jumps to.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ganggate.local.parts import (
    make_certificates,
    register_webhook,
    start_controller,
    start_tls_webhook,
    stop_task,
    webhook_configuration,
)

MODES = ("none", "count", "ganggate", "free", "topology", "provreq", "placeholders")


class SimulatedClock:
    """The controller's Clock over kubesim's ManualClock: now() is the Unix time kubesim stamps
    on objects (ManualClock.epoch), and sleep_until a sleeper on the manual clock (woken when
    the replay advances it)."""

    def __init__(self, manual: Any) -> None:
        self.manual = manual

    def now(self) -> float:
        return float(self.manual.epoch())

    async def sleep_until(self, when: float) -> None:
        await self.manual.sleep_until(self.manual.now() + (when - self.now()))
POLICY = {"count": "count", "ganggate": "plan", "free": "plan", "topology": "plan", "provreq": "plan", "placeholders": "plan"}
#: Modes that ask an autoscaler for room (replays with --node-group): controller.autoscaling.provisioner and
#: controller.autoscaling.placeholders.
AUTOSCALING = {"provreq": "provisioning-request", "placeholders": "placeholders"}
PLACEMENT = {"free": "free"}  # every other gated mode pins (the controller's default)


@dataclass
class Stack:
    """A running simulator plus, for a gated mode, webhook and controller. Use `start_stack`."""

    mode: str
    sim: Any
    api: Any = None
    webhook: Any = None
    controller: Any = None
    controller_task: asyncio.Task | None = None
    topology_levels: tuple[str, ...] = ()  # for mode `topology`: the node label keys, widest first
    clock: Any = None  # the controller's (ganggate.kube.clock.Clock); None: the wall clock
    settings: dict[str, Any] = field(default_factory=dict)  # ControllerConfig overrides (a test's)
    workdir: tempfile.TemporaryDirectory | None = None

    async def close(self) -> None:
        await stop_task(self.controller_task)
        if self.webhook is not None:
            await self.webhook.close()
        if self.api is not None:
            await self.api.close()
        if self.workdir is not None:
            self.workdir.cleanup()

    def controller_failed(self) -> BaseException | None:
        """The controller's exception if it stopped by itself (a replay must not go on)."""
        task = self.controller_task
        if task is not None and task.done() and not task.cancelled():
            return task.exception() or RuntimeError("the gate controller stopped")
        return None


def topology_settings(mode: str, levels: tuple[str, ...]) -> dict[str, Any]:
    """The ControllerConfig settings of topology-aware placement: only mode `topology` has any."""
    if mode != "topology":
        return {}
    if not levels:
        raise ValueError("mode topology needs topology levels (a cluster built with --topology)")
    return {"topology_levels": tuple(levels)}


async def start_gate(stack: Stack, *, debounce: float | None = None, match_conditions: bool = True) -> None:
    """Start the webhook (HTTPS, port 0), register it, and start the controller (no leader election)."""
    from ganggate.controller.config import ControllerConfig

    stack.workdir = tempfile.TemporaryDirectory(prefix="ganggate-demo-")
    certs = make_certificates(Path(stack.workdir.name))
    stack.webhook = await start_tls_webhook(certs)
    await register_webhook(stack.api, webhook_configuration(stack.webhook.url, certs.ca_file.read_bytes(),
                                                            match_conditions=match_conditions))
    debouncing: dict[str, Any] = {} if debounce is None else {"debounce_seconds": debounce}
    autoscaling: dict[str, Any] = {"autoscaling": AUTOSCALING[stack.mode]} if stack.mode in AUTOSCALING else {}
    config = ControllerConfig(policy=POLICY[stack.mode], leader_election=False, metrics_port=None,
                              placement=PLACEMENT.get(stack.mode, "pinned"), **debouncing,
                              **topology_settings(stack.mode, stack.topology_levels), **autoscaling, **stack.settings)
    stack.controller, stack.controller_task = start_controller(stack.api, config, clock=stack.clock,
                                                               name=f"ganggate-controller-{stack.mode}")
