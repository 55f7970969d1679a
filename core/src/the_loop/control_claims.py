"""Exactly-once control commands across ingresses: ``local/control-deliveries.json`` (seed 004, J20).

A provider whose objects reach this machine through two ingresses (Jira: the poller and the signed webhook) marks its
events ``shared_dedupe``. Before the router executes a control command from such an event it claims the event's
dedupe key here, under an exclusive ``flock`` on ``control-deliveries.json.lock`` that the receiver and the poller
share: a key already present was executed before and is not executed again. The file keeps the newest
:data:`KEEP` keys, oldest first. A command that failed and is handed back for a retry releases its claim, so the retry
is not mistaken for a repeat.

Failures lean towards executing: an unreadable file reads as empty and a failed write still grants the claim (a
repeated command beats a lost one). Other deliveries never touch the file.
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


def _read(path: Path) -> list[str]:
    try:
        data = read_json(path)
    except (StateError, OSError):
        return []
    values = (data or {}).get("deliveries") if isinstance(data, dict) else None
    return [str(v) for v in values if isinstance(v, str)] if isinstance(values, list) else []


def _failed(path: Path, exc: Exception) -> None:
    events.emit("control.claim_failed", level="warning", file=str(path), error=str(exc))


def _write(path: Path, keys: list[str]) -> None:
    try:
        atomic_write_json(path, {"deliveries": keys[-KEEP:]})
    except (StateError, OSError) as exc:
        _failed(path, exc)


def claimed(layout: StateLayout) -> list[str]:
    """The keys claimed so far, oldest first."""
    return _read(_path(layout))


def claim(layout: StateLayout, key: str) -> bool:
    """Claim ``key``; False when it was claimed before (the command already ran on this machine)."""
    path = _path(layout)
    try:
        with locked(Path(f"{path}.lock")):  # shared by the receiver and the poller (mode 0600)
            keys = _read(path)
            if key in keys:
                return False
            keys.append(key)
            _write(path, keys)
    except (StateError, OSError) as exc:  # no lock to be had: a repeat beats a drop
        _failed(path, exc)
    return True


def release(layout: StateLayout, key: str) -> None:
    """Forget ``key`` so the retry of a failed command executes."""
    path = _path(layout)
    try:
        with locked(Path(f"{path}.lock")):
            keys = _read(path)
            if key in keys:
                _write(path, [k for k in keys if k != key])
    except (StateError, OSError) as exc:
        _failed(path, exc)
