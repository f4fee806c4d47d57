"""The state the controller keeps, fed by watch events: one pod (pods), the gangs they form (gangs),
members lost (losses), the whole cluster's nodes, use and promises (cluster), what a round returns
(outcome), and snapshots read from kubectl output (snapshot). Imports only core.fit.
"""
