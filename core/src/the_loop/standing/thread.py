"""A standing session's Slack thread (S13): announced once when it starts and bound as ``standing:<name>``; the
replies of allow-listed people in it reach the session through :func:`~the_loop.standing.control.sink`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.standing import REF_PREFIX, Definition

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

CHANNEL = "slack"  # the definition's ``slack`` block names the channel


def announce(config: LoadedConfig, definition: Definition, record: dict[str, Any]) -> dict[str, str]:
    """The thread a started session talks in: ``slackChannel``/``slackThread`` for its record ({} when it has none).
    A thread it already has is kept (and bound again if the binding was lost); a new one is posted in
    ``slack.channel`` (else the central channel, whatever ``subscribe`` says). A failure is logged
    (``standing.announce_failed``) and never stops the session."""
    from the_loop.channels import channel_named
    from the_loop.channels.standing import bind

    if not definition.slack_enabled:
        return {}
    channel = channel_named(config, CHANNEL)
    if channel is None:  # channels.slack is off: there is nowhere to announce
        return {}
    owner = REF_PREFIX + definition.name
    if record.get("slackChannel") and record.get("slackThread"):
        kept = {"slackChannel": str(record["slackChannel"]), "slackThread": str(record["slackThread"])}
        bound = {"channel": kept["slackChannel"], "thread": kept["slackThread"], "origin": "standing"}
        try:
            bind(config, CHANNEL, owner, {"opened": events.timestamp(), **bound})
        except Exception as exc:
            _failed(definition, exc)
        return kept
    about = f" ({definition.description})" if definition.description else ""
    text = (
        f"The standing session *{definition.name}*{about} is up. Reply in this thread to talk to it: messages "
        "from authorized people are pasted into its session."
    )
    try:
        made = channel.open_thread(definition.slack_channel, f"the-loop · standing session {definition.name}", text)
        bound = {
            "channel": str(made["channel"]),
            "thread": str(made["thread"]),
            "opened": events.timestamp(),
            "origin": "standing",
            "permalink": str(made.get("permalink") or ""),
        }
        bind(config, CHANNEL, owner, bound)
    except Exception as exc:
        _failed(definition, exc)
        return {}
    events.emit(
        "standing.announced",
        standing=definition.name,
        channel=CHANNEL,
        channel_id=bound["channel"],
        thread=bound["thread"],
    )
    return {"slackChannel": bound["channel"], "slackThread": bound["thread"]}


def _failed(definition: Definition, exc: Exception) -> None:
    events.emit(
        "standing.announce_failed",
        level="warning",
        standing=definition.name,
        channel=CHANNEL,
        error=f"{type(exc).__name__}: {exc}"[:300],
    )
