"""The gateway's intake in a fleet: what an ingress accepts goes to JetStream before the provider hears back.

On a fleet's gateway, ``Inbox.for_config`` gives every ingress an inbox whose ``put`` first calls
:func:`publisher`'s function: it returns once JetStream acknowledged the message (stored on the NATS servers'
disks), under the provider's dedupe key, on the subject of the event's first work item. While NATS cannot be reached
it returns None and the inbox stores the event locally, fsync'd, as on one machine (``fleet.fallback``): the
provider is still acknowledged only once the event is on a disk.

:func:`intake` moves what JetStream holds into the gateway's local inbox, the queue its router works in arrival
order, acknowledging each message only once the inbox has it: a crash in between hands it out again, and the inbox
refuses the duplicate. Entries the fallback stored wait in the same inbox, so they are routed in order with the rest
once NATS is back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from the_loop import events

INTAKE = "gateway-intake"


def publisher(fleet_section: Any) -> Callable[[str, dict[str, Any]], bool | None]:
    """``publish(key, entry)``: True once JetStream stored it, False for a duplicate it already holds, None when
    NATS could not be reached (the caller stores it locally instead)."""

    def publish(key: str, entry: dict[str, Any]) -> bool | None:
        from the_loop.fleet import shared
        from the_loop.fleet.connection import FleetError
        from the_loop.fleet.items import item_key

        event = entry.get("event") if isinstance(entry, dict) else None
        items = event.get("work_items") if isinstance(event, dict) else None
        first = items[0] if isinstance(items, list) and items and isinstance(items[0], str) else "none"
        record = {"key": key, "acceptedAt": events.timestamp(time.time()), "entry": entry}
        try:
            published = shared(fleet_section).events.publish(item_key(first), key, json.dumps(record).encode())
        except FleetError as exc:
            events.emit("fleet.fallback", level="warning", delivery_id=key, error=str(exc)[:300])
            return None
        return not published.duplicate

    return publish


def intake(inbox: Any, fleet: Callable[[], Any], should_stop: Callable[[], bool], active: Callable[[], bool]) -> None:
    """Move the event stream into ``inbox`` (a local one: its ``put`` stores) until ``should_stop()``, while
    ``active()`` (this process works the inbox). A message is acknowledged after the inbox stored it (or refused it
    as a duplicate). ``fleet()`` is the connection, asked again after a failure (NATS away at start)."""
    reader = None
    while not should_stop():
        if not active():
            time.sleep(0.2)
            continue
        try:
            connected = fleet()
            if reader is None:
                reader = connected.events.reader(INTAKE)
            messages = reader.fetch(batch=100, timeout=1.0)
        except Exception as exc:  # NATS away: the ingresses fall back, this waits for it
            events.emit("fleet.intake_failed", level="warning", error=f"{type(exc).__name__}: {exc}"[:300])
            reader = None
            time.sleep(1.0)
            continue
        for message in messages:
            try:
                record = json.loads(message.data)
                inbox.put(str(record["key"]), record["entry"])
            except (ValueError, KeyError, TypeError) as exc:
                events.emit("fleet.intake_dropped", level="error", delivery_id=message.key or None, error=str(exc))
            try:
                message.ack(connected.nats)
            except Exception:  # handed out again after ack_wait: the inbox refuses the copy
                pass
