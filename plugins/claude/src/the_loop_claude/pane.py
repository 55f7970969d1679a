"""Whether Claude Code's pane shows it reading input: the input box at the foot of the screen and no turn running.

The foot of an ordinary screen is the input box between two full-width rules, its first line beginning with the
``❯`` pointer (empty, a draft, or ``Press up to edit queued messages``), and under it the status line. While a turn
runs the status line offers ``esc to interrupt``; once the turn is over it no longer does. A prompt or a dialog
replaces the input box, so neither reads as input.
"""

# ruff: noqa: RUF002 - the pointer is the screen's own character (U+276F), not a ">" look-alike

from __future__ import annotations

import re

BUSY = "esc to interrupt"
POINTER = "\u276f"
_RULE = re.compile(r"^\s*─{8,}\s*$")
_STATUS_LINES = 3  # the most the status line takes under the input box (it wraps in a narrow pane)


def reads_input(screen: str) -> bool:
    """Whether ``screen`` (a pane's visible text) ends with the input box and a status line that runs no turn."""
    lines = [line.rstrip() for line in screen.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    rules = [index for index, line in enumerate(lines) if _RULE.match(line)]
    if len(rules) < 2:
        return False
    top, bottom = rules[-2], rules[-1]
    status = lines[bottom + 1 :]
    if bottom - top < 2 or not lines[top + 1].lstrip().startswith(POINTER) or len(status) > _STATUS_LINES:
        return False
    return not any(BUSY in line for line in status)
