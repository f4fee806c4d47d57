"""Server-side Table printers for the kinds discovery.py's TABLES does not cover: events, leases,
mutating webhook configurations.

kube-apiserver prints every built-in kind with a handler of
pkg/printers/internalversion/printers.go (AddHandlers); kubectl shows the columns of priority 0 and,
with `-o wide`, the others. Both event APIs (v1 events and events.k8s.io/v1 events) are converted
to the internal api.Event and printed by the same printEvent, so an events.k8s.io event is read
here through the fields it maps to (pkg/apis/events/v1/conversion.go: regarding -> involvedObject,
note -> message, deprecatedFirstTimestamp/deprecatedLastTimestamp/deprecatedCount/deprecatedSource).
Ages are rendered here for every printer (discovery.py's too), as
k8s.io/apimachinery/pkg/util/duration.HumanDuration renders them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Cells = Callable[[dict[str, Any]], list[Any]]
_NAME_DOC = "Name must be unique within a namespace."
_AGE_DOC = "CreationTimestamp is a timestamp representing the server time when this object was created."


def human_duration(seconds: float) -> str:
    """duration.HumanDuration."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // (24 * 365)}y"


def age(obj: dict[str, Any]) -> str:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - created).total_seconds())


def _column(name: str, description: str, *, type_: str = "string", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


def _parse_time(text: str | None) -> datetime | None:
    """A metav1.Time (`2006-01-02T15:04:05Z`) or MicroTime (`...05.000000Z`); None when unset or unreadable."""
    if not text:
        return None
    for pattern in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _since(text: str | None) -> str:
    """translateTimestampSince: `<unknown>` for an unset time, else duration.HumanDuration of its age."""
    when = _parse_time(text)
    if when is None:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - when).total_seconds())


def _event_fields(event: dict[str, Any]) -> dict[str, Any]:
    """The internal api.Event's printed fields, from a v1 or an events.k8s.io/v1 event."""
    if "regarding" in event or "note" in event or "deprecatedCount" in event:
        source = event.get("deprecatedSource") or {}
        return {
            "object": event.get("regarding") or {}, "message": event.get("note") or "",
            "first": event.get("deprecatedFirstTimestamp"), "last": event.get("deprecatedLastTimestamp"),
            "count": int(event.get("deprecatedCount") or 0), "source": source,
        }
    return {
        "object": event.get("involvedObject") or {}, "message": event.get("message") or "",
        "first": event.get("firstTimestamp"), "last": event.get("lastTimestamp"),
        "count": int(event.get("count") or 0), "source": event.get("source") or {},
    }


def _event_source(source: dict[str, Any], controller: str, instance: str) -> str:
    """formatEventSource: component (or reportingController), then `, host` (or reportingInstance)."""
    component = source.get("component") or controller
    host = source.get("host") or instance
    if not component:
        return ""
    return f"{component}, {host}" if host else component


def event_cells(event: dict[str, Any]) -> list[Any]:
    """printEvent, wide: LAST SEEN, TYPE, REASON, OBJECT, SUBOBJECT, SOURCE, MESSAGE, FIRST SEEN, COUNT, NAME.

    The first seen time falls back to eventTime, the last seen to the first, a series' last observed
    time and count win, and a count of 0 prints 1 (singleton events of the new API have none).
    """
    fields = _event_fields(event)
    first = _since(fields["first"]) if fields["first"] else _since(event.get("eventTime"))
    last = _since(fields["last"]) if fields["last"] else first
    count = fields["count"]
    series = event.get("series")
    if series:
        last = _since(series.get("lastObservedTime"))
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    involved = fields["object"]
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = _event_source(fields["source"], event.get("reportingController") or "", event.get("reportingInstance") or "")
    return [last, event.get("type") or "", event.get("reason") or "", target, involved.get("fieldPath") or "",
            source, fields["message"].strip(), first, count, (event.get("metadata") or {}).get("name", "")]


def lease_cells(lease: dict[str, Any]) -> list[Any]:
    """printLease: NAME, HOLDER, AGE."""
    return [(lease.get("metadata") or {}).get("name", ""), (lease.get("spec") or {}).get("holderIdentity") or "", age(lease)]


def webhook_configuration_cells(config: dict[str, Any]) -> list[Any]:
    """printMutatingWebhook: NAME, WEBHOOKS (how many), AGE."""
    return [(config.get("metadata") or {}).get("name", ""), len(config.get("webhooks") or []), age(config)]


MORE_TABLES: dict[str, tuple[list[dict[str, Any]], Cells]] = {
    "Event": ([
        _column("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
        _column("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
        _column("Reason", "This should be a short, machine understandable string that gives the reason for the transition "
                "into the object's current status."),
        _column("Object", "The object that this event is about."),
        _column("Subobject", "If referring to a piece of an object instead of an entire object, this string should contain a "
                "valid JSON/Go field access statement.", priority=1),
        _column("Source", "The component reporting this event. Should be a short machine understandable string.", priority=1),
        _column("Message", "A human-readable description of the status of this operation."),
        _column("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", priority=1),
        _column("Count", "The number of times this event has occurred.", priority=1),
        _column("Name", _NAME_DOC, fmt="name", priority=1),
    ], event_cells),
    "Lease": ([
        _column("Name", _NAME_DOC, fmt="name"),
        _column("Holder", "holderIdentity contains the identity of the holder of a current lease."),
        _column("Age", _AGE_DOC),
    ], lease_cells),
    "MutatingWebhookConfiguration": ([
        _column("Name", _NAME_DOC, fmt="name"),
        _column("Webhooks", "Webhooks indicates the number of webhooks registered in this configuration", type_="integer"),
        _column("Age", _AGE_DOC),
    ], webhook_configuration_cells),
}


def _resource_tables() -> None:
    from ganggate.sim.apiserver import printers_resource

    MORE_TABLES.update(printers_resource.tables(_column, _NAME_DOC, _AGE_DOC, age))


_resource_tables()
