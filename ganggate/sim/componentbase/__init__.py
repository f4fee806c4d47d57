"""What every kubesim component shares as Kubernetes' components share k8s.io/component-base:
feature gates (k8s.io/component-base/featuregate)."""
