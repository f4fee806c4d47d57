"""Fixtures several test modules share, found by name: a module that imported them would have each
test's argument of the same name shadow the import (ruff F811)."""

pytest_plugins = [
    "tests.kubesim_support",  # sim, api, raw: an in-process kubesim and clients of it
    "tests.admission_webhook_support",  # tls_pair, webhook: a recording HTTPS admission webhook
    "tests.kubesim_jobs_support",  # running, idle: kubesim with the Job controller
]
