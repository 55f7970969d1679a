"""State on disk: the layout under ``state.root``, what each path and record key is, and safe file primitives.

Every path core writes is declared once in :data:`GENERATED_PATHS` (plugins add theirs through
``loop_state_paths``) and every top-level key of a per-work-item record in :data:`ATTRIBUTES`. The ``.gitignore``
block and the docs table are generated from — and tested against — these declarations.

File rules: JSON writes are atomic (temp file in the same directory, fsync, ``os.replace``, directory fsync);
every read-modify-write holds an ``flock`` on a sibling lock file under ``local/locks/`` (never inside
``portable/``); a JSON file that does not parse is reported once, read as "nothing recorded", and moved aside
as ``<name>.corrupt-<timestamp>`` before the next write replaces it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from the_loop.declarations import Attribute, GeneratedPath

LAYOUT_VERSION = 1

GENERATED_PATHS: tuple[GeneratedPath, ...] = (
    GeneratedPath(
        "portable/<slug>.json",
        True,
        "one record per work item: control, poll ledger, pull requests, collaborators, channel binding, ended",
        "facts an authorized human asked for or a provider told us; true on any machine and slow or impossible "
        "to rebuild",
    ),
    GeneratedPath(
        "portable/index.json",
        True,
        "one entry per record: ref, url, file, sections (derived by scanning the directory; nothing reads it)",
        "lets a person see what is tracked without opening every record; safe to take either side of a conflict",
    ),
    GeneratedPath(
        ".the-loop-state",
        True,
        "the layout version of this state root",
        "a future layout change is detected exactly rather than guessed, on any machine",
    ),
    GeneratedPath(
        "portable/.<name>.<random>.tmp",
        False,
        "an atomic write in progress (left behind only by a crash)",
        "half-written; never meaningful anywhere",
    ),
    GeneratedPath(
        "portable/<name>.corrupt-<timestamp>",
        False,
        "a record that did not parse, moved aside before it was replaced",
        "kept for a person to inspect on this machine; never travels",
    ),
    GeneratedPath(
        ".<name>.<random>.tmp",
        False,
        "an atomic write of a root-level file in progress (left behind only by a crash)",
        "half-written; never meaningful anywhere",
    ),
    GeneratedPath(
        "<name>.corrupt-<timestamp>",
        False,
        "a root-level file that did not parse, moved aside before it was replaced",
        "kept for a person to inspect on this machine; never travels",
    ),
    GeneratedPath(
        "local/locks/<name>.lock",
        False,
        "empty flock files: one per record or shared file, held across every read-modify-write",
        "a lock means something only to processes on this machine",
    ),
    GeneratedPath(
        "local/<slug>.json",
        False,
        "this machine's session handles for one work item: harness, conversation id, cwd, tmux target, cursors",
        "a conversation id and a cwd name things on this machine; a copied record blocks the spawn another needs",
    ),
    GeneratedPath(
        "local/index-cache.json",
        False,
        "the index builder's parse cache: per record file, its inode, mtime, size and index entry",
        "inodes and mtimes describe this machine's files; rebuilt from portable/ when missing",
    ),
    GeneratedPath(
        "local/inbox/",
        False,
        "the durable inbox: one file per accepted delivery, named in arrival order, until the worker settles it; "
        "completed.jsonl, the keys settled last",
        "what this machine accepted and still owes a dispatch; replaying it elsewhere would deliver twice",
    ),
    GeneratedPath(
        "local/control-deliveries.json",
        False,
        "the dedupe keys of the newest control comments this machine executed (bounded), each with the inbox entry "
        "that claimed it",
        "shared by the receiver and the poller so a comment both ingresses see executes once, on this machine",
    ),
    GeneratedPath(
        "local/control-deliveries.json.lock",
        False,
        "the flock the receiver and the poller take around control-deliveries.json",
        "a lock means something only to processes on this machine",
    ),
    GeneratedPath(
        "local/admission.json",
        False,
        "the work items waiting in line for a slot (routing.capacity): respawns first, then first spawns in order",
        "slots and memory are this machine's own; another machine has its own line",
    ),
    GeneratedPath(
        "local/inbox/abandoned/",
        False,
        "inbox entries that failed every attempt, kept with their last error",
        "kept for a person to inspect on this machine; never replayed",
    ),
    GeneratedPath(
        "local/poll-clocks.json",
        False,
        "per polled ref: lastPolledAt and closureCheckedAt (when this poller last listed it, or asked if it ended), "
        "and missingAt (when GitHub first answered 404/410 to that question)",
        "clock readings of a poller on this machine; elsewhere they would date a process that is not there",
    ),
    GeneratedPath(
        "local/standing/<name>.json",
        False,
        "one record per standing session: harness, conversation id, cwd, tmux target, status (running or stopped), "
        "start and last-message stamps, Slack binding and the definition it was started with",
        "a process on this machine and the conversation it holds; routed events never read it",
    ),
    GeneratedPath(
        "local/model-verdicts.json",
        False,
        "per harness, model or effort name: whether this machine's harness accepts it (ok, refused, unknown), the "
        "digest of the argv it was measured with and when (the-loop models check)",
        "a fact about this box's harness installation and this account's model access, not about the work; "
        "re-measured in seconds",
    ),
    GeneratedPath(
        "logs/events.jsonl",
        False,
        "the decision trail: one JSON object per decision, drops with a machine-readable reason",
        "this machine's audit trail; paths and pids in it name this machine",
    ),
    GeneratedPath(
        "logs/<service>.out",
        False,
        "a detached service's stdout and stderr, appended",
        "this machine's process output",
    ),
    GeneratedPath(
        "<service>.pid",
        False,
        "a running service's pid, and its single-instance lock (gh-webhook.pid, poll.pid, slack-listener.pid)",
        "a pid names a process on this machine only",
    ),
    GeneratedPath(
        "poll-status.json",
        False,
        "the poller's heartbeat: startedAt, lastCycleAt, intervalSeconds, the last cycle's counters (no pid)",
        "describes this machine's poller",
    ),
    GeneratedPath(
        "channels/<name>.json",
        False,
        "per channel (slack.json): the read cursor of every thread, and the keys of events already published",
        "a ledger of what this machine read; the threads it names are in the operator's own workspace",
    ),
    GeneratedPath(
        "channels/<name>.json.lock",
        False,
        "empty flock files: a channel's claim and publish-record lock, the undelivered queue's lock",
        "a lock means something only to processes on this machine",
    ),
    GeneratedPath(
        "channels/undelivered.json",
        False,
        "events no channel accepted, waiting for a drain: the event, channels asked, attempts, last error",
        "what this machine still owes its channels; the ticket already holds every one of them",
    ),
)

ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute("repository", "version", "derived", "the file's shape (1)"),
    Attribute("repository", "workItem", "pointer", "which work item this is; a file naming another is ignored"),
    Attribute("repository", "phase", "pointer", "phase-selection while parked at the start gate, then work"),
    Attribute("repository", "parked", "pointer", "the gate it waits at, why, since when, and the checklist posted"),
    Attribute("repository", "decisions", "human-decision", "each gate's outcome: the choices, who, how, when"),
    Attribute("repository", "sessionPerPr", "human-decision", "how many sessions its pull requests get"),
    Attribute("repository", "model", "human-decision", "the model it runs on (one the operator declares)"),
    Attribute("repository", "effort", "human-decision", "the effort it runs at (one the operator declares)"),
    Attribute("repository", "repos", "human-decision", "the repositories it contributes to (within repositories)"),
    Attribute("repository", "pullRequests", "repository-entity", "each pull request a session said delivers it"),
    Attribute("portable", "ref", "derived", "the work item's identity; the file name is derived from it"),
    Attribute("portable", "url", "derived", "the work item's page, derived from the ref when it can be"),
    Attribute("portable", "sealed", "derived", "an upgrade tombstone: the legacy tree must not resurrect it"),
    Attribute("portable", "control", "operator-ledger", "the last control command an authorized user gave"),
    Attribute("portable", "poll", "operator-ledger", "what the poller has seen: comments, attempts, spawn ledger"),
    Attribute("portable", "pullRequests", "operator-ledger", "the poll ledger of each pull request delivering it"),
    Attribute("portable", "collaborators", "operator-ledger", "who else may speak to this work item"),
    Attribute("portable", "collaborationChannels", "operator-ledger", "where this work item is worked"),
    Attribute("portable", "channels", "workspace-entity", "the conversation (thread) opened for this work item"),
    Attribute("portable", "ended", "operator-ledger", "whether and how the work item ended"),
    Attribute("portable", "lifecycle", "operator-ledger", "that work_item_start was asked for the current arming"),
    Attribute("portable", "budget", "operator-ledger", "what authorized people added to its budget, who and when"),
    Attribute("local", "version", "derived", "the record's shape (2)"),
    Attribute("local", "workItem", "derived", "whose sessions these are"),
    Attribute("local", "sessions", "machine-handle", "one session per ref: harness, conversation id, cwd, tmux"),
    Attribute("local", "channels", "machine-handle", "what this machine last read of each thread (cursors)"),
    Attribute("local", "question", "machine-handle", "the agent's open question (the-loop ask) until a person answers"),
    Attribute(
        "local", "usage", "machine-handle", "what its sessions spent here (tokens, cost), read cursors, warnings"
    ),
    Attribute("local", "blocked", "machine-handle", "the decision prompt a session's screen shows, as posted"),
    Attribute("local", "idle", "machine-handle", "since when a session has been quiet, once nudged"),
)

# Which kinds may live in which file: a machine handle must never reach a tracked file.
ATTRIBUTE_KINDS: dict[str, set[str]] = {
    "repository": {"pointer", "human-decision", "repository-entity", "derived"},
    "portable": {"workspace-entity", "operator-ledger", "derived"},
    "local": {"machine-handle", "derived"},
}

_REGISTRY_NAME = re.compile(r"^[A-Za-z0-9._-]+-\d+\.json$")


def is_record_name(name: str) -> bool:
    """Only ``…-<n>.json`` names are work-item records; anything else in a records directory is ignored."""
    return bool(_REGISTRY_NAME.match(name))


DEFAULT_STATE_ROOT = ".the-loop"  # state.root when the config names none: beside the config file


@dataclass(frozen=True)
class StateLayout:
    """The one resolver of generated paths. Relative overrides resolve against ``root``."""

    root: Path
    registry_dir: str = ""
    event_log: str = ""
    gh_webhook_pidfile: str = ""

    def _under_root(self, value: str, default: str) -> Path:
        path = Path(value or default).expanduser()
        return path if path.is_absolute() else self.root / path

    @property
    def portable_dir(self) -> Path:
        return self.root / "portable"

    @property
    def local_dir(self) -> Path:
        return self._under_root(self.registry_dir, "local")

    @property
    def locks_dir(self) -> Path:
        return self.root / "local" / "locks"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def events_path(self) -> Path:
        return self._under_root(self.event_log, "logs/events.jsonl")

    @property
    def index_path(self) -> Path:
        return self.portable_dir / "index.json"

    @property
    def index_cache_path(self) -> Path:
        return self.root / "local" / "index-cache.json"

    @property
    def model_verdicts_path(self) -> Path:
        """What this machine's harnesses accept of the declared models and efforts (``the-loop models check``)."""
        return self.root / "local" / "model-verdicts.json"

    @property
    def inbox_dir(self) -> Path:
        return self.root / "local" / "inbox"

    @property
    def marker_path(self) -> Path:
        return self.root / ".the-loop-state"

    @property
    def poll_status_path(self) -> Path:
        return self.root / "poll-status.json"

    @property
    def undelivered_path(self) -> Path:
        """The channels' outbox: what a channel could not take yet."""
        return self.root / "channels" / "undelivered.json"

    def portable_record(self, slug: str) -> Path:
        return self.portable_dir / f"{slug}.json"

    def local_record(self, slug: str) -> Path:
        return self.local_dir / f"{slug}.json"

    def lock_for(self, name: str) -> Path:
        return self.locks_dir / f"{name}.lock"

    def pidfile(self, service: str) -> Path:
        if service == "gh-webhook" and self.gh_webhook_pidfile:
            return self._under_root(self.gh_webhook_pidfile, "gh-webhook.pid")
        return self.root / f"{'poll' if service == 'poller' else service}.pid"

    def logfile(self, service: str) -> Path:
        return self.logs_dir / f"{service}.out"

    def ensure_marker(self) -> None:
        """Write ``.the-loop-state`` once; a root with a different layout is refused, not guessed at."""
        found = read_json(self.marker_path)
        if found is None:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.marker_path, {"layout": LAYOUT_VERSION}, mode=0o644)
        elif found.get("layout") != LAYOUT_VERSION:
            raise StateError(f"{self.marker_path}: layout {found.get('layout')!r} is not {LAYOUT_VERSION}")


