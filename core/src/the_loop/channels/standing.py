"""Threads no work item owns: a standing session's Slack thread (issue-277, S13/S14).

The binding lives in ``channels/<name>.json`` under ``conversations`` (keyed by the owner, ``standing:<name>``),
never in a work item's record, so nothing that routes ticket events can reach it. A message in such a thread goes
through the same early drops as a reply (bots, strangers, an unreadable mention), is claimed under the channel lock,
and is then handed to the :data:`Sink` the process was given — the standing package, a layer above this one —
instead of the inbox: no ticket is mirrored, no work item is touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from the_loop import control, events
from the_loop.channels.conversations import _lock, _shared, label, state_path
from the_loop.channels.inbound import (
    MENTION,
    acknowledge,
    advance_shared,
    drop,
    newer,
    shared_cursor,
    tell,
    without_bot,
)
from the_loop.interfaces import InboundMessage, ReadingChannel
from the_loop.state import StateError, atomic_write_json, locked

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

Sink = Callable[[str, str, str], str]
"""Delivers ``(owner, text, actor)`` to the thread's owner; "" when delivered, else why not (told to the writer)."""

CAP = 200  # bindings kept, oldest dropped


def threads(config: LoadedConfig, name: str) -> list[tuple[str, dict[str, Any]]]:
    """Every owned thread of channel ``name``: (owner, binding)."""
    found = _shared(config, name).get("conversations")
    if not isinstance(found, dict):
        return []
    return [
        (str(owner), bound)
        for owner, bound in found.items()
        if isinstance(bound, dict) and bound.get("channel") and bound.get("thread")
    ]


def owner_of(config: LoadedConfig, name: str, channel_id: str, thread: str) -> str:
    """Who owns ``thread`` in ``channel_id``; "" when nobody but (perhaps) a work item does."""
    where = (channel_id, thread)
    return next((owner for owner, bound in threads(config, name) if (bound["channel"], bound["thread"]) == where), "")


def bind(config: LoadedConfig, name: str, owner: str, bound: dict[str, Any]) -> None:
    """Remember ``owner``'s thread (replacing an older one); the oldest of more than :data:`CAP` is forgotten."""
    with locked(_lock(config, name)):
        data = _shared(config, name)
        found = data.get("conversations")
        conversations = {k: v for k, v in found.items() if k != owner} if isinstance(found, dict) else {}
        conversations[owner] = bound
        while len(conversations) > CAP:
            del conversations[min(conversations, key=lambda k: str(conversations[k].get("opened") or ""))]
        data["conversations"] = conversations
        atomic_write_json(state_path(config, name), data)


def accept(
    config: LoadedConfig,
    channel: ReadingChannel,
    message: InboundMessage,
    owner: str,
    bot: str,
    run: Callable[[Callable[[], None]], None],
    sink: Sink | None,
) -> str:
    """A message in ``owner``'s thread: the bot's own and strangers' are dropped before the text is read (the
    allow-list only: a work item's collaborators are nobody here), then it is claimed and handed to ``sink``."""
    if message.is_bot or (bot and message.author_id == bot):
        return drop(channel, message, "self-authored", level="debug")
    if not message.author_id or not control.is_principal(control.principals(config), channel.name, message.author_id):
        return drop(channel, message, "unauthorized-actor", level="warning")
    if not bot and MENTION.search(message.text):
        return drop(channel, message, "no-bot-id")
    text = without_bot(message.text, bot)
    if not text.strip():
        return drop(channel, message, "unmapped", level="debug")
    try:
        with locked(_lock(config, channel.name)):
            if not newer(message.message_id, shared_cursor(config, channel.name, message.thread_id)):
                return drop(channel, message, "duplicate", level="debug")
            advance_shared(config, channel.name, message.thread_id, message.message_id)
    except (StateError, OSError) as exc:  # not claimed, not acknowledged: the next read retries it
        events.emit("channel.claim_failed", level="error", channel=channel.name, standing=owner, error=str(exc))
        return "claim-failed"
    events.emit(
        "channel.reply_received",
        channel=channel.name,
        standing=owner,
        kind="standing.say",
        channel_id=message.channel_id,
        thread=message.thread_id,
        message=message.message_id,
        author=message.author_id,
    )
    actor = f"{label(config, channel.name, message.author_id)} ({channel.name}:{message.author_id})"

    def deliver() -> None:
        acknowledge(channel, message, "received")
        why = sink(owner, text, actor) if sink is not None else "this process does not host standing sessions"
        if why:
            drop(channel, message, "undeliverable", level="warning")
            acknowledge(channel, message, "error")
            tell(channel, message, f"Not delivered: {why}")
            return
        events.emit(
            "channel.mirror_skipped",
            channel=channel.name,
            standing=owner,
            reason="standing-session",  # a standing session has no ticket to mirror onto
            message=message.message_id,
        )
        acknowledge(channel, message, "completed")

    run(deliver)
    return "accepted"


def read(config: LoadedConfig, channel: ReadingChannel, bot: str, sink: Sink | None, counts: dict[str, int]) -> None:
    """Poll every owned thread for replies newer than its cursor."""
    for owner, bound in threads(config, channel.name):
        try:
            messages = channel.read_replies(bound, shared_cursor(config, channel.name, str(bound["thread"])))
        except Exception as exc:
            error = f"{exc}"[:500]
            events.emit("channel.read_failed", level="warning", channel=channel.name, standing=owner, error=error)
            continue
        counts["threads"] += 1
        for message in messages:
            counts["messages"] += 1
            if accept(config, channel, message, owner, bot, lambda work: work(), sink) == "accepted":
                counts["accepted"] += 1
