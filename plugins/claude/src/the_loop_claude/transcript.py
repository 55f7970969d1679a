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
from pathlib import Path

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


def has_user_entry_after(path: Path, offset: int) -> bool:
    """Whether a complete ``type: user`` line was appended to ``path`` past ``offset``."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            tail = handle.read()
    except OSError:
        return False
    for line in tail.split(b"\n")[:-1]:  # the last piece is unfinished (or empty)
        if b'"user"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("type") == "user":
            return True
    return False
