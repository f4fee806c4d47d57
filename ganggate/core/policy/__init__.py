"""Which gang goes first and what it may take: round order and the starvation hold-back (ordering),
room a pending pod may take first (contention), what happens after admission (lifecycle), preemption
and the room it reserves (preemption, reservation), disruption budgets (budgets), the DisruptionTarget
condition set before a delete and whether a Job's podFailurePolicy ignores it (disruption), and the
count-only baseline (baseline). Imports the layers below it: fit, state, placement.
"""
