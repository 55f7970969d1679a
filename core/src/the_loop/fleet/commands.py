"""What the gateway asks of the worker that owns a work item, and how that worker acts on it exactly once.

Commands are a JetStream stream with one subject per work item (``loop.commands.<item key>``), each message carrying
the dedupe key of the event it came from (``Nats-Msg-Id``) and the epoch of the lease it was issued under
(``Loop-Epoch``). Every item has one durable consumer (``item-<item key>``) that its *current owner* reads: a
command the owner did not acknowledge — it died, or was cut off — is handed to whoever reads that consumer next, the
item's new owner, in order. Nothing is lost.

:func:`handle` is the owner's side. First the lease is renewed: when the renewal fails the item was lost, and nothing
is done (this is the fencing: a worker back from a partition acts on none of the items it lost). Then the fleet-wide
ledger of delivered keys (:class:`Delivered`) makes sure no event is pasted twice, even by two owners one after the
other (a crash between a paste and its record delivers it once more, as on one machine).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from the_loop.fleet.connection import Nats, open_bucket, open_stream, stored
from the_loop.fleet.leases import Held

STREAM = "LOOP_COMMANDS"
PREFIX = "loop.commands"
ASSIGN_STREAM = "LOOP_ASSIGN"  # the gateway's word to a worker that an item is now its own (one subject each)
ASSIGN_PREFIX = "loop.assign"
DELIVERED = "loop-delivered"
EPOCH = "Loop-Epoch"


@dataclass(frozen=True)
class Command:
    """One command as its owner reads it: the event's dedupe key, the epoch it was issued under, its bytes."""

    key: str
    epoch: int
    data: bytes
    raw: Any


class CommandQueue:
    """The command stream over one connection, created when missing."""

    def __init__(
        self, nats: Nats, *, duplicate_window: float = 120.0, stream: str = STREAM, prefix: str = PREFIX
    ) -> None:
        self.nats = nats
        self.stream = stream
        self.prefix = prefix
        open_stream(nats, stream, prefix, duplicate_window)

    def send(self, item_key: str, epoch: int, key: str, data: bytes) -> None:
        """Queue a command for ``item_key``'s owner; raises :class:`FleetError` unless JetStream stored it."""
        stored(self.nats, f"{self.prefix}.{item_key}", key, data, **{EPOCH: str(epoch)})

    def owned(self, item_key: str, *, ack_wait: float = 30.0) -> Owned:
        """Read ``item_key``'s commands as its owner (the item's one durable consumer)."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        durable = f"item-{item_key}"
        config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ack_wait,
            deliver_policy=DeliverPolicy.ALL,
            max_ack_pending=1,  # one at a time: a work item's commands are acted on in order
        )
        subject = f"{self.prefix}.{item_key}"
        jetstream = self.nats.jetstream
        pull = self.nats.run(jetstream.pull_subscribe(subject, durable=durable, stream=self.stream, config=config))
        return Owned(self.nats, pull)


class Owned:
    """One item's commands, read by its owner."""

    def __init__(self, nats: Nats, pull: Any) -> None:
        self.nats = nats
        self.pull = pull

    def next(self, timeout: float = 1.0) -> Command | None:
        """The item's next command not yet acknowledged, or None when none came within ``timeout``."""
        import nats.errors

        try:
            [raw] = self.nats.run(self.pull.fetch(1, timeout=timeout), timeout=timeout + self.nats.timeout)
        except nats.errors.TimeoutError:
            return None
        headers = raw.headers or {}
        return Command(headers.get("Nats-Msg-Id", ""), int(headers.get(EPOCH) or 0), raw.data, raw)

    def ack(self, command: Command) -> None:
        self.nats.run(command.raw.ack())

    def later(self, command: Command, seconds: float) -> None:
        """Not now (a spawn waiting for a free slot, a retry): hand it out again after ``seconds``, still first."""
        self.nats.run(command.raw.nak(delay=seconds))

    def attempts(self, command: Command) -> int:
        """How many times the command was handed out (1 the first time)."""
        return int(command.raw.metadata.num_delivered)

    def close(self) -> None:
        """Stop reading (the durable consumer stays, for the next owner)."""
        try:
            self.nats.run(self.pull.unsubscribe())
        except Exception:  # the connection is gone: nothing to unsubscribe from
            pass


class Delivered:
    """The fleet-wide ledger of events already delivered into a session, kept ``seconds`` (a week by default)."""

    def __init__(self, nats: Nats, seconds: float = 7 * 24 * 3600) -> None:
        self.nats = nats
        self.kv = open_bucket(nats, DELIVERED, seconds)

    def seen(self, key: str) -> bool:
        """Whether some worker delivered ``key`` already."""
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            self.nats.run(self.kv.get(_name(key)))
        except (KeyNotFoundError, KeyDeletedError):
            return False
        return True

    def record(self, key: str, worker: str) -> None:
        """``key`` was delivered by ``worker`` (right after the paste: a crash in between delivers it once more)."""
        self.nats.run(self.kv.put(_name(key), worker.encode()))


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:40]  # a dedupe key as a key-value name


Handled = Literal["done", "duplicate", "later", "lost"]


def handle(
    held: Held, delivered: Delivered, owned: Owned, command: Command, act: Callable[[Command], bool | None]
) -> Handled:
    """Act on ``command`` as the owner holding ``held``: what was done.

    Lost (the renewal failed): nothing is done and nothing acknowledged — the command waits for the item's new
    owner. A key delivered before (by this worker or the one before it) is acknowledged without acting. ``act``
    delivers the command; the key is recorded right after it, then the command is acknowledged — unless ``act``
    returned False (not now: it handed the command back to be read again, ``later``)."""
    renewed = held.renew()
    if renewed is None or command.epoch > renewed.epoch:
        return "lost"
    if delivered.seen(command.key):
        owned.ack(command)
        return "duplicate"
    if act(command) is False:
        return "later"
    delivered.record(command.key, renewed.worker)
    owned.ack(command)
    return "done"
