"""The state the controller keeps, fed by watch events: one pod (pods), the gangs they form (gangs),
members lost (losses), the sums and deadlines a round reads, kept by the events (tallies), the
whole cluster's nodes, use and promises (cluster), what a round returns
(outcome), and snapshots read from kubectl output (snapshot). Imports only core.fit.
"""
