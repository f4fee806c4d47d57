"""Which gang goes first and what it may take: round order (ordering), the starvation hold-back
(holdback) and whether a hold brings the gang's start closer (holdgain),
room a pending pod may take first (contention), what happens after admission (lifecycle; a released member
whose room other pods took: planloss), preemption
and the room it reserves (preemption, reservation), disruption budgets (budgets), the DisruptionTarget
condition set before a delete and whether a Job's podFailurePolicy ignores it (disruption), and the
count-only baseline (baseline). Imports the layers below it: fit, state, placement.
"""
