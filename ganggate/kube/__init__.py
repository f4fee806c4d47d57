"""Plumbing every component shares to talk to the Kubernetes API.

API client construction (`client`), raw JSON calls with retries and backoff (`calls`) and leader
election on a Lease (`leader`).
"""
