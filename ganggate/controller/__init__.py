"""The gate controller's async shell: watch, decide (with `ganggate.core`), release, report.

`ganggate.controller.loop` holds `Controller`, `ganggate.controller.config` its `ControllerConfig`;
the other modules each do one kind of I/O (informers, releases, bind timeouts, events, metrics,
status, the command line).
"""
