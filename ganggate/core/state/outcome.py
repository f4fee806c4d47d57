"""What a decision round returns, as plain data: gangs to release, gangs that wait, and why
one gang does not fit. Defined below every planning module so they all can name them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ganggate.core.state.gangs import GangKey


@dataclass
class Decision:
    """Release these pods now; placement maps pod key -> planned node (None: unpinned)."""

    gang_key: GangKey
    placement: dict[str, str | None]
    reason: str
    roll_forward: bool = False
    #: The narrowest topology domain that holds the whole placement, when levels are set.
    domain: str | None = None
    #: Extra annotations per pod key, written in the release patch: for a pod given a share of
    #: one GPU card, the gpushare annotations its device plugin reads (core.gpushare).
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class Waiting:
    """A gang that stays gated this round, and the Event that says why."""

    gang_key: GangKey
    event_reason: str  # "GangWaiting" | "GangUnschedulable" | "GangCannotFit" | "GangConflict"
    message: str
    #: What the wait is about, apart from its counts ("room", "nodes", "contended", "never:label",
    #: ...): the shell logs and events a wait when this (or the reason) changes, not when a
    #: count in the message moves ("room for 1", "room for 2").
    kind: str = ""
    #: The starvation guard weighed a hold for the gang this round: how many seconds sooner it
    #: predicts the gang starts with it (core.policy.holdgain; 30 days for "not at all without"),
    #: and whether it was refused (it did not bring the start closer by the margin).
    hold_gain: float | None = None
    hold_refused: bool = False


@dataclass
class Unfit:
    """Why a gang cannot be placed now."""

    message: str
