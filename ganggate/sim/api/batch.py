"""Well-known labels and annotations of batch/v1 Jobs (k8s.io/api/batch/v1/types.go)."""

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"  # ControllerUidLabel
JOB_NAME = "batch.kubernetes.io/job-name"  # JobNameLabel
LEGACY_CONTROLLER_UID = "controller-uid"  # LegacyControllerUidLabel
LEGACY_JOB_NAME = "job-name"  # LegacyJobNameLabel
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # JobCompletionIndexAnnotation
