"""A pass-through ``tmux`` for tests: it logs every argv, optionally injects a fault, then ``exec``s the real tmux.

``write_tmux_shim(dir, real_tmux, log_path)`` writes an executable ``dir/tmux``; give its path to
:class:`~the_loop.sessions.tmux.TmuxRunner` as ``binary`` (or put ``dir`` first on ``PATH``). Each call appends its
argv as one JSON list to ``log_path``. Tests read the log to prove what the runner never does (``send-keys``, a
client, a shell) and how many tmux invocations an operation costs.

Faults come from ``dir/tmux-faults.json`` (:meth:`TmuxShim.set_faults`), keyed by the first subcommand of a call
(``has-session``, ``new-session``, ``kill-session``, ``-V``…). A count says how many matching calls it hits
(``-1`` = every one):

- ``delay``: ``{subcommand: [seconds, count]}`` — sleep before running (a probe that times out);
- ``fail``: ``{subcommand: count}`` — exit 1 without asking tmux;
- ``fail_after``: ``{subcommand: count}`` — run it for real, then exit 1 anyway (a kill that reports failure);
- ``version``: a ``tmux -V`` answer such as ``"tmux 3.1"``;
- ``panes_dead``: count — answer ``1`` to a ``#{pane_dead}`` listing without asking tmux.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.sessions.tmux import TmuxRunner

__all__ = ["FORBIDDEN_SUBCOMMANDS", "TmuxShim", "split_commands", "violations", "write_tmux_shim"]

_SCRIPT = r'''#!{python} -IS
# the-loop test shim: log argv, maybe inject a fault, exec the real tmux.
import fcntl, json, os, subprocess, sys, time

REAL, LOG, FAULTS = {real!r}, {log!r}, {faults!r}
OPTIONS_WITH_VALUE = ("-L", "-S", "-f", "-c", "-T")
args = sys.argv[1:]
fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (json.dumps(args) + "\n").encode())
os.close(fd)

subcommand, i = None, 0
while i < len(args):
    if args[i] == "-V":
        subcommand = "-V"
        break
    if args[i] in OPTIONS_WITH_VALUE:
        i += 2
    elif args[i].startswith("-"):
        i += 1
    else:
        subcommand = args[i]
        break


def take(kind, key=None):
    """Consume one hit of a fault; its value when it fires, else None."""
    try:
        handle = open(FAULTS, "r+")
    except FileNotFoundError:
        return None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        faults = json.load(handle)
        entry = faults.get(kind)
        if key is not None:
            entry = entry.get(key) if isinstance(entry, dict) else None
        if entry is None or isinstance(entry, str):
            return entry
        value, count = (entry[0], entry[1]) if isinstance(entry, list) else (entry, entry)
        if count == 0:
            return None
        if count > 0:
            if key is None:
                faults[kind] = [value, count - 1] if isinstance(entry, list) else count - 1
            else:
                faults[kind][key] = [value, count - 1] if isinstance(entry, list) else count - 1
            handle.seek(0)
            handle.truncate()
            json.dump(faults, handle)
        return value


delay = take("delay", subcommand)
if delay:
    time.sleep(delay)
if subcommand == "-V":
    version = take("version")
    if version:
        print(version)
        sys.exit(0)
if take("fail", subcommand):
    print("shim: injected failure", file=sys.stderr)
    sys.exit(1)
if "#{{pane_dead}}" in args and take("panes_dead"):
    print("1")
    sys.exit(0)
if take("fail_after", subcommand):
    subprocess.run([REAL, *args])
    print("shim: injected failure after running", file=sys.stderr)
    sys.exit(1)
os.execv(REAL, [REAL, *args])
'''

# Commands that act on a client (or a shell); a delivery or probe must never issue them.
FORBIDDEN_SUBCOMMANDS = frozenset(
    {
        "send-keys",
        "send-prefix",
        "attach-session",
        "switch-client",
        "detach-client",
        "refresh-client",
        "suspend-client",
        "lock-client",
        "list-clients",
        "display-popup",
        "display-menu",
        "command-prompt",
        "confirm-before",
        "choose-tree",
        "choose-client",
        "choose-buffer",
        "run-shell",
        "pipe-pane",
    }
)


def write_tmux_shim(directory: str | os.PathLike[str], real_tmux: str, log_path: str | os.PathLike[str]) -> Path:
    """Write the executable ``tmux`` shim into ``directory`` and return its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tmux"
    script = _SCRIPT.format(
        python=sys.executable, real=str(real_tmux), log=str(log_path), faults=str(directory / "tmux-faults.json")
    )
    path.write_text(script, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def split_commands(argv: list[str]) -> list[list[str]]:
    """The tmux commands one argv runs, split the way tmux splits its own arguments.

    Global options are skipped. A word ending in ``;`` ends a command (``\\;`` is a literal ``;``), so an argument
    the runner failed to escape shows up here as an extra command.
    """
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-L", "-S", "-f", "-c", "-T") else 1
    commands: list[list[str]] = [[]]
    for word in argv[i:]:
        if word.endswith(";") and not word.endswith("\\;"):
            if word[:-1]:
                commands[-1].append(word[:-1])
            commands.append([])
        else:
            commands[-1].append(word[:-2] + ";" if word.endswith("\\;") else word)
    return [command for command in commands if command]


def violations(calls: Iterable[list[str]]) -> list[str]:
    """What in ``calls`` resolves a client or runs a shell, one line each (empty when clean).

    Checked per command: a forbidden subcommand, ``if-shell`` without ``-F`` (that would run ``sh``),
    ``display-message`` without ``-t``, a ``-c`` client flag (``new-session -c`` is a directory, not a client), and
    ``send-keys`` anywhere, even inside an ``if-shell`` branch.
    """
    found = []
    for argv in calls:
        if any("send-keys" in word for word in argv):
            found.append(f"send-keys in {argv}")
        for command in split_commands(argv):
            name, flags = command[0], command[1:]
            if name in FORBIDDEN_SUBCOMMANDS:
                found.append(f"{name} in {argv}")
            if name == "if-shell" and "-F" not in flags:
                found.append(f"if-shell without -F (runs a shell) in {argv}")
            if name == "display-message" and "-t" not in flags:
                found.append(f"display-message without -t in {argv}")
            if name != "new-session" and "-c" in flags:
                found.append(f"-c client in {argv}")
    return found


@dataclass
class TmuxShim:
    """A shim written into ``directory``, with helpers to read its log and set its faults."""

    path: Path
    log_path: Path
    socket: str | None = None  # the server runner() talks to

    @classmethod
    def create(cls, directory: str | os.PathLike[str], real_tmux: str, socket: str | None = None) -> TmuxShim:
        log_path = Path(directory) / "tmux-calls.jsonl"
        return cls(write_tmux_shim(directory, real_tmux, log_path), log_path, socket)

    def runner(self, **options: Any) -> TmuxRunner:
        """A :class:`~the_loop.sessions.tmux.TmuxRunner` whose every tmux call goes through this shim."""
        from the_loop.sessions.tmux import TmuxRunner

        return TmuxRunner(socket=self.socket, binary=str(self.path), **options)

    @property
    def faults_path(self) -> Path:
        return self.path.parent / "tmux-faults.json"

    def calls(self) -> list[list[str]]:
        """Every argv the shim was run with, oldest first."""
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text(encoding="utf-8").splitlines() if line]

    def subcommands(self) -> list[list[str]]:
        """For each call, the names of the commands it ran (``[["has-session", "list-panes"], …]``)."""
        return [[command[0] for command in split_commands(argv)] for argv in self.calls()]

    def count(self, subcommand: str) -> int:
        """How many calls ran ``subcommand`` (anywhere in their chain)."""
        return sum(names.count(subcommand) for names in self.subcommands())

    def clear_log(self) -> None:
        self.log_path.write_text("", encoding="utf-8")

    def set_faults(self, **faults: Any) -> None:
        """Replace the faults (see the module docstring); no arguments clears them."""
        self.faults_path.write_text(json.dumps(faults), encoding="utf-8")
