"""What kubesim's components share with k8s.io/client-go: list+watch reflectors and shared
informers over HTTP (tools/cache), and the rate-limited work queue (util/workqueue). The scheduler,
the controllers and the kubelet reach the API server only through this, as the real ones do.
"""
