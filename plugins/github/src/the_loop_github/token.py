"""Where the GitHub token comes from, the way users already have one: the variables
``integrations.github.api.tokenEnv`` names (``GH_TOKEN``, then ``GITHUB_TOKEN``), else the GitHub CLI's own login
(``gh auth token``) when ``gh`` is installed and logged in.

The token is read when it is needed and written nowhere: not into the config, an event, an argv or a session's
environment. What ``gh`` answered is kept in this process for a few minutes (asking it costs a process), so a
``gh auth refresh`` is seen within that time; a variable is read on every call, so rotating it needs no restart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence

GH_SOURCE = "gh auth token"
GH_SECONDS = 300.0
GH_TIMEOUT = 10.0
_from_gh: dict[str, tuple[float, str]] = {}  # host ("" = github.com) → (when it expires, token)


def find(names: Sequence[str], host: str = "") -> tuple[str, str]:
    """The token and where it came from (the variable's name, or ``gh auth token``); ``("", "")`` when none."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value, name
    token = from_gh(host)
    return (token, GH_SOURCE) if token else ("", "")


def from_gh(host: str = "") -> str:
    """``gh auth token`` (for ``host`` when it is not github.com), or "" when ``gh`` is missing, logged out or
    slow. Its stderr, which could name the account, is dropped."""
    kept = _from_gh.get(host)
    if kept is not None and kept[0] > time.monotonic():
        return kept[1]
    binary = shutil.which("gh")
    if binary is None:
        return ""
    argv = [binary, "auth", "token", *(["--hostname", host] if host and host != "github.com" else [])]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=GH_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = result.stdout.strip().splitlines() if result.returncode == 0 else []
    token = lines[0].strip() if len(lines) == 1 else ""
    _from_gh[host] = (time.monotonic() + GH_SECONDS, token)
    return token


def remedy(names: Sequence[str]) -> str:
    """How to give the-loop a token, naming the variables it reads (never a value)."""
    variables = " or ".join(names) or "a variable named in integrations.github.api.tokenEnv"
    return (
        f"export {variables} (a token that can read the repository's issues and write comments), "
        "or log in with `gh auth login`"
    )
