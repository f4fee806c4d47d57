"""Room asked of the cluster autoscaler for a complete gang that fits nowhere now.

`provisioner` (`--autoscaling provisioning-request`) creates a ProvisioningRequest per gang
(the gang is released whole once its nodes join); `placeholders` (`--autoscaling placeholders`) creates
low-priority placeholder pods the autoscaler adds nodes for, then releases the gang in their place.
"""
