"""Claude Code's transcripts: how the adapter tells that a conversation exists and that a session is ready.

Claude Code keeps each conversation as ``<config dir>/projects/<project>/<session id>.jsonl``, where ``<project>``
is the session's working directory with every character other than a letter or digit replaced by ``-`` (a name
over 200 characters is cut there and given a suffix of its own, so those are found by their prefix). It appends
a ``{"type": "user", …}`` line when it takes a prompt, before it asks the model: once a line like that appears past
where the file ended at launch, the session has left every start-up screen and holds its boot prompt.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from the_loop.toolkit import lines_after
from the_loop_claude.trust import ClaudePaths

_NAME_LIMIT = 200
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def project_names(cwd: Path) -> list[str]:
    """The project directory names Claude Code may use for ``cwd`` (as given and its real path)."""
    spellings = dict.fromkeys([os.path.normpath(os.path.abspath(cwd)), os.path.realpath(cwd)])
    return [_NOT_ALNUM.sub("-", spelling) for spelling in spellings]


def find(session_id: str, cwd: Path, paths: ClaudePaths | None = None) -> Path | None:
    """The transcript of conversation ``session_id`` in ``cwd``, or None when Claude Code has none there."""
    projects = (paths or ClaudePaths.from_env()).config_dir / "projects"
    for name in project_names(cwd):
        candidate = projects / name / f"{session_id}.jsonl"
        if candidate.is_file():
            return candidate
        if len(name) > _NAME_LIMIT:
            for match in sorted(projects.glob(f"{name[:_NAME_LIMIT]}*/{session_id}.jsonl")):
                return match
    return None


def size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


def line_end(path: Path, block: int = 64 * 1024) -> int:
    """The offset just after the last complete line of ``path`` (0 when it has none or cannot be read): where a
    reader starts so that a line being written now is read whole later."""
    try:
        with path.open("rb") as handle:
            position = handle.seek(0, os.SEEK_END)
            while position > 0:
                start = max(0, position - block)
                handle.seek(start)
                found = handle.read(position - start).rfind(b"\n")
                if found >= 0:
                    return start + found + 1
                position = start
    except OSError:
        pass
    return 0


def parsed(line: bytes, *words: bytes) -> dict[str, Any] | None:
    """The JSON object ``line`` holds, when it holds one of ``words`` (checked on the raw bytes first, so the many
    lines of other kinds are never parsed); None for any other line and an unparsable one."""
    if words and not any(word in line for word in words):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def entries_after(path: Path, offset: int, *words: bytes) -> Iterator[dict[str, Any]]:
    """The objects of the complete lines past ``offset`` that hold one of ``words``; none when the file cannot be
    read."""
    try:
        for line, _ in lines_after(path, offset):
            if (entry := parsed(line, *words)) is not None:
                yield entry
    except OSError:
        return


def has_user_entry_after(path: Path, offset: int) -> bool:
    """Whether a complete ``type: user`` line was appended to ``path`` past ``offset``."""
    return any(entry.get("type") == "user" for entry in entries_after(path, offset, b'"user"'))
