"""Per-kind rules of the objects kubesim stores, as pkg/registry/<group>/<kind>/strategy.go and
pkg/apis/<group>/validation keep them: defaulting, create/update strategies, validation. Pure.
"""
