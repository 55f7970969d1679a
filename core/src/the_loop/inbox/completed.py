"""The inbox's completed keys: the view of ``local/inbox/completed.jsonl`` that ``put`` and the worker consult.

The inbox appends a line per settled key (``digest``, ``key``, ``settledAt`` and ``outcome``, what was done) and a
tombstone per forgotten one (``forgotten``: the key may be taken again). :class:`CompletedKeys` reads the file
incrementally — one ``stat`` answers "nothing new", a grown file is read on from where the last read stopped, a
replaced one (compacted) from its start — and keeps the newest ``limit`` keys. It only reads: the inbox writes the
file, under its lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import deque
from pathlib import Path

__all__ = ["CompletedKeys"]


class CompletedKeys:
    """The newest ``limit`` settled keys of the completed file at ``path``, with the lines that recorded them."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: tuple[int, int] | None = None  # (device, inode) of the file read so far
        self._offset = 0
        self.lines = 0  # lines read from the current file: the inbox compacts it at twice the limit
        self._tail: deque[tuple[str, bytes]] = deque(maxlen=limit)
        self._digests: frozenset[str] = frozenset()
        # Tombstones read so far (never reset: compaction drops them, so none is counted twice), and the count at
        # which each digest was last forgotten — so a settle can tell "forgotten after it was handled".
        self._forget_serial = 0
        self._forgotten_at: dict[str, int] = {}

    def digests(self) -> frozenset[str]:
        """Digests of the newest ``limit`` settled keys (reading what was appended since the last call)."""
        with self._lock:
            try:  # one stat answers "nothing new" (the common case) without opening the file
                stat = os.stat(self.path)
            except FileNotFoundError:
                self._reset(None)
                return self._digests
            if (stat.st_dev, stat.st_ino) == self._file and stat.st_size == self._offset:
                return self._digests
            try:
                handle = open(self.path, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                self._reset(None)
                return self._digests
            with handle:
                stat = os.fstat(handle.fileno())
                identity = (stat.st_dev, stat.st_ino)
                if identity != self._file or stat.st_size < self._offset:
                    self._reset(identity)  # compacted (a new file) or first read
                if stat.st_size <= self._offset:
                    return self._digests
                handle.seek(self._offset)
                chunk = handle.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being appended waits for the next read
            self._offset += len(whole)
            for line in whole.splitlines(keepends=True):
                self.lines += 1
                with contextlib.suppress(ValueError, UnicodeDecodeError, KeyError, TypeError):
                    record = json.loads(line)
                    digest = str(record["digest"])
                    if record.get("forgotten"):  # see Inbox.forget(): the key may be taken again
                        self._forget_serial += 1
                        self._forgotten_at[digest] = self._forget_serial
                        kept = [item for item in self._tail if item[0] != digest]
                        self._tail.clear()
                        self._tail.extend(kept)
                    else:
                        self._tail.append((digest, line))
            self._digests = frozenset(digest for digest, _ in self._tail)
            return self._digests

    def _reset(self, identity: tuple[int, int] | None) -> None:
        self._file = identity
        self._offset = self.lines = 0
        self._tail.clear()
        self._digests = frozenset()

    def outcome_of(self, digest: str) -> str:
        """What was done with the entry settled under ``digest`` ("" when it is not among the newest keys)."""
        self.digests()
        for known, line in reversed(self._tail):
            if known == digest:
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    return str(json.loads(line).get("outcome") or "")
        return ""

    def forget_mark(self) -> int:
        """How many tombstones have been read so far."""
        self.digests()
        return self._forget_serial

    def forgotten_at(self, digest: str) -> int:
        """The tombstone count at which ``digest`` was last forgotten (-1: never, in what has been read)."""
        return self._forgotten_at.get(digest, -1)

    def newest(self) -> bytes:
        """The newest ``limit`` lines: what a compacted completed file holds."""
        return b"".join(raw for _, raw in self._tail)
