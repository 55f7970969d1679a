"""Where a turn of Claude Code stands, read from its transcript: what the adapter waits for after an interrupt.

Claude Code (2.1.332) appends to the conversation's transcript, when a turn ends:

- on its own: a ``{"type": "system", "subtype": "turn_duration"}`` line;
- on Escape: the model's partial answer (an assistant line marked ``isAbortedMidStream``, when it had begun), then a
  user line whose one text block is ``[Request interrupted by user]`` — ``[Request interrupted by user for tool
  use]`` when a tool was running or its permission was refused (after the tool's error result);
- on an API error: an assistant line marked ``isApiErrorMessage`` (model ``<synthetic>``), and nothing after it.

An Escape that lands before any of the answer has arrived writes none of them: Claude Code puts the prompt back in
its input box instead (see :func:`the_loop_claude.pane.reads_input`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from the_loop_claude.transcript import entries_after

INTERRUPTED = "[Request interrupted by user"
# Raw bytes every line that can end a turn holds (the JSON is parsed only for lines that do).
_WORDS = (b'"user"', b'"assistant"', b'"turn_duration"')


def _texts(entry: dict[str, Any]) -> list[str]:
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"] if content else []


def ends_turn(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` is the line Claude Code writes when a turn ends: on its own, interrupted, or failed."""
    kind = entry.get("type")
    if kind == "system":
        return entry.get("subtype") == "turn_duration"
    if kind == "assistant":
        return bool(entry.get("isApiErrorMessage"))
    return kind == "user" and any(text.startswith(INTERRUPTED) for text in _texts(entry))


def ended_after(path: Path, offset: int) -> bool:
    """Whether a line appended to ``path`` past ``offset`` ends a turn."""
    return any(ends_turn(entry) for entry in entries_after(path, offset, *_WORDS))
