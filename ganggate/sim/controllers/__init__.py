"""kubesim's kube-controller-manager, one module per controller as pkg/controller keeps them: job,
garbagecollector, disruption, nodelifecycle. Each is an HTTP client of the API server with its own
work queue (client.workqueue) over shared informers (client.informers).
"""
