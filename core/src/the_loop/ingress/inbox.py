"""The durable inbox: what every ingress accepted, on disk before the provider hears back.

A webhook route, a poll source or a channel listener calls :meth:`Inbox.put` with the provider object's dedupe key
(decision 6) and a JSON object, and acknowledges the provider only after ``put`` returned: the entry is then in
``local/inbox/`` as its own file, fsync'd, renamed into place and the directory fsync'd. Routing and dispatch happen
later, off the request path, in one :class:`InboxWorker` per state root.

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
import errno
import fcntl
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from the_loop import events
from the_loop.state import StateError, StateLayout, atomic_write_bytes, locked, move_aside, read_regular

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["Inbox", "InboxEntry", "InboxWorker", "WorkerBusy", "key_digest"]

COMPLETED_FILE = "completed.jsonl"
_ENTRY_NAME = re.compile(r"^\d{20}-\d{7}-([0-9a-f]{32})\.json$")
SETTLED_STATUSES = frozenset({"delivered", "spawned", "respawned", "dropped"})


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
    ``release`` belong to the one worker (see :class:`InboxWorker`)."""

    def __init__(
        self,
        layout: StateLayout,
        *,
        completed_limit: int = 1024,
        max_attempts: int = 5,
        backoff_base: float = 2.0,
        backoff_cap: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.layout = layout
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
        self._completed_lock = threading.Lock()
        self._completed_file: tuple[int, int] | None = None  # (device, inode) of the file read so far
        self._completed_offset = 0
        self._completed_lines = 0
        self._completed_tail: deque[tuple[str, bytes]] = deque(maxlen=completed_limit)
        self._completed_set: frozenset[str] = frozenset()
        # Tombstones read so far (never reset: compaction drops them, so none is counted twice), and the count at
        # which each digest was last forgotten — so a settle can tell "forgotten after it was handled".
        self._forget_serial = 0
        self._forgotten_at: dict[str, int] = {}

    @classmethod
    def for_config(cls, config: LoadedConfig) -> Inbox:
        return cls(config.state, completed_limit=config.core.routing.dedup_cache_size)

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
        if digest in self._completed():  # the cheap answer for a late duplicate; the commit checks again
            return False
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
            completed = self._completed()
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
        if digest in self._completed():
            return "done"
        try:
            abandoned = sum(1 for name in os.listdir(self.abandoned_dir) if name.endswith(suffix))
        except FileNotFoundError:
            abandoned = 0
        return "failed" if abandoned >= max(rounds, 1) else "unknown"

    # ------------------------------------------------------------------------------------------ completed

    def _completed(self) -> frozenset[str]:
        """Digests of the newest ``completed_limit`` settled keys."""
        with self._completed_lock:
            try:  # one stat answers "nothing new" (the common case) without opening the file
                stat = os.stat(self.completed_path)
            except FileNotFoundError:
                self._reset_completed(None)
                return self._completed_set
            if (stat.st_dev, stat.st_ino) == self._completed_file and stat.st_size == self._completed_offset:
                return self._completed_set
            try:
                handle = open(self.completed_path, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                self._reset_completed(None)
                return self._completed_set
            with handle:
                stat = os.fstat(handle.fileno())
                identity = (stat.st_dev, stat.st_ino)
                if identity != self._completed_file or stat.st_size < self._completed_offset:
                    self._reset_completed(identity)  # compacted (a new file) or first read
                if stat.st_size <= self._completed_offset:
                    return self._completed_set
                handle.seek(self._completed_offset)
                chunk = handle.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being appended waits for the next read
            self._completed_offset += len(whole)
            for line in whole.splitlines(keepends=True):
                self._completed_lines += 1
                with contextlib.suppress(ValueError, UnicodeDecodeError, KeyError, TypeError):
                    record = json.loads(line)
                    digest = str(record["digest"])
                    if record.get("forgotten"):  # see forget(): the key may be taken again
                        self._forget_serial += 1
                        self._forgotten_at[digest] = self._forget_serial
                        kept = [item for item in self._completed_tail if item[0] != digest]
                        self._completed_tail.clear()
                        self._completed_tail.extend(kept)
                    else:
                        self._completed_tail.append((digest, line))
            self._completed_set = frozenset(digest for digest, _ in self._completed_tail)
            return self._completed_set

    def _reset_completed(self, identity: tuple[int, int] | None) -> None:
        self._completed_file = identity
        self._completed_offset = self._completed_lines = 0
        self._completed_tail.clear()
        self._completed_set = frozenset()

    def settled_outcome(self, key: str) -> str:
        """What the handler did with the entry settled under ``key`` (``delivered``, ``spawned``, or the reason it
        was dropped on purpose: ``session-paused``, ``awaiting-start`` …); "" when not among the remembered keys."""
        digest = key_digest(key)
        self._completed()
        for known, line in reversed(self._completed_tail):
            if known == digest:
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    return str(json.loads(line).get("outcome") or "")
        return ""

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
        self._completed()
        return self._forget_serial

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
        self._completed()

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
        if self._completed_lines >= 2 * self.completed_limit:
            atomic_write_bytes(self.completed_path, b"".join(raw for _, raw in self._completed_tail))

    # ---------------------------------------------------------------------------------------------- worker

    def pending(self, now: float | None = None) -> list[InboxEntry]:
        """The entries due at ``now``, in arrival order. An entry still backing off is skipped, and so is every
        later entry naming one of its work items, so a work item's events keep their order (decision 2)."""
        now = self.clock() if now is None else now
        try:
            names = sorted(name for name in os.listdir(self.dir) if _ENTRY_NAME.match(name))
        except FileNotFoundError:
            return []
        completed = self._completed()
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
            if entry.next_attempt_at > now or held.intersection(entry.work_items):
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
            self._completed()  # tombstones written while these were handled
            kept = tuple(e for e in entries if self._forgotten_at.get(e.digest, -1) <= e.forget_mark)
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


class WorkerBusy(Exception):
    """Another inbox worker holds ``local/locks/inbox-worker.lock``."""


class InboxWorker:
    """Hands due entries to ``handle`` in arrival order and settles or releases each by the outcome it returns
    (an :class:`~the_loop.sessions.dispatcher.Outcome` or anything with ``status``, ``will_retry`` and ``error``).

    One worker per state root: the worker holds an ``flock`` on ``local/locks/inbox-worker.lock`` while it works.
    :meth:`run` waits on standby while another worker holds it (checking ``should_stop``) and takes over when that
    one exits or dies; :meth:`run_once` raises :class:`WorkerBusy` instead of waiting.
    """

    def __init__(
        self,
        inbox: Inbox,
        handle: Callable[[InboxEntry], Any],
        clock: Callable[[], float] = time.time,
        workers: int = 1,
    ) -> None:
        self.inbox = inbox
        self.handle = handle
        self.clock = clock
        self.workers = max(1, workers)  # routing.maxConcurrentDispatches: work items handled at once
        self._lock_fd: int | None = None

    def run(self, should_stop: Callable[[], bool], interval: float = 0.1) -> bool:
        """Work until ``should_stop()``; False when it stopped before it ever held the lock."""
        while (fd := self._try_lock()) is None:
            if should_stop():
                return False
            time.sleep(interval)  # standby: another worker has this state root
        self._lock_fd = fd
        try:
            self.inbox.sweep_temporaries()
            while not should_stop():
                if self.run_once(should_stop) == 0:
                    self.inbox.wait(interval)
        finally:
            self._lock_fd = None
            os.close(fd)
        return True

    def run_once(self, should_stop: Callable[[], bool] | None = None) -> int:
        """Handle every entry due now; the number handled.

        Entries that share a work item form one lane, handled in arrival order, and a lane stops at an entry left
        pending for a retry (its later events wait behind it). Up to ``workers`` lanes run at once, so a slow spawn
        of one work item does not hold up the others.
        """
        with self._holding():
            lanes = _lanes(self.inbox.pending(self.clock()))

            def drain(lane: list[InboxEntry]) -> int:
                handled, done = 0, []
                try:
                    for entry in lane:
                        if should_stop is not None and should_stop():
                            break
                        handled += 1
                        verdict, outcome = self._handle(entry)
                        if verdict == "settle":
                            done.append(replace(entry, outcome=outcome, forget_mark=self.inbox.forget_mark()))
                        elif verdict == "hold":
                            break  # this event of the work item is backing off: its later ones wait behind it
                finally:
                    # One settle for the lane: a crash before it means these are handled once more (at least once).
                    self.inbox.settle(*done)
                return handled

            if self.workers == 1 or len(lanes) <= 1:
                return sum(drain(lane) for lane in lanes)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(self.workers, len(lanes))) as pool:
                return sum(pool.map(drain, lanes))

    def _handle(self, entry: InboxEntry) -> tuple[Literal["settle", "gone", "hold"], str]:
        """Handle one entry: ``settle`` it, it is ``gone`` (abandoned after its last attempt), or ``hold`` (pending
        for a retry, so its work items wait behind it); with what was done (a settled outcome's reason or status)."""
        try:
            outcome = self.handle(entry)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            events.emit(
                "dispatch.error",
                level="error",
                work_item=entry.work_items[0] if entry.work_items else None,
                delivery_id=entry.delivery_id,
                error=error,
                will_retry=entry.attempts + 1 < self.inbox.max_attempts,
            )
            return self._released(entry, error), ""
        status = getattr(outcome, "status", None)
        if status == "failed" and getattr(outcome, "will_retry", False):
            error = str(getattr(outcome, "error", "") or "failed")
            return self._released(entry, error), ""
        if status in SETTLED_STATUSES or status == "failed":  # a final failure: the handler already logged it
            return "settle", str(getattr(outcome, "reason", "") or status)
        return self._released(entry, f"the handler returned {outcome!r}, not an outcome"), ""

    def _released(self, entry: InboxEntry, error: str) -> Literal["gone", "hold"]:
        return "gone" if self.inbox.release(entry, error, now=self.clock()) is None else "hold"

    def _try_lock(self) -> int | None:
        path = self.inbox.layout.lock_for("inbox-worker")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StateError(f"cannot create lock {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
                return None
            raise
        return fd

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        if self._lock_fd is not None:
            yield
            return
        fd = self._try_lock()
        if fd is None:
            raise WorkerBusy(str(self.inbox.layout.lock_for("inbox-worker")))
        self._lock_fd = fd
        try:
            yield
        finally:
            self._lock_fd = None
            os.close(fd)


def _lanes(entries: list[InboxEntry]) -> list[list[InboxEntry]]:
    """Group entries, keeping their order, so that entries naming a common work item share one lane; an entry that
    names none has a lane of its own."""
    lanes: list[list[InboxEntry]] = []
    lane_of: dict[str, int] = {}
    for entry in entries:
        joined = sorted({lane_of[item] for item in entry.work_items if item in lane_of})
        if not joined:
            index = len(lanes)
            lanes.append([entry])
        else:
            index = joined[0]
            for other in joined[1:]:  # the entry links two lanes: merge them, in arrival order
                lanes[index].extend(lanes[other])
                lanes[other] = []
                for item, at in list(lane_of.items()):
                    if at == other:
                        lane_of[item] = index
            lanes[index].append(entry)
            lanes[index].sort(key=lambda e: e.name)
        for item in entry.work_items:
            lane_of[item] = index
    return [lane for lane in lanes if lane]
