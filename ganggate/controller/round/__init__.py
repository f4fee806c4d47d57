"""The round: the Controller (`loop`) and what feeds it.

`loop` holds `Controller`, which builds the controller's parts and runs its rounds: informers
keep the pure `ClusterState` in step with the API server (`informer` for nodes and pods, `dra`
for DRA objects, `podgroups` for PodGroups and their pods' projection into gangs); after
events a round runs the core's `decide()`, in a worker thread with the changes that arrive
meanwhile held (`offloop`), and is also due when a deadline falls (`timers`); `collector` keeps
the picture out of the garbage collector's way while the controller runs.
"""
