"""State on disk: the layout under ``state.root``, what each path and record key is, and safe file primitives.

Every path core writes is declared once in :data:`GENERATED_PATHS` (plugins add theirs through ``loop_state_paths``)
and every top-level key of a per-work-item record in :data:`ATTRIBUTES`, both in :mod:`the_loop.state.declared`. The
``.gitignore`` block and the docs table are generated from — and tested against — these declarations.

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

from the_loop.declarations import GeneratedPath
from the_loop.state.declared import (  # re-exported: the declarations are read as the_loop.state's
    ATTRIBUTE_KINDS as ATTRIBUTE_KINDS,
)
from the_loop.state.declared import (
    ATTRIBUTES as ATTRIBUTES,
)
from the_loop.state.declared import (
    CHANNEL_DECLARATION_FIELDS as CHANNEL_DECLARATION_FIELDS,
)
from the_loop.state.declared import (
    COLLABORATOR_FIELDS as COLLABORATOR_FIELDS,
)
from the_loop.state.declared import (
    CONVERSATION_FIELDS as CONVERSATION_FIELDS,
)
from the_loop.state.declared import (
    GENERATED_PATHS as GENERATED_PATHS,
)
from the_loop.state.declared import (
    PENDING_FIELDS as PENDING_FIELDS,
)

LAYOUT_VERSION = 1

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