class StateError(Exception):
    """A state path that cannot be written; the message names it."""


# ------------------------------------------------------------------------------------------- file primitives

_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"warning: {message}", file=sys.stderr)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the new one, never half of either."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise StateError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise StateError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
    _fsync_dir(path.parent)


def dump_json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def atomic_write_json(path: Path, data: Any, *, mode: int = 0o600) -> None:
    quarantine_if_corrupt(path)
    atomic_write_bytes(path, dump_json(data), mode=mode)


class Corrupt:
    """Sentinel: the file exists but is not a JSON object (or not a regular file, or too large to be one of ours)."""


# No state file of ours comes near this; a link to /dev/zero or a huge file must not exhaust memory.
MAX_STATE_FILE_BYTES = 16 * 1024 * 1024


def read_regular(path: Path, limit: int = MAX_STATE_FILE_BYTES) -> bytes | type[Corrupt] | None:
    """The bytes of the regular file at ``path``; None when absent; :class:`Corrupt` for anything else there.

    The last component is never followed (a symlink is refused), the open never blocks (a FIFO is refused, not
    waited on), and at most ``limit`` bytes are read (a larger file is refused). Raises :class:`StateError` when
    the file exists and cannot be read.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a symlink, a directory, a socket
            return Corrupt
        raise StateError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return Corrupt
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew while being read
                return Corrupt
        return b"".join(chunks)
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def load_json(path: Path) -> dict[str, Any] | type[Corrupt] | None:
    """The JSON object at ``path``; None when absent; :class:`Corrupt` when it does not parse as an object or is
    not a regular file (see :func:`read_regular`)."""
    data = read_regular(path)
    if data is None or data is Corrupt:
        return data  # type: ignore[return-value]
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return Corrupt
    return value if isinstance(value, dict) else Corrupt


T = TypeVar("T")


class StatMemo(Generic[T]):
    """What ``compute`` made of a file, kept until the file changes: keyed by (path, inode, mtime, size), and every
    write of ours is a new inode (``os.replace``). ``limit`` keeps a long-running daemon's memory flat."""

    def __init__(self, compute: Callable[[Path], T], limit: int = 4096) -> None:
        self._compute = compute
        self._limit = limit
        self._seen: dict[tuple[str, int, int, int], T] = {}

    def get(self, path: Path) -> T | None:
        """None when there is no file at ``path`` (a link there is the link's, never followed)."""
        try:
            info = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        key = (str(path), info.st_ino, info.st_mtime_ns, info.st_size)
        if key not in self._seen:
            if len(self._seen) >= self._limit:
                self._seen.clear()
            self._seen[key] = self._compute(path)
        return self._seen[key]


