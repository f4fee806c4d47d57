"""kubesim's cluster-autoscaler, laid out as k8s.io/autoscaler/cluster-autoscaler keeps it: node
groups of a cloud provider (cloudprovider/), the binpacking estimator of a scale-up
(estimator/binpacking_estimator.go), scale-up for pods the scheduler marked unschedulable
(core/scaleup), scale-down of unneeded nodes (core/scaledown), and ProvisioningRequests with the
check-capacity and best-effort-atomic-scale-up classes (provisioningrequest/). An HTTP client of
the API server, like the real one; see docs/kubesim.md for what it leaves out.
"""
