"""What every reader of a channel shares: message ids compared, the cursors in ``channels/<name>.json`` read and
moved, the bot's mention taken out, a message dropped with its reason, acknowledged or answered (the reply reader in
:mod:`~the_loop.channels.read`, the kickoff reader in :mod:`~the_loop.channels.kickoff`, a standing session's
thread in :mod:`~the_loop.channels.standing`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.channels.conversations import _shared, state_path
from the_loop.interfaces import InboundMessage, ReadingChannel
from the_loop.state import atomic_write_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

MENTION = re.compile(r"<@[UW][A-Z0-9_-]{1,20}(?:\|[^>]*)?>")


def _number(ts: str) -> float | None:
    try:
        return float(ts)
    except ValueError:
        return None


def newer(ts: str, cursor: str) -> bool:
    """Whether message id ``ts`` comes after ``cursor`` (numerically when both are numbers: Slack ``ts``)."""
    if not cursor:
        return True
    a, b = _number(ts), _number(cursor)
    return a > b if a is not None and b is not None else ts > cursor


def drop(channel: ReadingChannel, message: InboundMessage, reason: str, ref: str = "", level: str = "info") -> str:
    events.emit(
        "channel.dropped",
        level=level,
        channel=channel.name,
        reason=reason,
        work_item=ref or None,
        channel_id=message.channel_id,
        thread=message.thread_id,
        message=message.message_id,
        author=message.author_id if reason != "self-authored" else None,
    )
    return reason


def acknowledge(channel: ReadingChannel, message: InboundMessage, state: str) -> None:
    """Show the writer how their message fared (a reaction); a failure is logged and never stops the pipeline."""
    try:
        channel.acknowledge(message, state)  # type: ignore[arg-type]
    except Exception as exc:
        events.emit(
            "channel.reaction_failed",
            level="warning",
            channel=channel.name,
            message=message.message_id,
            state=state,
            error=f"{type(exc).__name__}: {exc}",
        )


def shared_cursor(config: LoadedConfig, name: str, key: str) -> str:
    """The cursor ``key`` (a thread's root, or ``channel:<id>``) in ``channels/<name>.json``; "" when none."""
    found = (_shared(config, name).get("cursors") or {}).get(key)
    return found if isinstance(found, str) else ""


def advance_shared(config: LoadedConfig, name: str, key: str, ts: str) -> None:
    """Move cursor ``key`` in ``channels/<name>.json`` to ``ts`` (the one writer of those cursors; the caller holds
    the channel lock)."""
    data = _shared(config, name)
    cursors = data.get("cursors") if isinstance(data.get("cursors"), dict) else {}
    cursors[key] = ts
    data["cursors"] = cursors
    atomic_write_json(state_path(config, name), data)


def without_bot(text: str, bot: str) -> str:
    """``text`` with the bot's own ``<@id>`` mentions taken out (someone else's mention stays)."""
    return re.sub(rf"<@{re.escape(bot)}(?:\|[^>]*)?>", "", text).strip() if bot else text


def tell(channel: ReadingChannel, message: InboundMessage, text: str) -> None:
    """Answer the writer privately; best-effort."""
    try:
        channel.tell(message, text)
    except Exception as exc:
        events.emit("channel.tell_failed", level="warning", channel=channel.name, error=f"{type(exc).__name__}")
