"""Reading what a writer appended to a file since the last read (a harness's transcript), never the whole file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def lines_after(path: Path, offset: int, block: int = 1024 * 1024) -> Iterator[tuple[bytes, int]]:
    """Each complete line of ``path`` past ``offset`` (without its newline) and the offset just after it, read a
    block at a time (memory stays bounded however much was appended); a line still being written is not yielded,
    so the last offset yielded is where the next read starts. Raises :class:`OSError` when the file cannot be
    read."""
    with path.open("rb") as handle:
        handle.seek(offset)
        carry, position = b"", offset
        while chunk := handle.read(block):
            data, start = carry + chunk, 0
            while (newline := data.find(b"\n", start)) >= 0:
                position += newline + 1 - start
                yield data[start:newline], position
                start = newline + 1
            carry = data[start:]
