"""Publishing a work item's events into its conversations, and the undelivered queue behind them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.channels import outbox as channel_outbox
from the_loop.channels.conversations import (
    BOUND_ONLY,
    PUBLISHED_CAP,
    _lock,
    _shared,
    binding,
    enabled_channels,
    open_conversation,
    state_path,
)
from the_loop.interfaces import Channel, ChannelError, ChannelMessage
from the_loop.refs import WorkItemRef, parse_ref
from the_loop.state import StateError, atomic_write_json, locked

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


def _post(config: LoadedConfig, channel: Channel, event: Mapping[str, Any]) -> None:
    """Post one queued-shape event on ``channel``, opening the conversation lazily (origin ``event``)."""
    work_item = str(event.get("workItem") or "")
    bound: Mapping[str, Any] = {}
    if work_item:
        bound = open_conversation(config, channel, parse_ref(work_item), "event")
    message = ChannelMessage(
        event_type=str(event.get("eventType") or ""),
        work_item=work_item,
        text=str(event.get("text") or ""),
        url=str(event.get("url") or ""),
        actor=str(event.get("actor") or ""),
        max_chars=channel.max_chars(),
    )
    channel.publish(bound, message)
    events.emit(
        "channel.posted",
        channel=channel.name,
        work_item=work_item or None,
        event_type=message.event_type,
        thread=bound.get("thread") or None,
    )


def publish(
    config: LoadedConfig,
    event_type: str,
    work_item: WorkItemRef | str,
    *,
    text: str = "",
    url: str = "",
    actor: str = "",
    source: str = "loop",
    key: str = "",
) -> list[str]:
    """Post an event to every enabled channel subscribed to ``event_type`` (never the one it came from); the
    names that accepted it. When channels were asked and none accepted, it is queued. With ``key``, an event
    already published under it is not published again (an inbox retry). Never raises."""
    event = {"eventType": event_type, "workItem": str(work_item), "text": text, "url": url, "actor": actor}
    event["source"] = source
    asked, accepted, errors = [], [], []
    retry_after: float | None = None
    try:
        channels = enabled_channels(config)
    except Exception as exc:  # a broken plugin host must not fail the publisher
        events.emit("channel.post_failed", level="warning", event_type=event_type, error=str(exc))
        return []
    for channel in channels:
        if channel.name == source or event_type not in channel.subscribed():
            continue
        if event_type in BOUND_ONLY and (not str(work_item) or binding(config, channel.name, work_item) is None):
            continue  # saying a work item closed is no reason to open a conversation for it
        if key and not _first_publish(config, channel.name, key):
            continue
        asked.append(channel.name)
        if str(work_item) and channel_outbox.pending_for(config, str(work_item), channel.name):
            errors.append("queued behind the work item's undelivered events")  # order within a conversation
            continue
        try:
            _post(config, channel, event)
            accepted.append(channel.name)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            retry_after = getattr(exc, "retry_after", None) or retry_after
            errors.append(error)
            events.emit(
                "channel.post_failed",
                level="warning",
                channel=channel.name,
                work_item=str(work_item) or None,
                event_type=event_type,
                error=error[:500],
            )
    if asked and not accepted:
        channel_outbox.queue(config, asked, event, "; ".join(errors), retry_after=retry_after)
    return accepted


def _first_publish(config: LoadedConfig, name: str, key: str) -> bool:
    """Claim ``key`` in ``channels/<name>.json`` (the newest :data:`PUBLISHED_CAP`); False when it was claimed before.
    Claimed before the post: at most once, and a failed post is still queued."""
    try:
        with locked(_lock(config, name)):
            data = _shared(config, name)
            published = [k for k in data.get("published") or [] if isinstance(k, str)]
            if key in published:
                return False
            data["published"] = [*published, key][-PUBLISHED_CAP:]
            atomic_write_json(state_path(config, name), data)
    except (StateError, OSError) as exc:  # the ledger is unwritable: publish anyway (a repeat beats a loss)
        events.emit("channel.post_failed", level="warning", channel=name, error=str(exc)[:500])
    return True


def drain(config: LoadedConfig, now: float | None = None) -> channel_outbox.DrainReport:
    """One drain of the undelivered queue (re-posts only; never the ticket)."""
    by_name = {channel.name: channel for channel in enabled_channels(config)}

    def post(name: str, event: Mapping[str, Any]) -> None:
        channel = by_name.get(name)
        if channel is None:
            raise ChannelError(f"channel {name} is not enabled")
        _post(config, channel, event)

    return channel_outbox.drain(config, post, now=now)
