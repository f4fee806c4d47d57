"""The decision core: pure, typed functions and data, no I/O.

Four layers, lowest first; a module imports only modules of its own layer or of those above it
in this list (tests/test_layout.py checks it):
  fit         what fits where: quantities (resources), node matching (nodematch), GPU cards (gpushare)
  state       what the controller keeps: pods, gangs, losses, cluster, outcome, snapshot, letgo
  placement   where one gang goes: capacity, explain, domains, topology, packing, gpushare_fgd,
              gpushare_round; whether it ever can (feasibility: GangCannotFit)
  policy      which gang goes first and what it may take: contention, planloss, lifecycle, ordering,
              holdback, holdgain, reservation, preemption, budgets, disruption, baseline
and on top of them:
  planner     decide(): one round over the cluster; re-exports the public names
  incremental IncrementalRounds: a round that re-plans only the gangs whose inputs changed
The async shell in `ganggate.controller` feeds it events and acts on its decisions.
"""
