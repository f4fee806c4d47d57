"""kubesim's kube-apiserver: storage and watch (k8s.io/apiserver/pkg/storage), request handling,
patch and field validation (pkg/endpoints/handlers), discovery and OpenAPI, and the per-kind
registry (pkg/registry) below it. The other components reach it only over HTTP.
"""
