"""Timestamps as the API server and the components write them (metav1.Time: RFC3339, UTC, whole seconds)."""

from __future__ import annotations

from datetime import UTC, datetime


def now_rfc3339(epoch: float | None = None) -> str:
    """A timestamp as the API server writes it: RFC3339 in UTC with a `Z`, whole seconds (of
    `epoch`, Unix seconds; default the real time)."""
    moment = datetime.now(UTC) if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
