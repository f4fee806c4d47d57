"""The decision core: pure, typed functions and data, no I/O.

Resource arithmetic, node matching, the controller's picture of the cluster, gang bookkeeping and
the planner. The async shell in `ganggate.controller` feeds it events and acts on its decisions.
"""
