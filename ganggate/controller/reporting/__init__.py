"""What the running controller tells users and operators.

`events` sends core/v1 Events (rate-limited, aggregated) and chooses which pods hear a waiting
gang's reason; `waitreport` reports the waiting gangs of a round; `ownerevents` tells a gang's
owning Job; `metrics` holds the Prometheus metrics and serves /metrics, /healthz and /readyz;
`bypass` and `excess` report pods that bypassed the gate or are beyond group-pod-num (never
touching them); `topology_view` records the topology levels on the Lease and names domains.
"""
