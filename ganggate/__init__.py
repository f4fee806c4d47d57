"""ganggate: all-or-nothing admission of GPU jobs on Kubernetes."""

__version__ = "0.1.0"
