"""The fleet's work items: which worker each one is assigned to, and the copy of its portable record.

- **Assignments** (bucket ``loop-items``, kept until the item ends): the work item's ref, the worker the gateway gave
  it to and the one before (after a failover). Only the gateway writes them; a worker learns of a new assignment
  from its own queue (``loop.assign.<worker>``), never by reading this bucket.
- **Portable copies** (bucket ``loop-portable``): the owner's portable record of an item (``portable/<slug>.json``,
  seed 004: what travels between machines), written after each command it acted on, so a worker taking an item
  over starts from what the last owner knew (who started it, collaborators, budget raises, choices).

Subjects and consumer names allow neither dots nor spaces, so an item's key is its ref made safe
(:func:`item_key`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from the_loop.fleet.connection import Nats, bucket_values, open_bucket

ASSIGNMENTS = "loop-items"
PORTABLE = "loop-portable"


def item_key(ref: str) -> str:
    """A work item's ref as one subject token and consumer name: ``octo/repo#12`` → ``octo_repo_12-<hash>``."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", ref)[:80]
    return f"{safe}-{hashlib.sha256(ref.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Assignment:
    work_item: str
    worker: str
    previous: str = ""  # the worker it had before a failover ("" for a first assignment)
    at: float = 0.0


class Assignments:
    def __init__(self, nats: Nats) -> None:
        self.nats = nats
        self.kv = open_bucket(nats, ASSIGNMENTS, 0)

    def get(self, work_item: str) -> Assignment | None:
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            entry = self.nats.run(self.kv.get(item_key(work_item)))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return _assignment(entry.value)

    def put(self, assignment: Assignment) -> None:
        value = {"workItem": assignment.work_item, "worker": assignment.worker, "previous": assignment.previous}
        self.nats.run(self.kv.put(item_key(assignment.work_item), json.dumps({**value, "at": time.time()}).encode()))

    def remove(self, work_item: str) -> None:
        self.nats.run(self.kv.delete(item_key(work_item)))

    def all(self) -> list[Assignment]:
        found = (_assignment(value) for _, value in bucket_values(self.nats, self.kv))
        return [assignment for assignment in found if assignment is not None]


class PortableCopies:
    def __init__(self, nats: Nats) -> None:
        self.nats = nats
        self.kv = open_bucket(nats, PORTABLE, 0)

    def put(self, work_item: str, record: bytes) -> None:
        self.nats.run(self.kv.put(item_key(work_item), record))

    def get(self, work_item: str) -> bytes | None:
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            return bytes(self.nats.run(self.kv.get(item_key(work_item))).value or b"") or None
        except (KeyNotFoundError, KeyDeletedError):
            return None


def _assignment(data: bytes | None) -> Assignment | None:
    try:
        value: Any = json.loads(data or b"")
        return Assignment(
            str(value["workItem"]), str(value["worker"]), str(value.get("previous") or ""), float(value.get("at") or 0)
        )
    except (ValueError, KeyError, TypeError):
        return None
