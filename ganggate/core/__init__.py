"""The decision core: pure, typed functions and data, no I/O.

Lowest first (each module imports only those above it in this list):
  resources   quantities, a pod's effective request, fitting, GPU amounts
  gpushare    GPU sharing per card: a node's cards, their use, the annotations, card policies
  gpushare_fgd FGD: the card (or node) that least increases the expected GPU fragmentation
  nodematch   which nodes a pod may use (selector, affinity, taints, readiness, cordon)
  pods        PodInfo: one pod as the controller sees it
  gangs       Gang: the pods of one gang and the state they add up to
  budgets     which PodDisruptionBudgets cover a pod (as evictions see them), and a gang
  losses      MemberLoss: a released gang member that stopped being one, and why
  tallies     what a round reads of every node and gang (gauges, deadlines), kept by the events
  cluster     ClusterState: nodes, their use, gangs and promises, fed by watch events
  outcome     Decision, Waiting, Unfit: what a round returns
  capacity    Capacity: the nodes' free capacity as a round uses it up, indexed for best fit
  explain     the messages a user reads: why a gang does not fit, what it waits for
  domains     topology domains from node labels, and each one's free GPUs as a round goes
  topology    a gang in the fewest, narrowest domains; its later pods beside its first
  packing     plan_gang: place one gang's pods, or say why not
  gpushare_round the cards of a round's placements, their annotations, the observed workload
  lifecycle   after admission: room of terminating pods, what a member loss means, timeouts
  contention  keep a gang out of room a pending pod may bind into first
  ordering    priority/age order of a round, and the hold-back for a starving gang
  reservation room a preemptor holds while its victims leave (read from its pods)
  preemption  which whole lower-priority gangs a waiting gang may evict to fit
  baseline    the count-only policy and the checks the planner is measured against
  planner     decide(): one round over the cluster; re-exports the public names
  incremental IncrementalRounds: a round that re-plans only the gangs whose inputs changed
  snapshot    reading node/pod snapshots (kubectl -o json/yaml) and making test objects
The async shell in `ganggate.controller` feeds it events and acts on its decisions.
"""
