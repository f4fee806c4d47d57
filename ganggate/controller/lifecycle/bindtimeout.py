"""Released pods not bound within the bind timeout: an Event each, and then, by
`--on-bind-timeout`:

- `member-loss` (default): the timeout is a member loss with cause BindTimeout, handled by
  `--on-member-loss` (ganggate.controller.lifecycle.memberloss): `restart` deletes all the gang's released
  pods that have an owning controller, bound or not, so that the whole gang comes back gated
  instead of staying half-bound; `none` only reports it;
- `recreate`: deletes only the unbound pods with an owning controller (never any other pod);
- `wait`: only reports."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ganggate.controller.lifecycle.restart import delete_member
from ganggate.controller.reporting.events import EventRecorder
from ganggate.controller.reporting.metrics import Metrics
from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.losses import MemberLoss
from ganggate.kube.calls import ApiCallError

log = logging.getLogger(__name__)


class BindTimeouts:
    """Acts on the promises the state reports expired; `spawn` runs a deletion as a task the
    controller tracks (so a clean stop waits for it)."""

    def __init__(self, core: Any, state: ClusterState, events: EventRecorder, metrics: Metrics, *,
                 action: str, timeout_seconds: float,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task],
                 on_loss: Callable[[list[MemberLoss]], None] | None = None) -> None:
        self.core = core
        self.state = state
        self.events = events
        self.metrics = metrics
        self.action = action  # "member-loss" | "wait" | "recreate"
        self.on_loss = on_loss
        self.timeout_seconds = timeout_seconds
        self.spawn = spawn
        self.advice: Any = None  # controller.lifecycle.restart.JobAdvice, set by attach_lifecycle

    def handle_expired(self, now: float) -> None:
        for gang_key, pod_keys in self.state.expired_promises(now):
            gang = f"{gang_key[0]}/{gang_key[1]}"
            action = self.action
            self.metrics.bind_timeouts.labels(action=action).inc(len(pod_keys))
            losses: list[MemberLoss] = []
            for pod_key in pod_keys:
                pod = self.state.pods.get(pod_key)
                if pod is None or pod.node_name or pod.terminated:
                    continue
                secs = int(self.timeout_seconds)
                if action == "recreate" and pod.owned:
                    message = (f"released with gang {gang} but not bound within {secs}s; deleting it so its "
                               "controller recreates it")
                    self.events.emit(pod, "GangBindTimeout", message)
                    if self.advice is not None:
                        self.advice.restarting(gang, [pod])
                    self.spawn(self._delete(pod_key, pod.uid, f"ganggate: {message}"))
                elif action == "recreate":
                    self.events.emit(pod, "GangBindTimeout",
                                     f"released with gang {gang} but not bound within {secs}s; not deleted: "
                                     "it has no owning controller")
                elif action == "member-loss":
                    self.events.emit(pod, "GangBindTimeout",
                                     f"released with gang {gang} but not bound within {secs}s; a member loss "
                                     "(--on-member-loss decides)")
                    decision = pod.decision.get("id") if isinstance(pod.decision, dict) else None
                    losses.append(MemberLoss(gang_key, pod_key, pod.uid, "BindTimeout",
                                             None if decision is None else str(decision)))
                else:
                    self.events.emit(pod, "GangBindTimeout",
                                     f"released with gang {gang} but not bound within {secs}s; waiting")
            if losses and self.on_loss is not None:
                self.on_loss(losses)

    async def _delete(self, pod_key: str, uid: str, why: str) -> None:
        """DisruptionTarget, then the delete (controller.lifecycle.restart), so a Job can ignore it."""
        try:
            if await delete_member(self.core, pod_key, uid, why, metrics=self.metrics):
                log.info("deleted %s (bind timeout, policy recreate)", pod_key)
        except ApiCallError as exc:
            log.warning("deleting %s: %s", pod_key, exc)
