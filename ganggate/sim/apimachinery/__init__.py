"""What kubesim shares with k8s.io/apimachinery: API errors (Status), quantities, label and field
selectors, semantic equality and ObjectMeta validation. Pure; every part of kubesim may use it.
"""
