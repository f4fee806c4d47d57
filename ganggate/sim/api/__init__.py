"""The names kubesim's parts agree on, as k8s.io/api keeps them: well-known labels and annotations
of the kinds (batch), and kubesim's own annotations that tell its kubelet how a pod behaves. Pure
constants; every part of kubesim may use them.
"""
