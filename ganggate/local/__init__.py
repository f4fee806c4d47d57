"""A whole ganggate cluster on loopback in one process: kubesim, webhook and gate controller."""
