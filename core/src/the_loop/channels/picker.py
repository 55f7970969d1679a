"""The kickoff repository picker's questions: ``pending[<message ts>]`` in ``channels/<name>.json``.

A kickoff that names no usable repository, on a channel a press can reach, is parked here while the member picks
one. Every change happens under the channel lock, and an answer pops its question before the issue is created
(restored when creation fails), so two presses can never open two issues (issue-349). An ``asked`` that cannot be
read counts as expired: fail closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.channels.conversations import _lock, _shared, state_path
from the_loop.interfaces import InboundMessage, ReadingChannel
from the_loop.state import atomic_write_json, locked

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

ASKABLE = ("no-target", "ambiguous-repo", "unknown-repo")
PENDING_CAP = 50
OPTIONS_CAP = 100  # a static_select holds at most 100 options
TTL_SECONDS = 86400.0


def options_for(channel: ReadingChannel, outcome: str, declared: Sequence[str]) -> list[str]:
    """The repositories to offer, [] when no picker is possible: the outcome is not askable, nothing is declared,
    or no press can reach this instance (only a socket listener receives one)."""
    if outcome not in ASKABLE or channel.read_mode() != "socket":
        return []
    return list(declared[:OPTIONS_CAP])


def _pending(data: dict[str, Any]) -> dict[str, Any]:
    found = data.get("pending")
    return found if isinstance(found, dict) else {}


def _write(config: LoadedConfig, name: str, data: dict[str, Any], pending: dict[str, Any]) -> None:
    data["pending"] = dict(list(pending.items())[-PENDING_CAP:])  # insertion order: the oldest go first
    atomic_write_json(state_path(config, name), data)


def park(config: LoadedConfig, name: str, message: InboundMessage, text: str, options: Sequence[str]) -> bool:
    """Record the question for ``message`` (under the lock); False when it was already asked."""
    with locked(_lock(config, name)):
        data = _shared(config, name)
        pending = _pending(data)
        if message.message_id in pending:
            return False
        pending[message.message_id] = {  # the declared shape: state.PENDING_FIELDS
            "channel": message.channel_id,
            "author": message.author_id,
            "text": text,
            "options": list(options),
            "asked": events.timestamp(),
        }
        _write(config, name, data, pending)
    return True


def forget(config: LoadedConfig, name: str, ts: str) -> None:
    with locked(_lock(config, name)):
        data = _shared(config, name)
        pending = _pending(data)
        if pending.pop(ts, None) is not None:
            _write(config, name, data, pending)


def restore(config: LoadedConfig, name: str, ts: str, record: dict[str, Any]) -> None:
    """Put back a question whose answer failed to create its issue, so the member can press again."""
    with locked(_lock(config, name)):
        data = _shared(config, name)
        pending = _pending(data)
        pending.setdefault(ts, record)
        _write(config, name, data, pending)


def live(record: dict[str, Any], now: float) -> bool:
    try:
        asked = datetime.fromisoformat(str(record.get("asked") or "").replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False  # unreadable: expired (fail closed)
    return 0 <= now - asked < TTL_SECONDS


def claim(
    config: LoadedConfig, name: str, ts: str, author: str, value: str, declared: Sequence[str], now: float
) -> tuple[str, dict[str, Any]]:
    """("", the record) with the question popped (under the lock) when ``author`` may answer it with ``value``;
    else (the drop reason, {}) and nothing changes but an expired question being forgotten."""
    with locked(_lock(config, name)):
        data = _shared(config, name)
        pending = _pending(data)
        record = pending.get(ts)
        if not isinstance(record, dict):
            return "no-pending-kickoff", {}
        if str(record.get("author") or "") != author:
            return "not-your-kickoff", {}
        if not live(record, now):
            del pending[ts]
            _write(config, name, data, pending)
            return "no-pending-kickoff", {}
        if value not in (record.get("options") or []) or value not in declared:
            return "undeclared-repository", {}
        del pending[ts]
        _write(config, name, data, pending)
    return "", record
