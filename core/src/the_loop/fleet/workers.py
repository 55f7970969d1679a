"""Which workers are alive and how much room each has: a heartbeat per worker in a JetStream key-value bucket.

Each worker writes ``{"capacity", "live", "freeMemoryMiB", "at"}`` under its name every heartbeat; the bucket's
``ttl`` (the lease time) drops a worker that stopped writing, so a silent worker is absent, never stale. New work
goes to the live worker with the most free capacity (:func:`choose`), or to the one a start comment names
(``instance:<name>``, the reference's addressed scope).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from the_loop.fleet.connection import Nats, bucket_values, open_bucket

BUCKET = "loop-workers"


@dataclass(frozen=True)
class Worker:
    """One live worker as its last heartbeat described it."""

    name: str
    capacity: int
    live: int
    free_memory_mib: int | None = None
    at: float = 0.0
    host: str = ""  # what `ssh -t` dials to reach its tmux
    scope: str = "open"  # instance.scope.mode: open | addressed | locked
    tmux: tuple[str, ...] = ()  # its tmux argv prefix (a private socket, when it runs one)

    @property
    def free(self) -> int:
        return max(0, self.capacity - self.live)


class Workers:
    """The heartbeat bucket over one connection; a heartbeat older than ``seconds`` is gone."""

    def __init__(self, nats: Nats, seconds: float, bucket: str = BUCKET) -> None:
        self.nats = nats
        self.kv = open_bucket(nats, bucket, seconds)

    def beat(self, worker: Worker) -> None:
        value = {
            "capacity": worker.capacity,
            "live": worker.live,
            "freeMemoryMiB": worker.free_memory_mib,
            "host": worker.host,
            "scope": worker.scope,
            "tmux": list(worker.tmux),
        }
        self.nats.run(self.kv.put(worker.name, json.dumps({**value, "at": time.time()}).encode()))

    def live(self) -> list[Worker]:
        """Every worker whose heartbeat has not expired, by name."""
        found = (_parsed(name, value) for name, value in bucket_values(self.nats, self.kv))
        return [worker for worker in found if worker is not None]

    def get(self, name: str) -> Worker | None:
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            entry = self.nats.run(self.kv.get(name))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return _parsed(name, entry.value)


def choose(workers: list[Worker], addressed: str = "") -> Worker | None:
    """The worker new work goes to: the one ``addressed`` names (None when it is not live or its scope is
    ``locked``), else the live ``open`` one with the most free capacity (most free memory, then name, breaking
    ties); None when every one is full. A worker whose scope is ``addressed`` takes only work that names it."""
    if addressed:
        return next((w for w in workers if w.name == addressed and w.scope != "locked"), None)
    room = [w for w in workers if w.free > 0 and w.scope == "open"]
    if not room:
        return None
    return min(room, key=lambda w: (-w.free, -(w.free_memory_mib or 0), w.name))


def _parsed(name: str, data: bytes | None) -> Worker | None:
    try:
        value: Any = json.loads(data or b"")
        return Worker(
            name=name,
            capacity=int(value["capacity"]),
            live=int(value["live"]),
            free_memory_mib=None if value.get("freeMemoryMiB") is None else int(value["freeMemoryMiB"]),
            at=float(value.get("at") or 0),
            host=str(value.get("host") or ""),
            scope=str(value.get("scope") or "open"),
            tmux=tuple(str(part) for part in value.get("tmux") or ()),
        )
    except (ValueError, KeyError, TypeError):
        return None  # a heartbeat nobody can read counts as none
