"""The gate controller's async shell: watch, decide (with `ganggate.core`), release, report.

Directly here: `config` (`ControllerConfig`, the settings, plain data) and `cli` (the command
line of `ganggate controller` and `ganggate status`). The rest, by concern:

  round/        the Controller and its round: informers in, `decide()` off the loop, timers
  release/      a decision carried out: the room promised, the gates removed, the watch's echo
  lifecycle/    a released gang's life: member loss, restarts, bind timeouts, drains, budgets,
                preemption
  autoscaling/  room asked of the cluster autoscaler: ProvisioningRequests or placeholder pods
  reporting/    what the running controller tells: Events, owner Events, metrics, the waiting
                report, bypassed and excess pods, the topology levels on its Lease
  status/       the read-only commands: `ganggate status` (its tables and outputs) and
                `ganggate plan`

`ganggate.controller.round.loop` holds `Controller`, `ganggate.controller.config` its `ControllerConfig`.
"""
