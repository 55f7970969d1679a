"""Who owns a work item in a fleet: a lease in a JetStream key-value bucket.

A lease is the key of the work item (its slug) holding ``{"worker", "epoch", "at"}``:

- **acquire** creates it only when absent (``create``: the store refuses a second one), so two workers racing for an
  item never both get it; its ``epoch`` is the revision it was created at;
- **renew** rewrites it only if it is still the revision its holder last saw (compare-and-set on ``last``), keeping
  the epoch. A holder that was cut off while the lease expired and another worker took the item finds a different
  revision, so its renewal fails: it has lost the item and must act on nothing of it;
- it **expires** ``seconds`` after its last write (the bucket's ``ttl``), so a dead worker's items become free;
- **fencing**: every command names the epoch it was issued under; a worker acts only after a successful renewal of a
  lease with that epoch (:meth:`Leases.fenced`), so a command from an earlier ownership is refused.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from the_loop.fleet.connection import Nats, open_bucket

BUCKET = "loop-leases"


@dataclass(frozen=True)
class Lease:
    """One ownership: the item's key, its holder, the epoch it was created at and its current revision."""

    key: str
    worker: str
    epoch: int
    revision: int


class Leases:
    """The lease bucket over one connection; ``seconds`` is how long a lease lives without a renewal."""

    def __init__(self, nats: Nats, seconds: float, bucket: str = BUCKET) -> None:
        self.nats = nats
        self.seconds = seconds
        self.kv = open_bucket(nats, bucket, seconds)

    def acquire(self, key: str, worker: str) -> Lease | None:
        """The lease on ``key`` for ``worker``, or None when another holds it."""
        try:
            revision = self.nats.run(self.kv.create(key, _value(worker, 0)))
        except Exception as exc:
            if _wrong_last(exc):
                return None
            raise
        # The epoch is the creating revision (written as 0 here: a reader takes the revision; renewals write it).
        return Lease(key, worker, revision, revision)

    def holder(self, key: str) -> Lease | None:
        """Who holds ``key`` now (None: nobody)."""
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            entry = self.nats.run(self.kv.get(key))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        value = _parsed(entry.value)
        if value is None:
            return None
        return Lease(key, str(value["worker"]), int(value["epoch"]) or int(entry.revision), int(entry.revision))

    def renew(self, lease: Lease) -> Lease | None:
        """``lease`` written again with its epoch, if it is still the revision its holder last saw; None when lost."""
        try:
            revision = self.nats.run(self.kv.update(lease.key, _value(lease.worker, lease.epoch), last=lease.revision))
        except Exception as exc:
            if _wrong_last(exc):
                return None
            raise
        return Lease(lease.key, lease.worker, lease.epoch, revision)

    def fenced(self, lease: Lease, epoch: int) -> Lease | None:
        """Before acting on a command issued under ``epoch``: the renewed lease when it is still that ownership,
        else None (the command is from an ownership that ended, or the lease was lost)."""
        if lease.epoch != epoch:
            return None
        return self.renew(lease)

    def release(self, lease: Lease) -> bool:
        """Give ``lease`` up (only if it is still the revision its holder saw), so another may take it at once."""
        if lease.revision <= 0:  # 0 would mean "whatever is there" to the store
            return False
        try:
            return bool(self.nats.run(self.kv.delete(lease.key, last=lease.revision)))
        except Exception as exc:
            if _wrong_last(exc):
                return False
            raise


WRONG_LAST_SEQUENCE = 10071  # JetStream's error code for a compare-and-set that found another revision


def _wrong_last(exc: Exception) -> bool:
    """Whether ``exc`` is the store refusing a write because the key is at another revision (nats-py raises its own
    error for some calls and the bare API error for others)."""
    from nats.js.errors import KeyWrongLastSequenceError

    return isinstance(exc, KeyWrongLastSequenceError) or getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE


def _value(worker: str, epoch: int) -> bytes:
    return json.dumps({"worker": worker, "epoch": epoch, "at": time.time()}).encode()


def _parsed(data: bytes | None) -> dict[str, Any] | None:
    try:
        value = json.loads(data or b"")
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("worker"), str) else None


class Held:
    """A lease its holder renews from more than one thread (its heartbeat, and the item's commands before each
    act): one renewal at a time, each from the revision the last one wrote. ``lease`` None: lost, for good."""

    def __init__(self, leases: Leases, lease: Lease) -> None:
        self.leases = leases
        self.lease: Lease | None = lease
        self._lock = threading.Lock()

    def renew(self) -> Lease | None:
        """The lease written again; when its entry expired meanwhile (NATS was away longer than the lease) and
        nobody took the item, it is taken again under a new epoch. None once another holds it."""
        with self._lock:
            if self.lease is not None:
                renewed = self.leases.renew(self.lease)
                if renewed is None and self.leases.holder(self.lease.key) is None:
                    renewed = self.leases.acquire(self.lease.key, self.lease.worker)
                self.lease = renewed
            return self.lease

    def release(self) -> None:
        with self._lock:
            if self.lease is not None:
                self.leases.release(self.lease)
                self.lease = None
