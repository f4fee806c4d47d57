"""ProvisioningRequest names, as cluster-autoscaler's API keeps them
(cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go and
provisioningrequest/conditions/conditions.go)."""

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
KEY = "provisioningrequests.autoscaling.x-k8s.io"

# provisioningClassName values cluster-autoscaler supports
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CLASSES = (CHECK_CAPACITY, BEST_EFFORT_ATOMIC)

# the pod annotations that consume a request's capacity
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

# condition types
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"

# condition reasons and messages (conditions.go)
ACCEPTED_REASON, ACCEPTED_MSG = "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler"
CAPACITY_FOUND, CAPACITY_FOUND_MSG = "CapacityIsFound", "Capacity is found in the cluster"
CAPACITY_NOT_FOUND = "CapacityIsNotFound"
CAPACITY_PROVISIONED, CAPACITY_PROVISIONED_MSG = "CapacityIsProvisioned", "Capacity is found in the cluster"
BOOKING_EXPIRED_REASON, BOOKING_EXPIRED_MSG = "CapacityReservationTimeExpired", "Capacity reservation time is expired"
EXPIRED_REASON, EXPIRED_MSG = "Expired", "ProvisioningRequest is expired"

# checkcapacity/processor.go: defaultReservationTime and defaultExpirationTime
RESERVATION_SECONDS = 10 * 60
EXPIRATION_SECONDS = 7 * 24 * 3600

# the label kubesim's cloud provider puts on the nodes of a node group
NODE_GROUP_LABEL = "kubesim.io/node-group"
