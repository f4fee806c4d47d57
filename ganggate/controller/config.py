"""`ControllerConfig`: how the controller decides and behaves, checked before it starts; plain
data, so the command line and the drivers (local, replay) build one without the async shell."""

from __future__ import annotations

from dataclasses import dataclass

from ganggate.core.fit.gpushare import DEFAULT_POLICY, CardPolicy, WholeGpuPolicy
from ganggate.core.policy.provisioning import CLASSES as PROVISIONING_CLASSES


def parse_topology_levels(text: str) -> tuple[str, ...]:
    """`--topology-levels a,b,c` as a checked tuple (ValueError says what is wrong)."""
    levels = tuple(level.strip() for level in text.split(",") if level.strip())
    check_topology_levels(levels)
    return levels


def check_topology_levels(levels: tuple[str, ...]) -> None:
    """Each level a node label key, none twice."""
    from ganggate.contract import is_label_key

    for level in levels:
        if not is_label_key(level):
            raise ValueError(f"topology_levels: {level!r} is not a node label key")
    if len(set(levels)) != len(levels):
        raise ValueError("topology_levels: a level is listed twice")


#: The card policies for GPU sharing (docs/gpu-sharing.md): "fgd" is engineer B's
#: fragmentation-aware policy (core.gpushare_fgd), the others core.gpushare's.
CARD_POLICIES = ("best-fit", "random", "fgd")
#: The default --starvation-blind-seconds: a hold on nodes whose pods have no deadline idles
#: its room until they end, so it comes late (docs/controller.md, "The starvation guard").
BLIND_SECONDS = 6 * 3600.0


def whole_gpu_policy_named(name: str) -> WholeGpuPolicy | None:
    """The policy placing whole-GPU pods on nodes with cards, and pods asking no GPU that only
    nodes with cards hold (called with 0 cards): FGD's (as in the paper) for "fgd", else None
    (ganggate's best fit)."""
    if name == "fgd":
        from ganggate.core.placement.gpushare_fgd import fgd_policy

        return fgd_policy.whole_node
    return None


def card_policy_named(name: str) -> CardPolicy:
    """The card policy called `name` (a fresh seeded generator for "random")."""
    from ganggate.core.fit.gpushare import best_fit, random_fit

    if name == "best-fit":
        return best_fit
    if name == "random":
        return random_fit(0)
    if name == "fgd":
        from ganggate.core.placement.gpushare_fgd import fgd_policy

        return fgd_policy
    raise ValueError(f"card_policy must be one of {', '.join(CARD_POLICIES)}, not {name!r}")


NODE_LOST_HELP = (
    "restart a gang whole once one of its released members is on a node whose Ready condition has been "
    "False or Unknown for longer than SECONDS (off by default: Kubernetes' taint manager then evicts the "
    "pods after their not-ready/unreachable tolerationSeconds, 300 s unless set, and the loss is acted on "
    "then). Trade-off: a node that is only cut off from the API server still runs its pods, which ganggate "
    "cannot stop; the restarted gang then runs beside the old members until the node comes back or is "
    "removed (two copies of a worker writing the same checkpoints), and the old pods keep their GPUs "
    "counted. Set it only when the node's workloads are fenced (powered off, or the network partition "
    "also isolates them from their peers and storage), and well above the node-monitor grace period (40 s)")


