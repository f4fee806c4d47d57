"""kubesim's kubelet for every node, as pkg/kubelet: the pod lifecycle (kubelet.py), the statuses it
writes (status/status_manager.go) and the gpushare device plugin's admission (deviceplugin). An HTTP
client of the API server.
"""
