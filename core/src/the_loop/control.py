"""Control keywords: ``the-loop start|stop|pause|resume|cleanup`` typed on a ticket.

Parsing is anchored (A §2.6 C2): case-insensitive; the comment, after leading whitespace, must open with a keyword,
and further keywords count only at the start of a line; a keyword must not run on into ``[\\w:-]``. Prose, quotes
(``> the-loop stop``), inline code and list items never match. Two different commands in one comment execute nothing
(the comment is then ordinary conversation). Only comment and review bodies are parsed, never an issue or PR body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

COMMANDS = ("start", "stop", "pause", "resume", "cleanup")


def keywords(configured: Mapping[str, str]) -> dict[str, str]:
    """Command → keyword: ``the-loop <command>`` unless ``routing.control.keywords`` says otherwise (``""`` turns
    one off)."""
    found = {}
    for command in COMMANDS:
        keyword = configured.get(command, f"the-loop {command}")
        if keyword.strip():
            found[command] = " ".join(keyword.split())
    return found


@dataclass(frozen=True)
class ControlParse:
    """What a body asks for: one ``command``, nothing, or an ambiguous mix (``commands`` lists them)."""

    command: str | None = None
    commands: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return len(self.commands) > 1


def parse(body: str | None, configured: Mapping[str, str] | None = None) -> ControlParse:
    """The control command ``body`` carries, if any."""
    if not body:
        return ControlParse()
    table = keywords(configured or {})
    if not table:
        return ControlParse()
    alternatives = "|".join(
        re.escape(keyword).replace(r"\ ", r"[ \t]+") for keyword in sorted(table.values(), key=len, reverse=True)
    )
    # `(?![\w:-])`: "the-loop started" or "the-loop start:now" is not the start command.
    pattern = re.compile(rf"^[ \t]*({alternatives})(?![\w:-])", re.IGNORECASE | re.MULTILINE)
    text = body.lstrip()
    by_keyword = {" ".join(k.lower().split()): c for c, k in table.items()}
    found: list[str] = []
    for index, match in enumerate(pattern.finditer(text)):
        if index == 0 and match.start() != 0:
            return ControlParse()  # the comment must open with a keyword
        command = by_keyword[" ".join(match.group(1).lower().split())]
        if command not in found:
            found.append(command)
    if not found:
        return ControlParse()
    return ControlParse(command=found[0] if len(found) == 1 else None, commands=tuple(found))
