"""Exactly-once control commands across ingresses: ``local/control-deliveries.json`` (seed 004, J20).

A provider whose objects reach this machine through two ingresses (Jira: the poller and the signed webhook) marks its
events ``shared_dedupe``. Before the router executes a control command from such an event it claims the event's
dedupe key here, under an exclusive ``flock`` on ``control-deliveries.json.lock`` that the receiver and the poller
share: a key already present was executed before and is not executed again. The file keeps the newest
:data:`KEEP` keys, oldest first. A command that failed and is handed back for a retry releases its claim, so the retry
is not mistaken for a repeat.

Failures lean towards executing: an unreadable file reads as empty and a failed write still grants the claim (a
repeated command beats a lost one). A claim remembers the inbox entry that took it (``holders``), so when the process
dies in the middle of the command, that same entry's retry after the restart may take it again: only a *different*
delivery of the key is a repeat. Other deliveries never touch the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.state import StateError, atomic_write_json, locked, read_json

if TYPE_CHECKING:
    from the_loop.state import StateLayout

__all__ = ["KEEP", "claim", "claimed", "release"]

FILE = "control-deliveries.json"
KEEP = 256


def _path(layout: StateLayout) -> Path:
    return layout.local_dir / FILE


def _read(path: Path) -> tuple[list[str], dict[str, str]]:
    """(claimed keys oldest first, key → the inbox entry that claimed it)."""
    try:
        data = read_json(path)
    except (StateError, OSError):
        return [], {}
    data = data if isinstance(data, dict) else {}
    values = data.get("deliveries")
    keys = [str(v) for v in values if isinstance(v, str)] if isinstance(values, list) else []
    holders = data.get("holders")
    held = {str(k): str(v) for k, v in holders.items() if isinstance(v, str)} if isinstance(holders, dict) else {}
    return keys, held


def _failed(path: Path, exc: Exception) -> None:
    events.emit("control.claim_failed", level="warning", file=str(path), error=str(exc))


def _write(path: Path, keys: list[str], holders: dict[str, str]) -> None:
    kept = keys[-KEEP:]
    held = {k: holders[k] for k in kept if holders.get(k)}
    try:
        atomic_write_json(path, {"deliveries": kept, **({"holders": held} if held else {})})
    except (StateError, OSError) as exc:
        _failed(path, exc)


def claimed(layout: StateLayout) -> list[str]:
    """The keys claimed so far, oldest first."""
    return _read(_path(layout))[0]


def claim(layout: StateLayout, key: str, holder: str = "") -> bool:
    """Claim ``key`` for the inbox entry ``holder``; False when another delivery claimed it before (the command
    already ran, or runs, on this machine). The same holder may claim again: its earlier try never finished."""
    path = _path(layout)
    try:
        with locked(Path(f"{path}.lock")):  # shared by the receiver and the poller (mode 0600)
            keys, holders = _read(path)
            if key in keys:
                return bool(holder) and holders.get(key) == holder
            keys.append(key)
            if holder:
                holders[key] = holder
            _write(path, keys, holders)
    except (StateError, OSError) as exc:  # no lock to be had: a repeat beats a drop
        _failed(path, exc)
    return True


def release(layout: StateLayout, key: str) -> None:
    """Forget ``key`` so the retry of a failed command executes."""
    path = _path(layout)
    try:
        with locked(Path(f"{path}.lock")):
            keys, holders = _read(path)
            if key in keys:
                _write(path, [k for k in keys if k != key], holders)
    except (StateError, OSError) as exc:
        _failed(path, exc)
