"""The durable inbox: what every ingress accepted, on disk before the provider hears back.

A webhook route, a poll source or a channel listener calls :meth:`Inbox.put` with the provider object's dedupe key
(decision 6) and a JSON object, and acknowledges the provider only after ``put`` returned: the entry is then in
``local/inbox/`` as its own file, fsync'd, renamed into place and the directory fsync'd. Routing and dispatch happen
later, off the request path, in one :class:`~the_loop.inbox.worker.InboxWorker` per state root.

Layout (all under ``local/inbox/``, never tracked):

- ``<time_ns>-<pid>-<digest>.json`` — one pending entry: ``key``, ``acceptedAt``, ``attempts``, ``nextAttemptAt``,
  ``lastError`` and the ``entry`` itself. Names sort in arrival order across processes; ``digest`` is a hash of the
  key, so a key needs no escaping.
- ``completed.jsonl`` — the last ``routing.dedupCacheSize`` settled keys, appended one line each and compacted to
  the newest ones when it reaches twice that; ``put`` refuses a key found here or pending.
- ``abandoned/`` — entries that failed ``max_attempts`` times, with their last error (``dispatch.abandoned``).
- ``<name>.corrupt-<timestamp>`` — an entry file that did not parse, moved aside (``inbox.quarantined``).

Crash safety: an entry is settled by recording its key as completed and only then deleting its file, so a crash at
any point leaves it either pending (handled again: at-least-once, at most once more per crash) or completed (an
entry found pending with a completed key finishes its settle and is never handed out again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from the_loop import events
from the_loop.inbox.completed import CompletedKeys
from the_loop.state import StateError, StateLayout, atomic_write_bytes, locked, move_aside, read_regular

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["Inbox", "InboxEntry", "key_digest"]

COMPLETED_FILE = "completed.jsonl"
_ENTRY_NAME = re.compile(r"^\d{20}-\d{7}-([0-9a-f]{32})\.json$")


_ARRIVED: dict[str, threading.Event] = {}
_ARRIVED_LOCK = threading.Lock()


DeliveryStatus = Literal["inflight", "done", "failed", "unknown"]


def key_digest(key: str) -> str:
    """The file-name-safe form of a dedupe key (128 bits of SHA-256)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _dumps(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class InboxEntry:
    """One pending entry as read from its file. ``record`` is the whole file, so a rewrite keeps unknown keys."""

    name: str
    key: str
    data: dict[str, Any]
    attempts: int
    next_attempt_at: float
    record: dict[str, Any] = field(repr=False)
    # Set once handled: what was done (``delivered``, or a drop reason such as ``session-paused``), and the
    # inbox's forget_mark() then — a key forgotten after that is not remembered by the settle.
    outcome: str = ""
    forget_mark: int = 1 << 62

    @property
    def digest(self) -> str:
        return self.name.rsplit("-", 1)[1].removesuffix(".json")

    @property
    def work_items(self) -> tuple[str, ...]:
        """The work items the entry names (``work_item`` or ``work_items``); empty before routing."""
        many = self.data.get("work_items")
        items = [self.data.get("work_item"), *(many if isinstance(many, list | tuple) else ())]
        return tuple(dict.fromkeys(item for item in items if isinstance(item, str) and item))

    @property
    def delivery_id(self) -> str:
        value = self.data.get("delivery_id")
        return value if isinstance(value, str) and value else self.key


@dataclass
class _Put:
    tmp: Path
    name: str
    digest: str
    done: bool = False
    accepted: bool = False
    error: BaseException | None = None


class Inbox:
    """The inbox of one state root. ``put`` is thread-safe and safe across processes; ``pending``, ``settle`` and
    ``release`` belong to the one worker (see :class:`~the_loop.inbox.worker.InboxWorker`)."""

    def __init__(
        self,
        layout: StateLayout,
        *,
        completed_limit: int = 1024,
        max_attempts: int = 5,
        backoff_base: float = 2.0,
        backoff_cap: float = 300.0,
        clock: Callable[[], float] = time.time,
        publish: Callable[[str, dict[str, Any]], bool | None] | None = None,
    ) -> None:
        self.layout = layout
        # A fleet's gateway: publish to JetStream first (None back: NATS away, stored here instead).
        self.publish = publish
        self.dir = layout.inbox_dir
        self.abandoned_dir = self.dir / "abandoned"
        self.completed_path = self.dir / COMPLETED_FILE
        self.completed_limit = completed_limit
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.clock = clock
        self.commits = 0  # group commits so far: one directory fsync each, shared by every put in the batch
        self._lock_path = layout.lock_for("inbox")
        self._names_lock = threading.Lock()
        self._last_ns = 0
        self._group = threading.Condition()
        self._queue: list[_Put] = []
        self._leading = False
        # Shared by every Inbox of this directory in the process: the receiver's route and the router's worker
        # hold separate instances, and a put must wake the worker at once, not at its next poll.
        with _ARRIVED_LOCK:
            self._arrived = _ARRIVED.setdefault(str(self.dir), threading.Event())
        self._dirs_ready = False
        # The completed-key view: the newest lines of completed.jsonl, re-read only when the file changed.
        self._completed = CompletedKeys(self.completed_path, completed_limit)

    @classmethod
    def for_config(cls, config: LoadedConfig) -> Inbox:
        """The inbox an ingress writes to: this one, or on a fleet's gateway the one that publishes to JetStream."""
        publish = None
        if config.core.fleet.enabled and config.core.instance.role != "worker":
            from the_loop.fleet.intake import publisher

            publish = publisher(config.core.fleet)
        return cls(config.state, completed_limit=config.core.routing.dedup_cache_size, publish=publish)

    # ------------------------------------------------------------------------------------------------ put

    def put(self, key: str, entry: dict[str, Any]) -> bool:
        """Store ``entry`` durably under ``key`` and return True, or return False (writing nothing) when ``key``
        is already pending or among the recently completed keys. Raises :class:`StateError` when it cannot be
        stored: the caller must then not acknowledge the provider."""
        if not isinstance(key, str) or not key:
            raise ValueError("an inbox key is a non-empty string")
        if not isinstance(entry, dict):
            raise TypeError("an inbox entry is a JSON object (dict)")
        digest = key_digest(key)
        if digest in self._completed.digests():  # the cheap answer for a late duplicate; the commit checks again
            return False
        if self.publish is not None:
            if self.delivery_status(key) == "inflight":
                return False  # the fallback holds it already
            published = self.publish(key, entry)
            if published is not None:
                return published
        name = self._next_name(digest)
        data = _dumps({"key": key, "acceptedAt": events.timestamp(self.clock()), "attempts": 0, "entry": entry})
        item = _Put(self.dir / f".{name}.tmp", name, digest)
        self._write_synced(item.tmp, data)
        return self._commit(item)

    def _next_name(self, digest: str) -> str:
        # Wall-clock nanoseconds order entries across processes; forced monotonic within this one.
        with self._names_lock:
            self._last_ns = max(time.time_ns(), self._last_ns + 1)
            return f"{self._last_ns:020d}-{os.getpid():07d}-{digest}.json"

    def _ensure_dirs(self) -> None:
        if not self._dirs_ready:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                _sync_dir(self.dir.parent)
            except OSError as exc:
                raise StateError(f"cannot create {self.dir}: {exc.strerror or exc}") from None
            self._dirs_ready = True

    def _write_synced(self, path: Path, data: bytes) -> None:
        self._ensure_dirs()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise StateError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            if isinstance(exc, OSError):
                raise StateError(f"cannot write {path}: {exc.strerror or exc}") from None
            raise
        os.close(fd)

    def _commit(self, item: _Put) -> bool:
        """Group commit: the first waiting put leads and commits everything queued so far under one directory
        fsync; the others wait for it, and one of them leads the next batch."""
        with self._group:
            self._queue.append(item)
            while not item.done:
                if not self._leading:
                    self._leading = True
                    batch, self._queue = self._queue, []
                    break
                self._group.wait()
            else:
                return self._result(item)
        try:
            self._apply(batch)
        except BaseException as exc:
            for each in batch:
                if not each.done:
                    each.error, each.done = exc, True
                    with contextlib.suppress(OSError):
                        os.unlink(each.tmp)
        finally:
            with self._group:
                self._leading = False
                self._group.notify_all()
        return self._result(item)

    @staticmethod
    def _result(item: _Put) -> bool:
        if item.error is not None:
            message = item.error.strerror if isinstance(item.error, OSError) else str(item.error)
            raise StateError(f"cannot store an inbox entry: {message}") from item.error
        return item.accepted

    def _apply(self, batch: list[_Put]) -> None:
        # The check and the renames hold the inbox lock, so two processes cannot both accept one key.
        with locked(self._lock_path):
            pending = {m[1] for name in os.listdir(self.dir) if (m := _ENTRY_NAME.match(name))}
            completed = self._completed.digests()
            for item in batch:
                if item.digest in pending or item.digest in completed:
                    os.unlink(item.tmp)
                    continue
                os.rename(item.tmp, self.dir / item.name)
                pending.add(item.digest)
                item.accepted = True
            if any(item.accepted for item in batch):
                _sync_dir(self.dir)
                self._arrived.set()
            self.commits += 1
        for item in batch:
            item.done = True

    def wait(self, timeout: float) -> None:
        """Sleep until a put in this process commits something, or ``timeout`` seconds pass."""
        self._arrived.wait(timeout)
        self._arrived.clear()

    def delivery_status(self, key: str, rounds: int = 1) -> DeliveryStatus:
        """What became of the entry put under ``key`` (``rounds`` times so far) — how a poller tells a delivery
        from a failure without reading the sessions.

        ``inflight``: still pending (routing or retrying) — wait, spend nothing. ``done``: settled by the router
        (delivered, spawned, or deliberately dropped: paused, awaiting start, a control command executed).
        ``failed``: the latest round was abandoned after every attempt — a real failure, the one a retry budget
        counts. ``unknown``: none of those (settled so long ago that the completed keys no longer hold it).
        """
        digest = key_digest(key)
        suffix = f"-{digest}.json"
        try:
            if any(name.endswith(suffix) for name in os.listdir(self.dir)):
                return "inflight"
        except FileNotFoundError:
            return "unknown"
        if digest in self._completed.digests():
            return "done"
        try:
            abandoned = sum(1 for name in os.listdir(self.abandoned_dir) if name.endswith(suffix))
        except FileNotFoundError:
            abandoned = 0
        return "failed" if abandoned >= max(rounds, 1) else "unknown"

    # ------------------------------------------------------------------------------------------ completed

    def settled_outcome(self, key: str) -> str:
        """What the handler did with the entry settled under ``key`` (``delivered``, ``spawned``, or the reason it
        was dropped on purpose: ``session-paused``, ``awaiting-start`` …); "" when not among the remembered keys."""
        return self._completed.outcome_of(key_digest(key))

    def forget(self, *keys: str) -> None:
        """Let ``keys`` be taken again: a settled key normally refuses its object for good, but some objects
        legitimately recur (an item closed, reopened, then closed again has the same close key). Appends one
        tombstone per key to completed.jsonl — also for a key handled but not yet settled (a worker settles a lane
        at its end), which :meth:`settle` then leaves unremembered."""
        lines = b"".join(_dumps({"digest": key_digest(key), "key": key, "forgotten": True}) + b"\n" for key in keys)
        if not lines:
            return
        self.dir.mkdir(parents=True, exist_ok=True)  # a reopen can come before anything was ever put
        with locked(self._lock_path):
            self._append_completed(lines)

    def forget_mark(self) -> int:
        """How many tombstones this inbox has read: taken when an entry was handled, a later settle compares it."""
        return self._completed.forget_mark()

    def _append_completed(self, lines: bytes) -> None:
        """Append ``lines`` to completed.jsonl with one fsync (the caller holds the inbox lock), then read them."""
        created = not self.completed_path.exists()
        fd = os.open(self.completed_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _sync_dir(self.dir)
        self._completed.digests()

    def _remember(self, entries: tuple[InboxEntry, ...]) -> None:
        """Append the entries' keys to completed.jsonl with one fsync; compact it to the newest keys when long."""
        stamp = events.timestamp(self.clock())
        lines = b"".join(
            _dumps(
                {"digest": entry.digest, "key": entry.key, "settledAt": stamp}
                | ({"outcome": entry.outcome} if entry.outcome else {})
            )
            + b"\n"
            for entry in entries
        )
        self._append_completed(lines)
        if self._completed.lines >= 2 * self.completed_limit:
            atomic_write_bytes(self.completed_path, self._completed.newest())

    # ----------------------------------------------------------------------------------------- the worker's

    def pending(self, now: float | None = None, urgent: Callable[[InboxEntry], bool] | None = None) -> list[InboxEntry]:
        """The entries due at ``now``, in arrival order. An entry still backing off is skipped, and so is every
        later entry naming one of its work items, so a work item's events keep their order (decision 2) — except
        an ``urgent`` one (an interrupt), which is due all the same."""
        now = self.clock() if now is None else now
        try:
            names = sorted(name for name in os.listdir(self.dir) if _ENTRY_NAME.match(name))
        except FileNotFoundError:
            return []
        completed = self._completed.digests()
        due: list[InboxEntry] = []
        held: set[str] = set()
        for name in names:
            entry = self._load(name)
            if entry is None:
                continue
            if entry.digest in completed:  # a settle that crashed after recording the key: finish it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.dir / name)
                continue
            if entry.attempts >= self.max_attempts:  # an abandon that crashed before the move: finish it
                self._abandon(entry)
                continue
            waiting = held.intersection(entry.work_items) and not (urgent is not None and urgent(entry))
            if entry.next_attempt_at > now or waiting:
                held.update(entry.work_items)
                continue
            due.append(entry)
        return due

    def settle(self, *entries: InboxEntry) -> None:
        """Done with ``entries`` (handled, or deliberately not): record their keys as completed — one fsync for all
        — then delete their files."""
        if not entries:
            return
        with locked(self._lock_path):
            self._completed.digests()  # tombstones written while these were handled
            kept = tuple(e for e in entries if self._completed.forgotten_at(e.digest) <= e.forget_mark)
            if kept:
                self._remember(kept)
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.dir / entry.name)

    def release(self, entry: InboxEntry, error: str, now: float | None = None) -> InboxEntry | None:
        """A failed attempt: count it and back off (``backoff_base`` doubling, capped at ``backoff_cap``), or after
        ``max_attempts`` move the entry to ``abandoned/`` and emit ``dispatch.abandoned``. Returns the updated
        entry, or None when it was abandoned."""
        now = self.clock() if now is None else now
        attempts = entry.attempts + 1
        record = {**entry.record, "attempts": attempts, "lastError": error[:2000]}
        delay = min(self.backoff_base * 2 ** (attempts - 1), self.backoff_cap)
        if attempts < self.max_attempts:
            record["nextAttemptAt"] = events.timestamp(now + delay)
        atomic_write_bytes(self.dir / entry.name, _dumps(record))
        updated = InboxEntry(entry.name, entry.key, entry.data, attempts, now + delay, record)
        if attempts >= self.max_attempts:
            self._abandon(updated)
            return None
        return updated

    def defer(self, entry: InboxEntry, seconds: float, why: str, now: float | None = None) -> InboxEntry:
        """Not now, and no failure: try again in ``seconds`` without counting an attempt (a spawn waiting in line
        for a free slot). Its work item's later entries wait behind it, as behind a retry."""
        now = self.clock() if now is None else now
        record = {**entry.record, "nextAttemptAt": events.timestamp(now + seconds), "deferred": why[:200]}
        atomic_write_bytes(self.dir / entry.name, _dumps(record))
        return InboxEntry(entry.name, entry.key, entry.data, entry.attempts, now + seconds, record)

    def _abandon(self, entry: InboxEntry) -> None:
        self.abandoned_dir.mkdir(exist_ok=True)
        os.replace(self.dir / entry.name, self.abandoned_dir / entry.name)
        _sync_dir(self.abandoned_dir)
        _sync_dir(self.dir)
        events.emit(
            "dispatch.abandoned",
            level="error",
            delivery_id=entry.delivery_id,
            work_item=entry.work_items[0] if entry.work_items else None,
            attempts=entry.attempts,
            error=str(entry.record.get("lastError", "")),
        )

    def _load(self, name: str) -> InboxEntry | None:
        """The entry in ``name``; None when it is gone, or did not parse and was moved aside."""
        path = self.dir / name
        raw = read_regular(path)  # a link, FIFO or device there is refused like a file that does not parse
        if raw is None:
            return None
        try:
            record = json.loads(raw) if isinstance(raw, bytes) else None
        except (ValueError, UnicodeDecodeError):
            record = None
        problem = _invalid(record, name)
        if problem:
            self._quarantine(path, problem)
            return None
        assert isinstance(record, dict)
        next_at = events.parse_instant(str(record.get("nextAttemptAt", ""))) or 0.0
        return InboxEntry(name, record["key"], record["entry"], record.get("attempts", 0), next_at, record)

    def _quarantine(self, path: Path, problem: str) -> None:
        target = move_aside(path)
        events.emit("inbox.quarantined", level="warning", path=str(path), moved_to=str(target), error=problem)
        print(f"warning: inbox entry {path} {problem}; moved it aside to {target.name}", file=sys.stderr)

    def sweep_temporaries(self, max_age: float = 3600.0) -> int:
        """Delete put temporaries a crash left behind (never an accepted entry: ``put`` had not returned)."""
        removed = 0
        cutoff = time.time() - max_age
        with contextlib.suppress(FileNotFoundError):
            for item in os.scandir(self.dir):
                if item.name.startswith(".") and item.name.endswith(".tmp") and item.stat().st_mtime < cutoff:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(item.path)
                        removed += 1
        return removed


def _invalid(record: Any, name: str) -> str:
    """Why a parsed entry file is not an entry ("" when it is one)."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    if not isinstance(record.get("key"), str) or key_digest(record["key"]) != name.rsplit("-", 1)[1][:32]:
        return "has no key matching its name"
    if not isinstance(record.get("entry"), dict):
        return "has no entry object"
    attempts = record.get("attempts", 0)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0:
        return "has an invalid attempts count"
    return ""