def read_json(path: Path) -> dict[str, Any] | None:
    """Read a JSON object, failing closed: a corrupt file warns once and reads as nothing recorded."""
    value = load_json(path)
    if value is Corrupt:
        warn_once(f"corrupt:{path}", f"skipping unreadable state file {path}: not a JSON object")
        return None
    return value  # type: ignore[return-value]


def move_aside(path: Path) -> Path:
    """Rename ``path`` to a free ``<name>.corrupt-<timestamp>[-<n>]`` beside it and return that; raises OSError."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
    os.replace(path, target)
    return target


def quarantine_if_corrupt(path: Path) -> Path | None:
    """Move a corrupt file aside as ``<name>.corrupt-<timestamp>`` so a write never silently destroys it."""
    if load_json(path) is not Corrupt:
        return None
    return quarantine(path)


def quarantine(path: Path) -> Path:
    """Move a file already found corrupt aside (see :func:`quarantine_if_corrupt`), report it, return where to."""
    try:
        target = move_aside(path)
    except OSError as exc:
        raise StateError(f"cannot move corrupt {path} aside: {exc.strerror}") from None
    from the_loop import events

    events.emit("state.quarantined", level="warning", path=str(path), moved_to=str(target))
    print(f"warning: {path} did not parse; moved it aside to {target.name}", file=sys.stderr)
    return target


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created empty) for the duration of the block."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"cannot create lock {lock_path}: {exc.strerror}") from None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                break
            except OSError as exc:  # EINTR from a signal: try again
                if exc.errno != errno.EINTR:
                    raise
        yield
    finally:
        os.close(fd)  # closing releases the lock


def try_lock(lock_path: Path) -> int | None:
    """Take an exclusive ``flock`` on ``lock_path`` without waiting: the descriptor that holds it (closing it
    releases the lock), or None when another holder has it."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"cannot create lock {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
            return None
        raise
    return fd


@contextlib.contextmanager
def try_locked(lock_path: Path) -> Iterator[bool]:
    """Like :func:`locked`, without waiting: the block runs either way and is told whether it holds the lock (a
    periodic check skips an item another process is busy with, rather than queue behind it)."""
    fd = try_lock(lock_path)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def declared_paths(extra: Iterable[GeneratedPath] = ()) -> list[GeneratedPath]:
    return [*GENERATED_PATHS, *extra]


def _glob(template: str) -> str:
    pattern = re.sub(r"<[^>]+>", "*", template)
    while "*.*" in pattern:
        pattern = pattern.replace("*.*", "*")
    return pattern


def gitignore_block(paths: Iterable[GeneratedPath], root_name: str = ".the-loop") -> str:
    """The ``.gitignore`` lines that ignore exactly the local paths under ``root_name``."""
    paths = list(paths)
    portable_dirs = {p.path.split("/", 1)[0] for p in paths if p.portable and "/" in p.path}
    lines: list[str] = []
    for item in paths:
        if item.portable:
            continue
        head, sep, _rest = item.path.partition("/")
        entry = f"{head}/" if sep and head not in portable_dirs else _glob(item.path)
        line = f"{root_name}/{entry}"
        if line not in lines:
            lines.append(line)
    header = [
        f"# the-loop: generated state under state.root (default {root_name}); generated by `the-loop state gitignore`.",
        f"# Local handles never leave the machine; {root_name}/portable/ travels with the work, so it is tracked.",
    ]
    return "\n".join(header + lines) + "\n"
