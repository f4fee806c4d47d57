"""kubesim's own pod annotations: how long its kubelet runs a pod's containers and how they fail."""

RUN_SECONDS_ANNOTATION = "kubesim.io/run-seconds"
FAIL_AFTER_ANNOTATION = "kubesim.io/fail-after-seconds"
FAIL_REASON_ANNOTATION = "kubesim.io/fail-reason"
FAIL_EXIT_CODE_ANNOTATION = "kubesim.io/fail-exit-code"
