"""What every reader of a channel shares: message ids compared, a message dropped with its reason, a message
acknowledged (the reply reader in :mod:`~the_loop.channels.read`, the kickoff reader in
:mod:`~the_loop.channels.kickoff`)."""

from __future__ import annotations

from the_loop import events
from the_loop.interfaces import InboundMessage, ReadingChannel


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
