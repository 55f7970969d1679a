"""The fleet's durable event stream: what an ingress accepted, in JetStream, one subject per work item.

``publish(item, key, data)`` returns only once JetStream acknowledged the message (it is stored, on disk with the
default file storage): that is when an ingress may answer its provider. The message carries the provider object's
dedupe key as ``Nats-Msg-Id``, so a second publish of the same key inside the duplicate window stores nothing
(``Published.duplicate``). Subjects are ``loop.events.<item key>``: JetStream keeps each subject's messages in
order, so one work item's events are read in the order they were accepted.

``Reader`` is a durable pull consumer over a filter (one item's subject, or all of them): it hands out messages in
order and a message it was not told was handled (``ack``) comes back after ``ack_wait`` — at least once, the
dedupe keys making it exactly once downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from the_loop.fleet.connection import Nats, open_stream, stored

STREAM = "LOOP_EVENTS"
PREFIX = "loop.events"


def subject(item_key: str) -> str:
    """The subject of one work item's events (``item_key``: its slug, which is a valid subject token)."""
    return f"{PREFIX}.{item_key}"


@dataclass(frozen=True)
class Published:
    sequence: int
    duplicate: bool


@dataclass(frozen=True)
class Message:
    """One event read back: its subject, the dedupe key it was published with, its bytes, and how to settle it."""

    subject: str
    key: str
    data: bytes
    raw: Any

    def ack(self, nats: Nats) -> None:
        nats.run(self.raw.ack())


class EventStream:
    """The stream over one connection, created when missing (``duplicate_window`` seconds of dedupe)."""

    def __init__(self, nats: Nats, *, duplicate_window: float = 120.0) -> None:
        self.nats = nats
        open_stream(nats, STREAM, PREFIX, duplicate_window)

    def publish(self, item_key: str, key: str, data: bytes) -> Published:
        """Store one accepted event; raises :class:`FleetError` when JetStream did not acknowledge it."""
        ack = stored(self.nats, subject(item_key), key, data)
        return Published(int(ack.seq), bool(ack.duplicate))

    def reader(self, durable: str, item_key: str = "", *, ack_wait: float = 30.0) -> Reader:
        """A durable consumer named ``durable`` over one item's events (``item_key``) or all of them."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(
            durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait, deliver_policy=DeliverPolicy.ALL
        )
        filtered = subject(item_key) if item_key else f"{PREFIX}.>"
        pull = self.nats.run(
            self.nats.jetstream.pull_subscribe(filtered, durable=durable, stream=STREAM, config=config)
        )
        return Reader(self.nats, pull)


class Reader:
    def __init__(self, nats: Nats, pull: Any) -> None:
        self.nats = nats
        self.pull = pull

    def fetch(self, batch: int = 100, timeout: float = 1.0) -> list[Message]:
        """Up to ``batch`` messages in order; [] when none came within ``timeout``."""
        import nats.errors

        try:
            raws = self.nats.run(self.pull.fetch(batch, timeout=timeout), timeout=timeout + self.nats.timeout)
        except nats.errors.TimeoutError:
            return []
        return [Message(m.subject, (m.headers or {}).get("Nats-Msg-Id", ""), m.data, m) for m in raws]