@dataclass
class ControllerConfig:
    """How the controller decides and behaves; see docs/controller.md."""

    policy: str = "plan"  # "plan" | "count"
    placement: str = "pinned"  # "pinned" | "free"
    # Pinned releases: set each member's status.nominatedNodeName to its planned node before
    # the gate goes, so the default scheduler holds that room against pods of no higher
    # priority (controller.release.patches, docs/controller.md "Released gangs that cannot bind").
    nominate: bool = True
    #: Once nominated, how long a release waits at most for the watch to show the nominations
    #: (and for pods that could take the plan's room to be tried) before checking its plan.
    confirm_seconds: float = 2.0
    on_bind_timeout: str = "member-loss"  # "member-loss" | "wait" | "recreate"
    bind_timeout_seconds: float = 120.0
    starvation_seconds: float = 300.0
    #: After this long, room is held back even where pods have no deadline (core.ordering).
    starvation_blind_seconds: float = BLIND_SECONDS
    topology_levels: tuple[str, ...] = ()  # node label keys, widest first (core.topology)
    scheduler_names: tuple[str, ...] = ("default-scheduler",)
    max_pod_num: int = 10000
    max_in_flight: int = 32
    leader_election: bool = True
    lease_name: str = "ganggate-controller"
    lease_namespace: str = "ganggate-system"
    lease_duration_seconds: float = 15.0
    renew_seconds: float = 5.0
    identity: str | None = None
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"  # where the metrics port listens
    debounce_seconds: float = 0.05  # at most one round per this long (the first after a quiet spell at once)
    planning: str = "thread"  # "thread": decide() off the event loop (controller.round.offloop) | "loop": on it
    rounds: str = "incremental"  # "incremental": re-plan only what changed (core.incremental) | "full"
    # Optional additions beyond the shared API:
    tick_seconds: float = 1.0  # a round at least this often (bind timeouts, starvation)
    event_rate: float = 50.0  # Events per second at most (burst 4x)
    shutdown_grace_seconds: float = 10.0  # on stop(), how long releases being applied may take
    bypass_settle_seconds: float = 2.0  # a gang that bypassed the gate is reported once unchanged this long
    incomplete_settle_seconds: float = 2.0  # an incomplete gang's GangWaiting, once its pods stop arriving this long
    on_member_loss: str = "restart"  # "restart" | "none" (ganggate.controller.lifecycle.memberloss)
    on_node_drain: str = "restart"  # "restart" | "wait": gangs on cordoned nodes (ganggate.core.policy.drain)
    protect_running_gangs: bool = True  # a PodDisruptionBudget per released gang (controller.lifecycle.protection)
    preemption: str = "gang"  # "gang" | "off" (controller.lifecycle.preemptor)
    preempt_bare_pods: bool = False  # pods without an owning controller may be preempted
    preempt_ordinary_pods: bool = False  # bound pods of no gang may be preempted
    preemption_timeout_seconds: float = 300.0  # how long freed room stays reserved for a preemptor
    card_policy: str = DEFAULT_POLICY  # GPU sharing: which card a pod asking aliyun.com/gpu-mem gets (CARD_POLICIES)
    autoscaling: str = "off"  # "off" | "provisioning-request" | "placeholders" (controller.autoscaling)
    provisioning_class: str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"  # core.policy.provisioning.CLASSES
    # A gang with a member on a node not Ready this long is restarted whole (None: off, the
    # taint manager's eviction decides); see NODE_LOST_HELP for the trade-off.
    node_lost_after_seconds: float | None = None
    # PodGroup gangs (ganggate.podgroups, controller.round.podgroups): who admits them, and whether the
    # scheduler gang-schedules them itself
    podgroups: str = "auto"  # "auto" | "gate" | "create"
    native_gang_scheduling: bool = False

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        choices = {"policy": ("plan", "count"), "placement": ("pinned", "free"),
                   "on_bind_timeout": ("member-loss", "wait", "recreate"),
                   "on_member_loss": ("restart", "none"), "on_node_drain": ("restart", "wait"),
                   "preemption": ("gang", "off"),
                   "planning": ("thread", "loop"), "rounds": ("incremental", "full"),
                   "card_policy": CARD_POLICIES, "autoscaling": ("off", "provisioning-request", "placeholders"),
                   "provisioning_class": PROVISIONING_CLASSES, "podgroups": ("auto", "gate", "create")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        for name in ("bind_timeout_seconds", "starvation_seconds", "starvation_blind_seconds",
                     "lease_duration_seconds", "renew_seconds",
                     "shutdown_grace_seconds", "preemption_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.node_lost_after_seconds is not None and not self.node_lost_after_seconds > 0:
            raise ValueError("node_lost_after_seconds must be positive")
        if not self.confirm_seconds >= 0:
            raise ValueError("confirm_seconds must be zero or more")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        check_topology_levels(self.topology_levels)
        if not self.scheduler_names:
            raise ValueError("at least one scheduler name is needed")
