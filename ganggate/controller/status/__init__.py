"""The read-only commands: nothing here writes to a cluster.

`ganggate status`: `tables` lists the cluster once and prints the gangs and nodes, with the
core's own reason why each gang waits; `output` gives the same as JSON or YAML and `--watch`;
`gpushare` the GPU cards' shared memory (`--gpus`); `podgroups` the PodGroups left to the
scheduler's own gang plugin; `provisioning` the ProvisioningRequests ganggate made.
`ganggate plan --snapshot`: `plan`, an offline what-if of the decision core on a snapshot.
"""
