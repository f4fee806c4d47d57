"""What kubesim shares with k8s.io/component-helpers: a pod's effective request
(resource/helpers.go), required node affinity and taints (scheduling/corev1). Pure; the scheduler,
the kubelet and the controllers read pods with it, as the real components do.
"""
