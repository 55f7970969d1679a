"""The gateway's intake in a fleet: what an ingress accepts goes to JetStream before the provider hears back.

:class:`PublishedInbox` is the inbox an ingress gets on a fleet's gateway (``Inbox.for_config``). ``put`` returns
once JetStream acknowledged the message (stored on the NATS servers' disks), under the provider's dedupe key, on the
subject of the event's first work item. While NATS cannot be reached it falls back to the local, fsync'd inbox
(``fleet.fallback``): the provider is still acknowledged only once the event is on a disk.

:func:`intake` moves what JetStream holds into the gateway's local inbox, the queue its router works in arrival
order, acknowledging each message only once the inbox has it: a crash in between hands it out again, and the inbox
refuses the duplicate. Entries the fallback stored wait in the same inbox, so they are routed in order with the rest
once NATS is back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.inbox import Inbox

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

INTAKE = "gateway-intake"


class PublishedInbox(Inbox):
    """An inbox whose ``put`` publishes to the fleet's event stream (the local inbox while NATS is away)."""

    def __init__(self, config: LoadedConfig) -> None:
        super().__init__(config.state, completed_limit=config.core.routing.dedup_cache_size)
        self.fleet_section = config.core.fleet

    def put(self, key: str, entry: dict[str, Any]) -> bool:
        from the_loop.fleet import shared
        from the_loop.fleet.connection import FleetError
        from the_loop.fleet.items import item_key

        if not isinstance(key, str) or not key:
            raise ValueError("an inbox key is a non-empty string")
        if self.settled_outcome(key) or self.delivery_status(key) == "inflight":
            return False  # the local inbox has it already (a late duplicate, or one the fallback stored)
        event = entry.get("event") if isinstance(entry, dict) else None
        items = event.get("work_items") if isinstance(event, dict) else None
        first = items[0] if isinstance(items, list) and items and isinstance(items[0], str) else "none"
        record = {"key": key, "acceptedAt": events.timestamp(time.time()), "entry": entry}
        try:
            published = shared(self.fleet_section).events.publish(item_key(first), key, json.dumps(record).encode())
        except FleetError as exc:
            events.emit("fleet.fallback", level="warning", delivery_id=key, error=str(exc)[:300])
            return super().put(key, entry)
        return not published.duplicate


def intake(inbox: Inbox, fleet: Callable[[], Any], should_stop: Callable[[], bool], active: Callable[[], bool]) -> None:
    """Move the event stream into ``inbox`` until ``should_stop()``, while ``active()`` (this process works the
    inbox). A message is acknowledged after the inbox stored it (or refused it as a duplicate). ``fleet()`` is the
    connection, asked again after a failure (NATS away at start)."""
    from the_loop.fleet.connection import FleetError

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
        except (FleetError, Exception) as exc:  # NATS away: the ingresses fall back, this waits for it
            events.emit("fleet.intake_failed", level="warning", error=f"{type(exc).__name__}: {exc}"[:300])
            reader = None
            time.sleep(1.0)
            continue
        for message in messages:
            try:
                record = json.loads(message.data)
                Inbox.put(inbox, str(record["key"]), record["entry"])
            except (ValueError, KeyError, TypeError) as exc:
                events.emit("fleet.intake_dropped", level="error", delivery_id=message.key or None, error=str(exc))
            try:
                message.ack(connected.nats)
            except Exception:  # handed out again after ack_wait: the inbox refuses the copy
                pass
