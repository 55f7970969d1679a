"""Live updates: one reader of ``events.jsonl`` per process, fanned out to every server-sent-event stream.

The reader polls the file (a stat every quarter second, and a read of what was appended), so a thousand open
dashboards cost one file read, not a thousand. Each subscriber has a bounded queue: one that falls that far
behind is told it lost events (``event: desync``) and closed, rather than letting a slow client hold the
process's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from the_loop import events

POLL_SECONDS = 0.25
QUEUE_CAP = 1000
KEEP_ALIVE_SECONDS = 15.0
DESYNC = object()


class EventTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._subscribers: set[asyncio.Queue[Any]] = set()
        self._task: asyncio.Task[None] | None = None
        self._position = 0
        self._inode: int | None = None

    def _start(self) -> None:
        try:
            info = self.path.stat()
            self._position, self._inode = info.st_size, info.st_ino
        except FileNotFoundError:
            self._position, self._inode = 0, None
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        pending = b""
        while self._subscribers:
            await asyncio.sleep(POLL_SECONDS)
            chunk = self._read()
            if chunk is None:
                pending = b""
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                record = events.parse_line(raw)
                if record is not None:
                    self._publish(record)
        self._task = None

    def _read(self) -> bytes | None:
        """What was appended since the last read; None when the file was replaced or truncated (read from 0)."""
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return b""
        if info.st_ino != self._inode or info.st_size < self._position:
            self._inode, self._position = info.st_ino, 0
            return None
        if info.st_size == self._position:
            return b""
        with self.path.open("rb") as handle:
            handle.seek(self._position)
            chunk = handle.read(info.st_size - self._position)
        self._position += len(chunk)
        return chunk

    def _publish(self, record: dict[str, Any]) -> None:
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(record)
            except asyncio.QueueFull:
                self._subscribers.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(DESYNC)

    async def subscribe(self, flt: events.EventFilter) -> AsyncIterator[bytes]:
        """Server-sent events for the records ``flt`` matches, appended from now on, with keep-alives."""
        queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE_CAP)
        self._subscribers.add(queue)
        if self._task is None:
            self._start()
        try:
            yield b": connected\n\n"
            while True:
                try:
                    record = await asyncio.wait_for(queue.get(), KEEP_ALIVE_SECONDS)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if record is DESYNC:
                    yield b"event: desync\ndata: {}\n\n"
                    return
                if flt.matches(record):
                    data = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                    yield f"data: {data}\n\n".encode()  # the record names its own type
        finally:
            self._subscribers.discard(queue)
