"""What a Claude Code conversation spent, read from its transcript incrementally (for budgets).

Claude Code (2.1.332) writes one assistant line per content block of a model response, all at once when the
response is complete, and each carries the whole message: the same ``message.id``, ``model`` and ``usage``
(``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``, the final
counts). So a response is counted once, by its id. A response cut short by Escape is one line marked
``isAbortedMidStream`` with the counts known when it began (``output_tokens`` as ``message_start`` said). An API
error is an assistant line of model ``<synthetic>``, no model response: it is not counted.

The cursor is ``<offset>:<message id>``: the byte offset just past the last complete line read (a line still being
written is left for the next read) and the id of the last response counted, so a response whose lines straddle two
reads counts once. A transcript that no longer fits the cursor (shorter than the offset, or the offset no longer at
a line's end: replaced or rewritten) is read again from its start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from the_loop.interfaces import Usage, UsageRead
from the_loop_claude.transcript import lines_after, parsed

SYNTHETIC_MODEL = "<synthetic>"  # what Claude Code names the model of a message it wrote itself (an API error)


def parse_cursor(cursor: str) -> tuple[int, str]:
    """``(offset, last message id)`` of a cursor; an empty or unreadable one reads from the start."""
    offset, _, last = cursor.partition(":")
    try:
        return max(0, int(offset)), last
    except ValueError:
        return 0, ""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def usage_of(entry: dict[str, Any]) -> tuple[str, Usage] | None:
    """The response id and what it spent, when ``entry`` is an assistant line of a model response."""
    message = entry.get("message")
    if entry.get("type") != "assistant" or not isinstance(message, dict) or entry.get("isApiErrorMessage"):
        return None
    usage, model, ident = message.get("usage"), str(message.get("model") or ""), message.get("id")
    if not isinstance(usage, dict) or not ident or model == SYNTHETIC_MODEL:
        return None
    return str(ident), Usage(
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=_count(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_count(usage.get("cache_creation_input_tokens")),
        model=model,
    )


def _fits(path: Path, offset: int) -> bool:
    """Whether ``offset`` can still be where a read stopped: within the file, just after a line break."""
    if offset == 0:
        return True
    with path.open("rb") as handle:
        handle.seek(offset - 1)
        return handle.read(1) == b"\n"


def read(path: Path, cursor: str) -> UsageRead | None:
    """One :class:`Usage` per model response written to ``path`` since ``cursor``, and the cursor after them.
    None when the transcript cannot be read."""
    offset, last = parse_cursor(cursor)
    spent: list[Usage] = []
    try:
        if not _fits(path, offset):
            offset, last = 0, ""
        end, counted = offset, {last}
        for line, after in lines_after(path, offset):
            end = after  # where the next read starts: past the last complete line
            found = usage_of(entry) if (entry := parsed(line, b'"usage"')) is not None else None
            if found is not None and found[0] not in counted:
                last = found[0]
                counted.add(last)
                spent.append(found[1])
    except OSError:
        return None
    return UsageRead(tuple(spent), f"{end}:{last}")
