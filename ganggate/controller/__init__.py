"""The gate controller's async shell: watch, decide (with `ganggate.core`), release, report.

`ganggate.controller.loop` holds `Controller` and `ControllerConfig`; the other modules each do one
kind of I/O (informers, releases, events, metrics, status, the command line).
"""
