"""A pidfile that is also the service's single-instance lock.

The lock is taken first (``flock`` on the pidfile itself), then the pid is written once, in place — never with
``os.replace``, which would leave the holder locking an orphaned inode while the path goes free. Liveness is read
only from the lock, never from ``kill -0``, so pid reuse cannot fool it; a pid ≤ 0 is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock."""


class RunLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid, or raise :class:`LockHeld` / ``OSError``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise LockHeld(str(self.path)) from None
                raise
            # The holder before us may have unlinked the path between our open and our flock: then we locked
            # an orphan. Only a lock on the inode the path names right now counts.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                os.fsync(fd)
                self._fd = fd
                return
            os.close(fd)
        raise LockHeld(f"{self.path} kept changing under us")

    def release(self) -> None:
        """Unlink, then close (so nobody can lock the old inode while we still hold it)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(self._fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_held(path: Path) -> bool:
    """True when some process holds the lock on ``path``; never creates the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def holder(path: Path) -> int:
    """The pid written in ``path``, or 0 when it is empty, unreadable or not a positive integer."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() and int(text) > 0 else 0


def remove_stale(path: Path) -> int | None:
    """Delete ``path`` when nobody holds its lock; return the pid it named (0 if none), or None if held/absent."""
    if not path.exists() or is_held(path):
        return None
    pid = holder(path)
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # somebody took it just now
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                os.unlink(path)
    finally:
        os.close(fd)
    return pid
