"""A released gang's life, the shell (the core's `policy` decides, these act).

`memberloss` (`GangLifecycle`, built by `attach_lifecycle`) judges lost members and gangs that
wait too long, and restarts a gang whole; `restart` deletes a member as Kubernetes' own
disruptions do (DisruptionTarget first); `owners` tells a gang going away (its Job deleted) from
one losing members; `bindtimeout` handles released pods that do not bind in time; `drain` moves
gangs off cordoned nodes; `protection` keeps a PodDisruptionBudget per released gang;
`preemptor` carries out a preemption the core planned for a waiting gang: reserve, evict whole.
"""
